"""The warm-up run and its two controls at equal tokens (Merrill et al. 2025, Table 1): a
recommended schedule moved onto the equal-token grid, and the three arms' batches, rates, budgets
and exact steps, which the trainer's own plan takes."""

from __future__ import annotations

import math

import pytest

from cbscore.errors import ConfigError
from cbscore.local import equal_token_budget, on_equal_token_grid, warmup_arms
from cbscore.train.branch_config import BranchConfig
from cbscore.train.config import TrainConfig

SQRT2 = math.sqrt(2)


def test_switches_move_up_to_whole_steps_of_the_final_batch():
    # B_final·T = 16·16 = 256 tokens: 1,000 → 1,024 and 2,000 → 2,048; D = 4,100 → 4,096
    grid = on_equal_token_grid([(1000, 8, SQRT2), (2000, 16, 2.0)], context_tokens=16, total_tokens=4100)
    assert grid == ((1024, 8, SQRT2), (2048, 16, 2.0))
    assert equal_token_budget(4100, final_batch_size=16, context_tokens=16) == 4096
    # a curve at 2·B_j already switches at once (token 1, 2): one whole final step apart
    assert on_equal_token_grid([(1, 8, SQRT2), (2, 16, 2.0)], context_tokens=16, total_tokens=4096) == \
        ((256, 8, SQRT2), (512, 16, 2.0))


def test_a_switch_that_leaves_no_final_step_is_named():
    with pytest.raises(ConfigError, match=r"^warmup.merrill.batch_schedule: its last switch, moved up to a whole "
                                          r"step of the final batch \(4,096 tokens\), leaves no step before"):
        on_equal_token_grid([(4000, 16, 2.0)], context_tokens=16, total_tokens=4096, field="warmup.merrill.batch_schedule")
    with pytest.raises(ConfigError, match="^batch_schedule: must list at least one switch"):
        on_equal_token_grid([], context_tokens=16, total_tokens=4096)


def test_three_arms_at_equal_tokens_with_the_warmups_steps_counted_exactly():
    warm, small, large = warmup_arms(base_batch_size=4, base_lr=0.01, context_tokens=16, total_tokens=4096,
                                     batch_schedule=((1024, 8, SQRT2), (2048, 16, 2.0)))
    assert [a.role for a in (warm, small, large)] == ["warmup", "control-small", "control-large"]
    assert warm.max_tokens == small.max_tokens == large.max_tokens == 4096
    # 1,024/64 = 16 steps at 4, 1,024/128 = 8 at 8, 2,048/256 = 8 at 16
    assert (warm.steps, small.steps, large.steps) == (32, 64, 16)
    assert (warm.batch_size, small.batch_size, large.batch_size) == (4, 4, 16)
    assert warm.final_batch_size == 16 and warm.final_lr() == pytest.approx(0.02)
    assert (small.lr, small.batch_schedule) == (0.01, ())
    assert (large.lr, large.batch_schedule) == (pytest.approx(0.02), ())  # the warm-up's final rate throughout
    for arm in (warm, small, large):  # the trainer's plan takes the same steps and ends on the same token
        config = TrainConfig(model="tiny-0.1M", batch_size=arm.batch_size, context_tokens=16, lr=arm.lr,
                             max_tokens=arm.max_tokens, branch=BranchConfig(batch_schedule=arm.batch_schedule))
        assert config.total_steps == arm.steps and config.batch_plan().end_tokens == 4096


def test_a_schedule_off_the_grid_is_refused():
    with pytest.raises(ConfigError, match="^batch_schedule: must switch on multiples of B_final·T = 256 tokens"):
        warmup_arms(base_batch_size=4, base_lr=0.01, context_tokens=16, total_tokens=4096,
                    batch_schedule=((1000, 8, SQRT2), (2048, 16, 2.0)))


def test_a_flat_curve_at_twice_b0_switches_at_once_despite_rounding():
    from cbscore.local import fit_local_cbs_curve, plan_warmup

    curve = fit_local_cbs_curve([1024, 2048], [8, 8], lower_bounds=[True, True])
    assert curve.exponent == 0.0 and curve.coef != 8.0  # exp(ln 8) = 7.999999999999998
    plan = plan_warmup(curve, base_batch_size=4, context_tokens=16, total_tokens=4096, max_batch_size=8)
    assert plan.batch_schedule == ((1, 8, SQRT2),)
    assert on_equal_token_grid(plan.batch_schedule, context_tokens=16, total_tokens=4096) == ((128, 8, SQRT2),)
