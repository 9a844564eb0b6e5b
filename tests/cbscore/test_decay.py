"""Decay branches (cbscore.decay): a WSD decay from a stable run's snapshot is the run trained
straight to that horizon, and the steps to target are read off the decayed losses.

Runs: tiny-0.1M, 8 sequences of 32 tokens a step (256 tokens), warm-up 5 steps, peak rate 1e-2.
The stable run (``constant``) keeps snapshots at steps 16 and 24, the branch points of horizons 20
and 30 at decay fraction 0.2 (k = 4 and 6 steps).
"""

from __future__ import annotations

import math

import pytest

from cbscore.decay import (
    DecayPoint,
    cosine_config,
    cosine_horizons,
    decay_branch_config,
    horizon_tokens,
    stable_config,
    steps_from_horizons,
    wsd_points,
)
from cbscore.errors import ConfigError
from cbscore.train.config import TrainConfig
from cbscore.train.schedules import LrSchedule, wsd_decay_start, wsd_horizon
from cbscore.train.trainer import train

STEP = 8 * 32
POINTS = (DecayPoint(horizon_steps=20, branch_step=16, decay_steps=4),
          DecayPoint(horizon_steps=30, branch_step=24, decay_steps=6))


def base_config(data, **changes) -> TrainConfig:
    fields = dict(model="tiny-0.1M", batch_size=8, context_tokens=32, max_tokens=STEP * 30, lr=1e-2,
                  warmup_tokens=STEP * 5, beta2=0.99, ewa_taus=(0.9,), eval_windows=16, log_every_steps=1,
                  data=data, device="cpu", threads=1)
    return TrainConfig(**{**fields, **changes})


@pytest.fixture(scope="module")
def stable_run(builtin_slice_config, tmp_path_factory):
    config = stable_config(base_config(builtin_slice_config), POINTS,
                           snapshot_dir=str(tmp_path_factory.mktemp("stable")))
    return config, train(config)


def test_the_points_of_a_stable_run_are_its_wsd_decay_starts():
    assert wsd_points([STEP * 20, STEP * 30], batch_tokens=STEP, decay_fraction=0.2, warmup_steps=5) == POINTS
    # a horizon whose decay would start inside the warm-up is not a branch of the stable phase
    assert wsd_points([STEP * 5], batch_tokens=STEP, decay_fraction=0.2, warmup_steps=5) == ()
    for horizon in range(5, 400):
        start = wsd_decay_start(horizon, 0.2, 3)
        assert wsd_horizon(start, 0.2, 3) is None or wsd_decay_start(wsd_horizon(start, 0.2, 3), 0.2, 3) == start
    assert wsd_horizon(16, 0.2) == 20 and wsd_horizon(2, 0.2, warmup_steps=5) is None


def test_the_horizon_grid_is_geometric_in_tokens_and_holds_d():
    assert horizon_tokens(1000, low=0.25, high=2.0, ratio=2.0) == (250, 500, 1000, 2000)
    assert horizon_tokens(1000, low=0.3, high=1.5, ratio=2.0) == (300, 600, 1000, 1200)
    assert cosine_horizons((250, 500, 1000), batch_tokens=100, warmup_steps=3) == (5, 10)
    with pytest.raises(ConfigError, match="decay.horizons"):
        horizon_tokens(1000, low=0.5, high=2.0, ratio=1.0)


def test_a_decay_branch_equals_the_run_trained_straight_to_its_horizon(stable_run):
    stable, stable_result = stable_run
    branch = decay_branch_config(stable, POINTS[0], decay_fraction=0.2, min_lr_ratio=0.1)
    assert (branch.branch.branch_step, branch.total_steps, branch.schedule) == (16, 4, "wsd")
    straight = base_config(stable.data, max_tokens=STEP * 20, schedule="wsd", decay_fraction=0.2, min_lr_ratio=0.1)
    rates = straight.lr_schedule().steps
    assert [rates.lr_at(i) for i in (15, 16, 17, 19)] == pytest.approx([1e-2, 1e-2, 7e-3, 1e-3])
    branched, trained = train(branch), train(straight)
    # the same update at every step: the stable run's before the branch, the straight run's after it
    assert [v for s, v in stable_result.train_log if s <= 16] == [v for s, v in trained.train_log if s <= 16]
    assert [v for _, v in branched.train_log] == [v for s, v in trained.train_log if s > 16]
    assert branched.final_raw_loss == trained.final_raw_loss and math.isfinite(branched.final_raw_loss)
    assert branched.final_eval_loss == trained.final_eval_loss  # the averages carried over
    # and the decay paid: the decayed weights are better than the stable run's at the same step
    stable_at_20 = [p for p in stable_result.eval_history if p.step == 20]
    if stable_at_20:
        assert branched.final_raw_loss < stable_at_20[0].raw_loss


def test_a_branch_whose_earlier_rates_differ_from_its_base_is_refused(stable_run):
    stable, _ = stable_run
    branch = decay_branch_config(stable, POINTS[0], decay_fraction=0.2, min_lr_ratio=0.1)
    cosine = branch.replace(schedule="cosine")  # cosine decays from the warm-up on: not this base's rates
    with pytest.raises(ConfigError, match="schedule"):
        train(cosine)


def test_a_cosine_run_decays_to_its_floor_at_its_own_end(builtin_slice_config):
    config = cosine_config(base_config(builtin_slice_config), 12, min_lr_ratio=0.1)
    rates: LrSchedule = config.lr_schedule().steps
    assert (config.total_steps, config.schedule, rates.warmup_steps) == (12, "cosine", 5)
    assert rates.lr_at(11) == pytest.approx(1e-3) and rates.lr_at(5) == pytest.approx(1e-2)


def test_steps_to_target_interpolate_between_horizons_in_log_steps():
    # losses 3.0 at H = 10, 2.0 at H = 40: the target 2.5 is half way, at √(10·40) = 20 steps
    crossing = steps_from_horizons([10, 40, 80], [3.0, 2.0, 1.9], 2.5)
    assert crossing.steps == pytest.approx(20.0) and crossing.bracket == (10, 40)
    assert not crossing.censored and not crossing.at_most
    first = steps_from_horizons([10, 40], [2.0, 1.5], 2.5)
    assert first.at_most and first.steps == 10.0
    none = steps_from_horizons([10, 40], [3.0, 2.8], 2.5)
    assert none.censored and none.steps is None and none.bracket == (40, None)
    skipped = steps_from_horizons([10, 20, 40], [3.0, None, 2.0], 2.5)  # a diverged horizon is not read
    assert skipped.bracket == (10, 40)
