"""Learning-rate schedules: warm-up fixed in tokens from 0.1×lr, then constant / cosine / WSD."""

from __future__ import annotations

import math

import pytest

from cbscore.train.schedules import LrSchedule, warmup_steps


def test_warmup_steps_halve_when_the_batch_doubles():
    warmup_tokens = 1_000 * 256 * 512  # 1000 steps at B = 256, T = 512
    assert warmup_steps(warmup_tokens, 256 * 512) == 1000
    assert warmup_steps(warmup_tokens, 512 * 512) == 500
    assert warmup_steps(warmup_tokens, 1024 * 512) == 250


def test_warmup_rounds_up_so_it_never_lasts_fewer_tokens_than_asked():
    assert warmup_steps(1001, 100) == 11
    assert warmup_steps(0, 100) == 0


def test_warmup_starts_at_a_tenth_and_reaches_the_peak_linearly():
    s = LrSchedule(kind="constant", lr=1e-2, warmup_steps=10, total_steps=100)
    assert s(0) == pytest.approx(1e-3)
    assert s(5) == pytest.approx(1e-2 * (0.1 + 0.9 * 0.5))
    assert s(10) == pytest.approx(1e-2)
    assert s(99) == pytest.approx(1e-2)


def test_no_warmup_is_the_peak_from_the_first_step():
    assert LrSchedule(kind="constant", lr=3e-3, warmup_steps=0, total_steps=10)(0) == 3e-3


def test_cosine_falls_from_peak_to_floor_at_the_last_step():
    s = LrSchedule(kind="cosine", lr=1.0, warmup_steps=10, total_steps=111, min_lr_ratio=0.1)
    assert s(10) == pytest.approx(1.0)
    assert s(60) == pytest.approx(0.1 + 0.9 * 0.5)  # half way: cos(π/2) = 0
    assert s(110) == pytest.approx(0.1)


def test_wsd_is_stable_then_decays_linearly_over_the_last_fraction():
    s = LrSchedule(kind="wsd", lr=1.0, warmup_steps=10, total_steps=101, min_lr_ratio=0.0, decay_fraction=0.2)
    # decay over the last round(0.2·101) = 20 steps: 81 .. 100
    assert s(80) == 1.0
    assert s(81) == pytest.approx(1.0)
    assert s(100) == pytest.approx(0.0)
    assert s(90) == pytest.approx(1 - 9 / 19)


def test_unknown_schedule_is_rejected():
    with pytest.raises(ValueError, match="but got 'linear'"):
        LrSchedule(kind="linear", lr=1.0, warmup_steps=0, total_steps=1)


def test_schedule_values_are_finite_everywhere():
    for kind in ("constant", "cosine", "wsd"):
        s = LrSchedule(kind=kind, lr=1.0, warmup_steps=3, total_steps=5)
        assert all(math.isfinite(s(i)) and s(i) > 0 for i in range(5))
