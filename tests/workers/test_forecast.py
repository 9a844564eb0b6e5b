"""The study's noise-scale forecast from its records, and forecast_from at launch."""

from __future__ import annotations

import pytest

from cbscore.analysis import analyze_table
from cbscore.errors import ConfigError
from cbscore.study import StudySpec, TrialRecord
from workers.studies.forecast import forecast_range, forecast_spec, study_forecast


def spec(**changes) -> StudySpec:
    base = dict(name="src", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 50_000},
                                                     {"model": "tiny-0.1M", "tokens": 200_000}],
                batch_sizes=[2, 4, 8, 16, 32], b_ref=2, context_tokens=128, gns_micro_batch_size=1,
                search={"kind": "grid", "lrs": [0.01, 0.02]})
    return StudySpec.from_dict({**base, **changes})


#: D/(B_ref·T) of each setting: a reference run's last evaluation, where the target is read.
REF_STEPS = {"tiny-0.1M_D50K": 50_000 / 256, "tiny-0.1M_D200K": 200_000 / 256}


def reference(setting: str, lr: float, final: float, run_id: str) -> TrialRecord:
    return TrialRecord(trial_id=f"src.{setting}.b2.{lr}", cell_id=f"{setting}.b2", setting_id=setting,
                       role="reference", batch_size=2, lr=lr, status="finished", final_eval_loss=final,
                       run_id=run_id, eval_steps=(0.0, 100.0, REF_STEPS[setting]), eval_losses=(9.0, 6.0, final))


def records():
    return [reference("tiny-0.1M_D50K", 0.01, 5.5, "a1"), reference("tiny-0.1M_D50K", 0.02, 5.4, "a2"),
            reference("tiny-0.1M_D200K", 0.01, 5.0, "b1"), reference("tiny-0.1M_D200K", 0.02, 5.2, "b2")]


# B_simple logged every 10 steps: 6 all along in the best D50K run (a2), 2 in the other (a1)
HISTORY = {"a1": [2.0] * 20, "a2": [6.0] * 20, "b1": [18.0] * 20, "b2": [1.0] * 20}


def history(run_id, key):
    assert key == "gns/b_simple"
    return [float(s) for s in range(10, 201, 10)], HISTORY[run_id]


def test_forecast_comes_from_the_best_reference_run_of_each_setting():
    out = study_forecast(spec(), records(), history)
    assert [f.setting for f in out.forecasts] == ["tiny-0.1M_D50K", "tiny-0.1M_D200K"]
    d50, d200 = out.forecasts
    assert d50.run_id == "a2" and d50.b_hat == pytest.approx(6.0)  # the run that set the target
    # Two rates only: the target is the better run's loss at D, reached at its last evaluation.
    ref = REF_STEPS["tiny-0.1M_D50K"]
    assert d50.target_step == pytest.approx(ref)
    assert d50.s_min == pytest.approx(ref / (1 + 6.0 / 2))  # McCandlish eq. 2.11 per step
    assert d200.cbs == pytest.approx(1.2 * 2 + 0.2 * 18.0)
    assert out.calibration is None and out.errors == ()
    # before the reference runs of a setting finish, it is named, not guessed
    partial = study_forecast(spec(), records()[:3], history)
    assert [f.setting for f in partial.forecasts] == ["tiny-0.1M_D50K"]
    assert any("tiny-0.1M_D200K" in e and "no target yet" in e for e in partial.errors)


def calibrated():
    # measured B_noise is 2× the forecast: 12 and 36 sequences (exact curves)
    rows = [{"setting": s, "batch_size": b, "steps": 100.0 * (1 + bn / b)}
            for s, bn in (("tiny-0.1M_D50K", 12.0), ("tiny-0.1M_D200K", 36.0)) for b in (2, 4, 8, 16, 32, 64)]
    analysis = analyze_table(rows, b_ref=2, overhead=0.2, bootstrap=100)
    return study_forecast(spec(), records(), history, analysis, bootstrap=100)


def test_calibration_and_json_keys():
    out = calibrated()
    assert out.calibration.factor == pytest.approx(2.0, rel=1e-6)
    forecast, calibration = out.to_json_dict()
    assert [s["setting"] for s in forecast["settings"]] == ["tiny-0.1M_D50K", "tiny-0.1M_D200K"]
    assert calibration["factor"] == pytest.approx(2.0, rel=1e-6)
    assert [s["ratio"] for s in calibration["settings"]] == pytest.approx([2.0, 2.0], rel=1e-6)


def test_forecast_from_chooses_batch_sizes_around_the_calibrated_forecast():
    new = spec(name="big", settings=[{"model": "tiny-0.1M", "tokens": 200_000}, {"model": "tiny-0.1M", "tokens": 800_000}],
               forecast_from="src")
    replaced, chosen = forecast_spec(new, calibrated())
    # D200K is in the source (B̂ 18, ×2 = 36); D800K borrows the nearest D (200K) of the same model
    assert chosen.b_noise == pytest.approx({"tiny-0.1M_D200K": 36.0, "tiny-0.1M_D800K": 36.0})
    assert chosen.borrowed == {"tiny-0.1M_D200K": "tiny-0.1M_D200K", "tiny-0.1M_D800K": "tiny-0.1M_D200K"}
    assert replaced.batch_sizes == chosen.batch_sizes == (1, 2, 4, 8, 16, 32, 64, 128, 256)  # B_ref/2 … ≥ 4 × 36
    assert "c = 2" in chosen.describe()
    with pytest.raises(ConfigError, match=r"^forecast_from: has no calibrated forecast yet .*but got 'src'\.$"):
        forecast_range(new, "src", study_forecast(spec(), records(), history))


def test_launch_refuses_an_unknown_forecast_from(worker_env):
    from workers.query import api

    with pytest.raises(ConfigError, match=r"^forecast_from: names no study in the tracking store, but got 'nope'\.$"):
        api.launch_study(spec(name="new", forecast_from="nope"))
    assert api.list_studies() == []  # nothing created or enqueued
