"""Issue 24, "launch the schedule": the warm-up read off a local study's fitted curve, trained as
a run beside its small- and large-batch controls at equal tokens (Merrill et al. 2025, Table 1).
The launch's patch and what stops it (pure, on a fit of known curve), the readout of the arms
over seeds (pure, known answers), and the whole path on a real ``cbs worker``: a tiny local study,
``cbs study warmup``, the three arms trained, the readout in ``cbs study fit --json``."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from cbs import main as cbs_main
from cbscore.errors import ConfigError
from cbscore.local import LocalStudyReadout, SeedInterval
from cbscore.study import StudySpec, TrialRecord
from tests.app.test_local_charts import records as branch_records
from tests.app.test_local_charts import spec as curve_spec
from tests.workers.conftest import CBS, wait_for
from tests.workers.test_extend_retry import drain
from tests.workers.test_local_study import local_spec
from workers.query import api
from workers.studies.local_fit import local_readout, seed_interval
from workers.studies.local_warmup import warmup_blocker, warmup_patch

SQRT2 = math.sqrt(2)


def _fit(drop: str | None = None) -> LocalStudyReadout:
    recs, curves = branch_records()
    recs = [r for r in recs if r.trial_id != drop]
    return local_readout(curve_spec(), recs, lambda r: curves[r.trial_id])


def test_the_patch_is_the_fitted_curves_schedule_on_the_equal_token_grid():
    # B*(t) = t/128 (B* doubles from 1,024 to 2,048 tokens): 8 at 1,024, 16 at 2,048 (the grid's top, k = 4)
    assert warmup_patch(_fit()) == {"local": {"warmup_run": True,
                                              "warmup_schedule": [[1024, 8, pytest.approx(SQRT2)], [2048, 16, 2.0]]}}
    assert warmup_blocker(_fit()) is None


def test_what_stops_a_launch_is_named_with_its_value():
    assert warmup_blocker(_fit(drop="loc.t2048.k4.s0")) == (
        "branches_pending: must be 0: wait for every branch to end, so that the curve is read off every checkpoint, "
        "but got 1.")
    with pytest.raises(ConfigError, match="^rule: must be one of merrill, noise_aware, but got 'cubic'."):
        warmup_patch(_fit(), "cubic")
    launched = dataclasses.replace(_fit(), warmup_run=True)
    assert warmup_blocker(launched).startswith("local.warmup_run: is set already")
    unfitted = dataclasses.replace(_fit(), warmup={"merrill": None, "noise_aware": None})
    assert warmup_blocker(unfitted).startswith("curve.merrill: must be fitted before its schedule can be launched")
    fit = _fit()
    warm = fit.warmup["merrill"]
    flat = dataclasses.replace(fit, warmup={**fit.warmup, "merrill": dataclasses.replace(
        warm, plan=dataclasses.replace(warm.plan, batch_schedule=(), notes=("no switch",)))})
    assert warmup_blocker(flat).startswith("warmup.merrill.batch_schedule: recommends no switch within D = 4,096")


def _arm_record(role: str, seed: int, loss: float, steps: int, batch: int) -> TrialRecord:
    return TrialRecord(trial_id=f"loc.{role}.s{seed}", cell_id=role, setting_id="s", role=role, batch_size=batch,
                       lr=0.01, status="finished", final_eval_loss=loss, last_step=steps, tokens=4096, seed=seed)


def test_the_readout_compares_the_arms_over_seeds_with_an_interval():
    spec = StudySpec.from_dict({**curve_spec().to_dict(), "seeds": [0, 1, 2], "local": {
        **curve_spec().local.to_dict(), "warmup_run": True, "warmup_schedule": [[1024, 8, SQRT2], [2048, 16, 2.0]]}})
    losses = {"warmup": (5.00, 5.02, 4.99), "control-small": (5.01, 5.00, 5.00), "control-large": (5.20, 5.25, 5.22)}
    steps = {"warmup": 32, "control-small": 64, "control-large": 16}
    recs = [_arm_record(role, s, losses[role][s], steps[role], 16 if role == "control-large" else 4)
            for role in losses for s in range(3)]
    arms = local_readout(spec, recs, lambda r: []).arms
    small = arms.arm("control-small").final_eval_loss
    # mean ± t(0.975, 2)·SE: SE = sd/√3 = 0.005774/√3, t = 4.3027
    assert small.mean == pytest.approx(5.003333, abs=1e-6) and small.interval_kind == "t95"
    assert small.interval == (pytest.approx(5.003333 - 0.014342, abs=1e-5), pytest.approx(5.003333 + 0.014342, abs=1e-5))
    assert [arms.arm(r).steps for r in ("warmup", "control-small", "control-large")] == [(32,), (64,), (16,)]
    assert arms.arm("warmup").planned_steps == 32 and arms.arm("control-large").final_lr == pytest.approx(0.02)
    c = arms.comparison
    # paired differences −0.01, +0.02, −0.01: mean 0, SE 0.01; tolerance max(ε = 0.01, 1.645·0.01)
    assert c.loss_difference_nats == pytest.approx(0.0, abs=1e-12) and c.difference_se_nats == pytest.approx(0.01)
    assert c.tolerance_nats == pytest.approx(0.016449, abs=1e-6) and c.matched and c.fewer_steps
    assert c.steps_saved == 32 and c.fraction_saved == 0.5 and c.tokens_equal
    assert arms.verdict.startswith("The warm-up matched the small-batch control's held-out loss (5.0033 against "
                                      "5.0033 nats, difference +0.0000 within the tolerance 0.0164) in 32 steps "
                                      "against 64 (50.0% fewer)")
    assert seed_interval([1.0, 3.0]) == SeedInterval(mean=2.0, interval=(1.0, 3.0), interval_kind="range", n=2)
    assert local_readout(curve_spec(), [], lambda r: []).arms is None  # no warm-up phase, no arms


def test_the_dry_run_of_a_spec_with_its_warmup_lists_the_arms(worker_env, token_store, tmp_path, capsys):
    spec = local_spec("locdry2", warmup_run=True, warmup_schedule=[[1024, 8, SQRT2], [2048, 16, 2.0]])
    path = tmp_path / "loc.yaml"
    path.write_text(spec.to_yaml())
    assert cbs_main(["study", "launch", str(path), "--dry-run", "--tokens-per-s", "20000"]) == 0
    out = capsys.readouterr().out
    assert "and per seed the warm-up and its controls at equal tokens:" in out
    assert "control-large  B =    16 → 16    lr 0.02 → 0.02  4,096 tokens in 16 steps; switches: none" in out
    assert api.list_studies() == []


def test_the_schedule_launched_from_the_cli_trains_three_arms_on_a_real_worker(worker_env, processes, token_store,
                                                                               capsys):
    """tiny-0.1M, B0 = 4, T = 16, D = 4,096; k ∈ {1, 2} at 1,024 and 2,048 tokens. With ε = 10 nats every
    k passes, the local CBS is the grid's top (8) at both checkpoints and the flat curve switches at
    once, moved to the first whole step of the final batch: 8 at 128 tokens, lr ×√2; 2 + 31 = 33
    steps against 64 at B0 and 32 at 8. The base run and branches train in this process; the three
    arms on a real worker process, advanced by a real runner."""
    name = "locwarm"
    api.launch_study(local_spec(name, multipliers=[1, 2], epsilon=10))
    drain(name)  # the base run and its four branches, in this process
    capsys.readouterr()
    assert cbs_main(["study", "warmup", name, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "warmup         B =     4 → 8     lr 0.01 → 0.01414  4,096 tokens in 33 steps; switches: 8 at 128 (lr ×1.41)" in out
    assert "control-small  B =     4 → 4     lr 0.01 → 0.01  4,096 tokens in 64 steps" in out
    assert api.study_spec(name).local.warmup_run is False  # a dry run launches nothing

    worker = processes.worker()
    processes.start([CBS, "study", "watch", "--period", "1"], "runner")
    assert cbs_main(["study", "warmup", name]) == 0
    assert cbs_main(["study", "warmup", name]) == 2  # once only
    assert "local.warmup_run: is set already" in capsys.readouterr().err
    wait_for(lambda: api.study_status(name).status == "done", 180, every_s=1,
             what=lambda: "the arms to finish\n" + processes.log(worker)[-3000:])
    assert api.study_status(name).counts == {"finished": 8}

    capsys.readouterr()
    assert cbs_main(["study", "fit", name, "--json"]) == 0
    arms = json.loads(capsys.readouterr().out)["arms"]
    by_role = {a["role"]: a for a in arms["arms"]}
    assert [a["finished"] for a in arms["arms"]] == [1, 1, 1]
    assert {tuple(a["tokens"]) for a in arms["arms"]} == {(4096,)}  # equal tokens
    assert [by_role[r]["steps"] for r in ("warmup", "control-small", "control-large")] == [[33], [64], [32]]
    assert by_role["warmup"]["batch_schedule"] == [[128, 8, pytest.approx(SQRT2)]]
    assert by_role["control-large"]["batch_size"] == 8 and by_role["control-large"]["lr"] == pytest.approx(0.01 * SQRT2)
    c = arms["comparison"]
    assert c["fewer_steps"] and c["steps_saved"] == 31 and c["tokens_equal"]
    losses = [a["final_eval_loss"]["mean"] for a in arms["arms"]]
    assert all(math.isfinite(x) and 0 < x < math.log(320) for x in losses)
    assert c["loss_difference"] == pytest.approx(losses[0] - losses[1])
    assert arms["verdict"].startswith("The warm-up " + ("matched" if c["matched"] else "did not match"))
    assert cbs_main(["study", "fit", name]) == 0
    assert "warm-up against its controls at 4,096 tokens each" in capsys.readouterr().out
