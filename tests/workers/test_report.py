"""``cbs study report``: a study's evidence written so that anyone can refit it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cbs import main as cbs_main
from tests.app import store_seed
from workers.infra.settings import WorkerSettings
from workers.tracking import Tracker


def test_report_writes_a_refittable_table_its_fit_and_the_cost(worker_env, tmp_path, capsys):
    s = WorkerSettings.from_env()
    spec = store_seed.spec_for("rep", n_settings=1, batch_sizes=(8, 16, 32, 64), lrs=(0.003, 0.01, 0.03), b_ref=16)
    [seeded] = store_seed.seed_study(Tracker(s.tracking_uri, worker_env["CBS_ARTIFACT_ROOT"]), spec).values()
    out = tmp_path / "results" / "rep"
    assert cbs_main(["study", "report", "rep", "--out", str(out)]) == 0
    assert "cbs study report: 'rep' →" in capsys.readouterr().out
    names = {p.name for p in out.iterdir()}
    assert {"steps.csv", "trials.csv", "fit.json", "spec.yaml", "summary.json"} <= names
    assert any(n.startswith("curves") for n in names)  # PNG with kaleido and a Chrome, HTML otherwise
    summary = json.loads((out / "summary.json").read_text())
    assert summary["study"] == "rep" and summary["tokens_spent"] > 0 and summary["machine"]["cpus"] >= 1
    assert summary["refit"] == "cbs fit steps.csv --b-ref 16 --overhead 0.2 --json"
    # The seeded best learning rate is the middle one at every batch size: never at the grid's edge.
    best = summary["best_learning_rates"]
    assert [b["batch_size"] for b in best] == [8, 16, 32, 64]
    assert all(b["best_lr"] == 0.01 and b["at_grid_edge"] is None for b in best)
    # The committed fit is what `cbs fit` gives on the committed CSV, byte for byte.
    refit = subprocess.run([sys.executable, "-c", "import sys; from cbs import main; sys.exit(main(sys.argv[1:]))",
                            "fit", str(out / "steps.csv"), "--b-ref", "16", "--overhead", "0.2", "--json"],
                           capture_output=True, text=True, check=True)
    assert refit.stdout == (out / "fit.json").read_text()
    readable = subprocess.run([sys.executable, "-c", "import sys; from cbs import main; sys.exit(main(sys.argv[1:]))",
                               "fit", str(out / "steps.csv"), "--b-ref", "16", "--overhead", "0.2"],
                              capture_output=True, text=True, check=True)
    assert readable.stdout == (out / "fit.txt").read_text()  # the readable fit, doubling ratios included
    assert "doubling ratios (within each seed, then averaged)" in readable.stdout
    assert json.loads(refit.stdout)["settings"][0]["cbs"] is not None
    # The seeded trials log B_simple = B_noise / 3: the forecast is B_noise / 3 and the calibration 3.
    setting = spec.resolve_settings()[0].setting_id
    forecast = json.loads((out / "forecast.json").read_text())
    assert [f["setting"] for f in forecast["forecast"]["settings"]] == [setting]
    b_noise = json.loads(refit.stdout)["settings"][0]["b_noise"]
    b_hat = forecast["forecast"]["settings"][0]["b_hat"]
    assert b_hat == pytest.approx(seeded.b_noise / store_seed.GNS_RATIO, rel=1e-9)
    # The measured B_noise is the seeded one to the fit across rates' 0.1% (three rates spaced
    # 3.33× and 3×: the parabola's optimum sits a little off the middle rate), so c is 3 to that.
    assert b_noise == pytest.approx(seeded.b_noise, rel=0.005)
    assert forecast["calibration"]["factor"] == pytest.approx(b_noise / b_hat, rel=1e-9)
    gns = (out / "gns.csv").read_text().splitlines()
    assert gns[0] == "trial_id,setting,batch_size,role,lr,outcome,step,tokens,g2,trace_sigma,b_simple"
    assert len(gns) > 12 and any(n.startswith("forecast-vs-measured") for n in names | {p.name for p in out.iterdir()})


def test_report_of_an_unknown_study_names_it_and_writes_nothing(worker_env, tmp_path, capsys):
    out = tmp_path / "nothing"
    assert cbs_main(["study", "report", "nope", "--out", str(out)]) == 2
    assert "nope" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow  # in `make test-all` (the default run stays a few minutes; docs/operating.md#tests-and-benchmarks)
def test_a_report_replaces_the_whole_folder_and_keeps_only_its_readme(worker_env, tmp_path):
    """Issue 22, finding 7: the report is made beside its folder and put in place with one rename;
    a file of an earlier report (one this study no longer makes) never survives."""
    s = WorkerSettings.from_env()
    spec = store_seed.spec_for("rep2", n_settings=1, batch_sizes=(8, 16, 32), lrs=(0.003, 0.01, 0.03), b_ref=16)
    store_seed.seed_study(Tracker(s.tracking_uri, worker_env["CBS_ARTIFACT_ROOT"]), spec)
    out = tmp_path / "results" / "rep2"
    out.mkdir(parents=True)
    (out / "README.md").write_text("notes by hand\n")
    (out / "stale-forecast.json").write_text("{}")
    (out / "steps.csv").write_text("an earlier table\n")
    assert cbs_main(["study", "report", "rep2", "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert "stale-forecast.json" not in names and {"README.md", "steps.csv", "summary.json"} <= names
    assert (out / "README.md").read_text() == "notes by hand\n"
    assert (out / "steps.csv").read_text() != "an earlier table\n"
    assert [p.name for p in out.parent.iterdir()] == ["rep2"]  # no temporary left beside it
