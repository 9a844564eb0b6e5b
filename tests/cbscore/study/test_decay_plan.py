"""The ``schedule`` study kind (cbscore.study.decay_spec, cbscore.study.decay_plan): its spec, its
fixed list of stable runs, decay branches and cosine runs, what starts when, and what it costs.

Spec: tiny-0.1M, D = 8,192 tokens of 32 (256 steps at B = 1), B = 1 and 2, one rate, one seed,
warm-up 10% (820 tokens: 26 steps at B = 1), horizons D/2 … 2D: √2 apart for WSD, 2× for cosine.
"""

from __future__ import annotations

import pytest

from cbscore.errors import ConfigError
from cbscore.study import StudySpec, grid_tokens, grid_trials, load_preset, plan
from cbscore.study.decay_plan import (
    DecaySnapshots,
    cosine_grid,
    decay_trial_id,
    describe_decay,
    rates_at,
    run_keys,
    schedule_cost,
    stable_trial_id,
    wsd_grid,
)
from cbscore.study.trials import TrialRecord


def spec(**decay) -> StudySpec:
    return StudySpec.from_dict({
        "name": "sched", "kind": "schedule", "models": ["tiny-0.1M"], "tokens": [8192], "batch_sizes": [1, 2],
        "b_ref": 1, "context_tokens": 32, "warmup_fraction": 0.1, "search": {"kind": "grid", "lrs": [0.01]},
        "seeds": [0], "decay": {"horizon_low": 0.5, "horizon_high": 2.0, **decay}})


def test_the_horizons_are_a_token_grid_read_in_each_batch_size_steps():
    s = spec()
    # D/2·√2^j up to 2D in tokens, at B = 1 (32 tokens a step): 128, 181, 256, 362, 512 steps
    assert [p.horizon_steps for p in wsd_grid(s, 1)] == [128, 181, 256, 362, 512]
    assert [p.branch_step for p in wsd_grid(s, 1)] == [102, 145, 205, 290, 410]
    assert [p.horizon_steps for p in wsd_grid(s, 2)] == [64, 91, 128, 181, 256]
    assert cosine_grid(s, 1) == (128, 256, 512)


def test_the_cost_counts_stable_runs_decay_branches_and_cosine_runs():
    s = spec()
    cost = schedule_cost(s)
    # the stable run reads its longest horizon; each branch its decay; each cosine run its horizon
    assert cost.stable_tokens == 512 * 32 + 256 * 64
    assert cost.decay_tokens == (26 + 36 + 51 + 72 + 102) * 32 + (13 + 18 + 26 + 36 + 51) * 64
    assert cost.cosine_tokens == (128 + 256 + 512) * 32 + (64 + 128 + 256) * 64
    assert cost.trials == 2 * (1 + 5 + 3)
    assert grid_tokens(s) == cost.total_tokens and grid_trials(s) == cost.trials
    only_wsd = spec(schedules=["wsd"])
    assert schedule_cost(only_wsd).cosine_tokens == 0 and schedule_cost(only_wsd).trials == 2 * 6


def test_the_rates_follow_the_batch_size_by_the_stated_exponent_and_only_then():
    s = StudySpec.from_dict({**spec().to_dict(), "batch_sizes": [1, 2, 4, 8],
                             "search": {"kind": "grid", "lrs": [0.00707107, 0.01, 0.0141421]},
                             "decay": {"horizon_low": 0.5, "horizon_high": 2.0, "lr_exponent": 0.5}})
    # × (B/1)^0.5, three significant digits: the same three rates √2 apart slide up one step per doubling
    assert rates_at(s, 1) == (0.00707, 0.01, 0.0141)
    assert rates_at(s, 2) == (0.01, 0.0141, 0.02)
    assert rates_at(s, 8) == (0.02, 0.0283, 0.04)
    assert [(b, lr) for b, lr, _ in run_keys(s)][3:6] == [(2, 0.01), (2, 0.0141), (2, 0.02)]
    assert "B=4: 0.0141, 0.02, 0.0283" in describe_decay(s)[1]
    # every trial id and record carries its own B's rate
    assert stable_trial_id(s, 8, 0.04, 0) in {t.trial_id for t in plan(s, [], 0.0, snapshots=DecaySnapshots(
        folders={stable_trial_id(s, b, lr, 0): f"/snap/{b}.{lr}" for b, lr, _ in run_keys(s)})).start}
    # exponent 0 (the default) leaves the grid's rates as written, unrounded
    assert rates_at(spec(), 2) == (0.01,) and rates_at(StudySpec.from_dict(
        {**spec().to_dict(), "search": {"kind": "grid", "lrs": [0.012345]}}), 2) == (0.012345,)


def test_the_cosine_family_can_stop_below_the_stable_runs():
    s = spec(cosine_high=1.0)
    assert cosine_grid(s, 1) == (128, 256) and wsd_grid(s, 1)[-1].horizon_steps == 512
    assert schedule_cost(s).cosine_tokens == (128 + 256) * 32 + (64 + 128) * 64
    with pytest.raises(ConfigError, match=r"decay.cosine_high: must be at most decay.horizon_high \(2\), but got 3"):
        spec(cosine_high=3.0)
    with pytest.raises(ConfigError, match="decay.lr_exponent"):
        spec(lr_exponent=2)


def test_decay_branches_start_once_their_snapshot_exists():
    s = spec(schedules=["constant_ewa", "wsd"])
    sid = stable_trial_id(s, 1, 0.01, 0)
    folders = {sid: "/snap/b1", stable_trial_id(s, 2, 0.01, 0): "/snap/b2"}
    first = plan(s, [], 0.0, snapshots=DecaySnapshots(folders=folders))
    assert sorted(t.trial_id for t in first.start) == sorted(folders)
    stable = first.start[0]
    assert stable.train_config["schedule"] == "constant"
    assert stable.train_config["branch"]["snapshot_tokens"] == [p.branch_step * 32 for p in wsd_grid(s, 1)]
    running = TrialRecord.from_dict({**_record(sid, "running"), "tokens": 205 * 32})
    ready = DecaySnapshots(folders=folders, ready={sid: frozenset({102 * 32, 145 * 32})})
    second = plan(s, [running], 0.0, snapshots=ready)
    started = {t.trial_id: t for t in second.start}
    assert set(started) == {decay_trial_id(s, 1, 0.01, 0, 128), decay_trial_id(s, 1, 0.01, 0, 181),
                            stable_trial_id(s, 2, 0.01, 0)}
    branch = started[decay_trial_id(s, 1, 0.01, 0, 128)].train_config
    assert (branch["schedule"], branch["branch"]["branch_step"], branch["max_tokens"], branch["schedule_tokens"]) == (
        "wsd", 102, 128 * 32, 128 * 32)
    assert branch["branch"]["branch_from"].startswith("/snap/b1/") and not second.done


def test_a_stable_run_that_ended_early_blocks_its_later_branches():
    s = spec(schedules=["wsd"])
    sid = stable_trial_id(s, 1, 0.01, 0)
    failed = TrialRecord.from_dict(_record(sid, "failed"))
    p = plan(s, [failed], 0.0, snapshots=DecaySnapshots(folders={sid: "/snap/b1"}))
    assert any(e.startswith(f"decay branch {decay_trial_id(s, 1, 0.01, 0, 128)}") for e in p.errors)


def test_bad_decay_fields_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match="decay.schedules"):
        spec(schedules=["linear"])
    with pytest.raises(ConfigError, match="decay.horizon_high"):
        spec(horizon_high=0.5)
    with pytest.raises(ConfigError, match="decay"):
        StudySpec.from_dict({"name": "x", "kind": "custom", "settings": [{"model": "tiny-0.1M", "tokens": 1000}],
                             "batch_sizes": [4], "b_ref": 4, "decay": {"schedules": ["wsd"]}})


def test_the_ablation_schedule_preset_round_trips_and_measures_three_schedules():
    s = load_preset("ablation-schedule")
    assert StudySpec.from_dict(s.to_dict()) == s
    assert s.decay.schedules == ("constant_ewa", "cosine", "wsd")
    assert schedule_cost(s).decay_tokens > 0 and schedule_cost(s).cosine_tokens > 0
    # its rates are centred on 0.006·(B/4)^0.5 at each B (the first run's one grid had the best at an edge)
    assert [rates_at(s, b)[1] for b in s.batch_sizes] == [0.006, 0.00849, 0.012, 0.017]


def _record(trial_id: str, status: str) -> dict:
    return {"trial_id": trial_id, "setting_id": "tiny-0.1M_D8.192K", "cell_id": "c", "role": "stable",
            "batch_size": 1, "lr": 0.01, "seed": 0, "status": status, "run_id": "r", "attempt": 1}


def test_constant_ewa_names_the_constant_schedule_of_any_study():
    custom = StudySpec.from_dict({"name": "x", "kind": "custom", "settings": [{"model": "tiny-0.1M", "tokens": 1000}],
                                  "batch_sizes": [4], "b_ref": 4, "schedule": "constant_ewa"})
    assert custom.schedule == "constant" and spec().schedule == "constant"
    with pytest.raises(ConfigError, match="^schedule: "):
        StudySpec.from_dict({**spec().to_dict(), "schedule": "wsd"})  # a schedule study's stable runs are constant


def test_a_horizon_grid_too_fine_to_be_sane_is_refused_by_arithmetic():
    with pytest.raises(ConfigError, match="^decay.wsd_ratio: .* horizons"):
        spec(wsd_ratio=1.000001)
    with pytest.raises(ConfigError, match="horizons from D×1e-300 to D×2"):
        spec(horizon_low=1e-300, cosine_ratio=2.0)


@pytest.mark.parametrize("block, data, message", [
    ("decay", {"horizon_hi": 2.0}, "decay.horizon_hi: is not a decay field (known: cosine_high, cosine_ratio, "
                                   "decay_fraction, horizon_high, horizon_low, lr_exponent, min_lr_ratio, schedules, "
                                   "wsd_ratio), but got 2.0."),
    ("decay", ["wsd"], "decay: must be a mapping of fields, but got ['wsd']."),
    ("local", "x", "local: must be a mapping of fields, but got 'x'."),
])
def test_a_block_of_a_spec_names_a_field_it_does_not_have_and_its_value(block, data, message):
    """decay: and local: read their mapping alike (cbscore.config.Config, their block named)."""
    from cbscore.study.decay_spec import DecaySpec
    from cbscore.study.local_spec import LocalSpec

    with pytest.raises(ConfigError) as err:
        {"decay": DecaySpec, "local": LocalSpec}[block].from_dict(data)
    assert str(err.value) == message


def test_a_stale_heartbeat_or_a_lost_trial_runs_again_below_the_attempt_limit_and_fails_at_it():
    """The triage plan_local and plan_decay share (cbscore.study.local_plan.stale_trials)."""
    from cbscore.study.local_plan import stale_trials

    def rec(tid, status, heartbeat_s=None, attempt=1):
        return TrialRecord(**{**_record(tid, status), "heartbeat_s": heartbeat_s, "attempt": attempt})

    records = [rec("fresh", "running", 950.0), rec("stale", "running", 800.0), rec("lost", "lost"),
               rec("spent", "lost", attempt=3), rec("stale3", "running", 100.0, attempt=3), rec("done", "finished"),
               rec("silent", "running")]
    assert stale_trials(records, 1000.0, stale_after_s=120.0, max_attempts=3) == (["stale", "lost"],
                                                                                 ["spent", "stale3"])
    # a schedule study's planner triages with it: the stale stable run is run again
    s = spec()
    stable = stable_trial_id(s, 1, 0.01, 0)
    p = plan(s, [TrialRecord(**{**_record(stable, "running"), "heartbeat_s": 0.0})], 1000.0)
    assert stable in p.lost
