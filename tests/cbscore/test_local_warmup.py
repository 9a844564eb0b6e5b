"""The batch-size warm-up planner: Merrill et al. 2025's OLMo 1B figures, exactly."""

from __future__ import annotations

import math

import pytest

from cbscore.errors import ConfigError
from cbscore.local import LocalCbsCurve, fit_local_cbs_curve, plan_warmup, schedule_warmup
from cbscore.train.branch_config import BranchConfig
from cbscore.train.config import TrainConfig

T = 4096  # OLMo 1B: documents of 4,096 tokens
# Total run length: 156.9k steps at 1,024 × 4,096 tokens, about 658B tokens
OLMO_TOKENS = 156_900 * 1024 * T


def test_merrill_olmo_1b_warmup_takes_89_2k_steps_against_156_9k():
    plan = schedule_warmup(base_batch_size=1024, context_tokens=T, total_tokens=OLMO_TOKENS,
                           switch_tokens=(168e9, 503e9))
    assert OLMO_TOKENS == 658_086_297_600
    assert plan.batch_schedule == ((168_000_000_000, 2048, pytest.approx(math.sqrt(2))), (503_000_000_000, 4096, 2.0))
    # 40,055 steps at 1,024 (to the first boundary past 168B), 39,935 at 2,048, 9,243 at 4,096
    assert (plan.steps, plan.constant_steps, plan.large_batch_steps) == (89_233, 156_900, 39_225)
    assert round(plan.steps / 1000, 1) == 89.2 and round(plan.constant_steps / 1000, 1) == 156.9
    # exactly 43.1% fewer steps ("43%" in the paper's abstract); 1 − 89.2/156.9 of the rounded figures
    # is 43.15%. A saving of 43.2% on this schedule needs about 659.6B tokens, i.e. 89.3k vs 157.3k steps
    assert plan.fraction_saved == pytest.approx(0.43127, abs=1e-5)
    assert round(100 * (1 - 89.2 / 156.9), 2) == 43.15
    longer = schedule_warmup(base_batch_size=1024, context_tokens=T, total_tokens=659_600_000_000, switch_tokens=(168e9, 503e9))
    assert (longer.steps, longer.constant_steps, round(100 * longer.fraction_saved, 1)) == (89_323, 157_260, 43.2)


def test_the_planner_reads_the_same_switches_off_a_local_cbs_curve():
    # the power law through B*(168B) = 2,048 and B*(503B) = 4,096
    exponent = math.log(2) / math.log(503 / 168)
    curve = fit_local_cbs_curve([168e9, 503e9], [2048, 4096])
    assert curve.exponent == pytest.approx(exponent)
    plan = plan_warmup(curve, base_batch_size=1024, context_tokens=T, total_tokens=OLMO_TOKENS)
    assert [d for d, _, _ in plan.batch_schedule] == [pytest.approx(168e9, rel=1e-9), pytest.approx(503e9, rel=1e-9)]
    assert [b for _, b, _ in plan.batch_schedule] == [2048, 4096]  # the next, 8,192, would come at 1.5T tokens
    assert plan.steps == 89_233
    capped = plan_warmup(curve, base_batch_size=1024, context_tokens=T, total_tokens=OLMO_TOKENS, max_batch_size=2048)
    assert [b for _, b, _ in capped.batch_schedule] == [2048] and capped.steps == 40_055 + (OLMO_TOKENS - 40_055 * 1024 * T) // (2048 * T)


def test_a_curve_that_does_not_grow_recommends_no_switch():
    flat = LocalCbsCurve(coef=500.0, exponent=0.0, coef_ci=None, exponent_ci=None, tokens=(), local_cbs=(), r2=1.0, level=0.95)
    plan = plan_warmup(flat, base_batch_size=1024, context_tokens=T, total_tokens=OLMO_TOKENS)
    assert plan.batch_schedule == () and plan.steps == plan.constant_steps and plan.fraction_saved == 0.0
    assert any("no switch" in n for n in plan.notes)


def test_the_plan_is_a_batch_schedule_the_trainer_takes_in_as_many_steps():
    plan = schedule_warmup(base_batch_size=4, context_tokens=32, total_tokens=12_000, switch_tokens=(2000, 6000))
    config = TrainConfig(model="tiny-0.1M", batch_size=4, context_tokens=32, max_tokens=12_000, lr=1e-2,
                         branch=BranchConfig(batch_schedule=plan.batch_schedule))
    assert config.total_steps == plan.steps == 16 + 16 + 11  # switches at 2,048 and 6,144; 11,776 ≤ 12,000
    with pytest.raises(ConfigError, match="switch_tokens: must increase"):
        schedule_warmup(base_batch_size=4, context_tokens=32, total_tokens=12_000, switch_tokens=(6000, 2000))
