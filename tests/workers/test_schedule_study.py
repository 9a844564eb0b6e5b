"""A ``schedule`` study end to end (issue 45): stable runs with snapshots, WSD decay branches that
start from them, cosine runs, then ``cbs study fit`` (S(B) and B* per schedule) and ``cbs study
export`` (the steps table ``cbs fit`` reads), on the test token store with a real MLflow store."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from cbs import main as cbs_main
from cbscore.study import StudySpec
from tests.workers.conftest import DATA
from tests.workers.test_extend_retry import drain
from workers.query import api
from workers.studies.decay_study import snapshot_folders
from workers.studies.local_study import delete_study_artifacts


def schedule_spec(name: str) -> StudySpec:
    """tiny-0.1M at T = 16, D = 2,048 tokens, B = 4 and 8 (64 and 128 tokens a step), one rate and
    seed; horizons D/2, D, 2D (ratio 2) for both WSD and cosine: per B one stable run, three decay
    branches and three cosine runs."""
    return StudySpec.from_dict(dict(
        name=name, kind="schedule", models=["tiny-0.1M"], tokens=[2048], context_tokens=16, batch_sizes=[4, 8],
        b_ref=4, warmup_fraction=0.1, eval_windows=16, search={"kind": "grid", "lrs": [0.01]}, data=dict(DATA),
        decay={"horizon_low": 0.5, "horizon_high": 2.0, "wsd_ratio": 2.0, "cosine_ratio": 2.0}))


def test_a_schedule_study_runs_its_decay_branches_from_the_stable_runs_and_fits_each_schedule(
        worker_env, token_store, capsys, tmp_path):
    name = "sch1"
    spec = schedule_spec(name)
    api.launch_study(spec)
    first = {r.trial_id for r in api.study_records(name)}
    assert f"{name}.b4.lr1e-2.s0.stable" in first and not any(".wsd." in t for t in first)  # branches wait
    ran = drain(name)
    status = api.study_status(name)
    assert status.status == "done" and status.counts == {"finished": 14}
    assert cbs_main(["study", "status", name]) == 0  # every cell, its role and state
    assert "tiny-0.1M_D2.048K.b4.wsd" in capsys.readouterr().out
    assert sorted(t for t in ran if ".wsd." in t) == sorted(
        f"{name}.b{b}.lr1e-2.s0.wsd.h{h}" for b, hs in ((4, (16, 32, 64)), (8, (8, 16, 32))) for h in hs)
    # the snapshots are the study's, one folder per stable run
    folders = snapshot_folders(spec)
    assert all(Path(f).is_dir() for f in folders.values())
    records = {r.trial_id: r for r in api.study_records(name)}
    branch = records[f"{name}.b4.lr1e-2.s0.wsd.h32"]
    assert branch.tokens == (32 - 26) * 64  # only its decay: from step 26 (round(0.2·32) = 6 steps)

    capsys.readouterr()
    assert cbs_main(["study", "fit", name, "--json", "--bootstrap", "50"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["kind"] == "schedule" and set(fit["schedules"]) == {"constant_ewa", "cosine", "wsd"}
    for entry in fit["schedules"].values():
        assert entry["target"] is not None and len(entry["rows"]) == 2
    # B_ref's own run reaches its own target at D: steps 32 at B = 4 (each schedule's target is its loss there)
    wsd_ref = [r for r in fit["schedules"]["wsd"]["rows"] if r["batch_size"] == 4][0]
    assert wsd_ref["outcome"] == "reached" and wsd_ref["steps"] == 32
    assert cbs_main(["study", "fit", name]) == 0
    assert "wsd: target" in capsys.readouterr().out

    out = tmp_path / "steps.csv"
    assert cbs_main(["study", "export", name, "-o", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert {r["setting"] for r in rows} == {f"tiny-0.1M_D2.048K.{s}" for s in ("constant_ewa", "cosine", "wsd")}
    # cbs fit on the exported table gives each schedule's B* as the study's fit did
    capsys.readouterr()
    assert cbs_main(["fit", str(out), "--b-ref", "4", "--bootstrap", "50", "--json"]) == 0
    table_fit = {s["setting"]: s for s in json.loads(capsys.readouterr().out)["settings"]}
    for schedule, entry in fit["schedules"].items():
        again = table_fit[f"tiny-0.1M_D2.048K.{schedule}"]
        assert again["steps"] == [p["steps"] for p in entry["points"]]
        assert again["cbs"] == (None if entry["fit"] is None else entry["fit"]["cbs"])
    # cbs study report: the same table, its fit, the schedules side by side on one Curves figure
    from app.report import write_report

    files = write_report(name, tmp_path / "report", command="test")
    assert {"steps.csv", "fit.json", "fit.txt", "schedules.json", "schedules.txt", "summary.json"} <= set(files)
    assert any(f.startswith("curves") for f in files)
    assert (tmp_path / "report" / "steps.csv").read_text() == out.read_text()
    assert "wsd: target" in (tmp_path / "report" / "schedules.txt").read_text()
    assert delete_study_artifacts(name)


def test_the_dry_run_of_a_schedule_study_lists_its_decay_branches_and_their_tokens(worker_env, token_store, tmp_path,
                                                                                   capsys):
    path = tmp_path / "sched.yaml"
    path.write_text(schedule_spec("schdry").to_yaml())
    assert cbs_main(["study", "launch", str(path), "--dry-run", "--tokens-per-s", "20000"]) == 0
    out = capsys.readouterr().out
    # B = 4: horizons 16, 32, 64 steps of 64 tokens; decays of 3, 6, 13 steps from steps 13, 26, 51
    assert ("B=4: wsd decay branches (f = 0.2 to 0.1·lr) at H = 16, 32, 64 steps, from steps 13, 26, 51: "
            "1.41K tokens per stable run") in out
    assert "B=4: stable run (constant) 64 steps = 4.1K tokens" in out
    assert "B=8: cosine runs (to 0.1·lr) at H = 8, 16, 32 steps: 7.17K tokens per family" in out
    # stable runs 2 × 4,096; decay branches (3+6+13)·64 + (2+3+6)·128; cosine runs (16+32+64)·64 + (8+16+32)·128
    assert "tokens: stable runs 8.19K, decay branches 2.82K, cosine runs 14.3K; 25.3K in all, 14 trials" in out
    assert "reference trials" not in out and "stopping at the target" not in out
    assert api.list_studies() == []  # a dry run launches nothing
