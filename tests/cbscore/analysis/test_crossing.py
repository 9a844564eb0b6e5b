import math

import numpy as np
import pytest

from cbscore.analysis import first_crossing


def test_straight_line_when_the_bracket_starts_at_step_zero():
    # no power law through step 0: 5.0 at step 0, 2.0 at step 100, target 3.5 is crossed half way
    assert first_crossing([0, 100, 200], [5.0, 2.0, 1.0], 3.5) == pytest.approx(50.0)


def test_straight_line_when_the_fit_does_not_fall():
    # the window's least-squares slope is ≥ 0 (a noisy bump after the crossing): the bracket's line
    assert first_crossing([100, 110, 120, 130], [3.0, 2.0, 6.0, 6.0], 2.5, past_target=True) == pytest.approx(105.0)
    # read one-sided (the default) the bump after the crossing is not in the window: the power law
    # through (100, 3.0) and (110, 2.0) meets 2.5 at 100·(110/100)^(ln(2.5/3)/ln(2/3))
    assert first_crossing([100, 110, 120, 130], [3.0, 2.0, 6.0, 6.0], 2.5) == pytest.approx(
        100 * 1.1 ** (np.log(2.5 / 3) / np.log(2 / 3)))


def _power_law(s):
    return 7.0 * s ** -0.15


def test_exact_on_a_sparsely_evaluated_power_law_where_the_line_is_late():
    # evaluations 86 steps apart (B = 4 in `reproduce`), crossing at step 130
    steps = [0, 86, 172, 258]
    losses = [10.0] + [_power_law(s) for s in steps[1:]]
    target = _power_law(130.0)
    line = 86 + (losses[1] - target) / (losses[1] - losses[2]) * 86
    assert line / 130 - 1 > 0.03  # the straight line is 3%+ late ...
    assert first_crossing(steps, losses, target) == pytest.approx(130.0, rel=0.005)  # ... the fit is not


def _noisy_bias(sigma: float, seeds: int, fn, truncate: bool) -> float:
    """Mean relative error of ``fn`` over seeds: ``3 + 4·s^-0.5`` evaluated every 6 steps with
    Gaussian noise σ, crossing at a step drawn in [100, 300]."""
    rng = np.random.default_rng(0)
    errors = []
    steps = np.arange(0, 1000, 6, dtype=float)

    def curve(s):
        return 3.0 + 4.0 * np.maximum(s, 1.0) ** -0.5

    for _ in range(seeds):
        true = rng.uniform(100, 300)
        losses = curve(steps) + sigma * rng.standard_normal(len(steps))
        target = curve(true)
        st, ls = list(steps), list(losses)
        if truncate:  # what the trainer keeps: it stops at the first evaluation at or below the target
            k = next(i for i, v in enumerate(ls) if v <= target)
            st, ls = st[:k + 1], ls[:k + 1]
        errors.append(fn(st, ls, target) / true - 1)
    return float(np.mean(errors))


def _straight_line(steps, losses, target):
    k = next(i for i, v in enumerate(losses) if v <= target)
    return steps[k] if k == 0 else steps[k - 1] + (losses[k - 1] - target) / (losses[k - 1] - losses[k]) * (steps[k] - steps[k - 1])


def test_noise_bias_is_much_smaller_than_the_lines_where_evaluations_continue_past_the_crossing():
    # σ = 0.01 is 1.7 evaluation intervals of the curve's fall at S = 200; the line reads the first
    # noisy dip below the target (about −3.6%); the fit over five evaluations a side does not
    line = _noisy_bias(0.01, 400, _straight_line, truncate=False)
    fit = _noisy_bias(0.01, 400, lambda *a: first_crossing(*a, past_target=True), truncate=False)
    assert line < -0.025
    assert abs(fit) < abs(line) / 4


def test_a_history_that_goes_on_past_the_target_is_read_as_one_that_stopped_there():
    # A reference run trains on past its crossing; a trial stops at its first evaluation below the
    # target. Read the same way (one-sided, the default), the two give the same crossing, so the
    # first-passage bias is the same at B_ref as at every other batch size (issue 38).
    steps = list(np.arange(0, 1000, 6, dtype=float))
    rng = np.random.default_rng(1)
    losses = list(3.0 + 4.0 * np.maximum(np.array(steps), 1.0) ** -0.5 + 0.01 * rng.standard_normal(len(steps)))
    target = 3.0 + 4.0 * 200.0 ** -0.5
    k = next(i for i, v in enumerate(losses) if v <= target)
    stopped = first_crossing(steps[:k + 1], losses[:k + 1], target)
    assert first_crossing(steps, losses, target) == stopped
    assert first_crossing(steps, losses, target, past_target=True) != stopped


def test_noise_bias_of_a_history_that_stops_at_the_crossing_is_no_worse_than_the_lines():
    # the first evaluation below the target is a first passage: with nothing after it, no fit
    # through it removes that selection (see the report of issue 19); the fit must not add to it
    line = _noisy_bias(0.01, 400, _straight_line, truncate=True)
    fit = _noisy_bias(0.01, 400, first_crossing, truncate=True)
    assert abs(fit) < abs(line) + 0.005


def test_first_evaluation_already_below_returns_its_step():
    assert first_crossing([50, 100], [1.0, 0.5], 2.0) == 50.0


def test_exact_hit_returns_that_step():
    assert first_crossing([0, 10, 20], [4.0, 3.0, 2.0], 3.0) == pytest.approx(10.0)


def test_nan_in_the_middle_is_never_fitted_across():
    # the fit window stops at the NaN: only (30, 2.2) and (40, 1.8) are left, a power law through them
    steps, losses = [0, 10, 20, 30, 40], [4.0, 3.0, math.nan, 2.2, 1.8]
    expected = 30 * (40 / 30) ** (math.log(2.0 / 2.2) / math.log(1.8 / 2.2))
    assert first_crossing(steps, losses, 2.0) == pytest.approx(expected)


def test_never_reached_is_none():
    assert first_crossing([0, 10, 20], [4.0, 3.5, 3.1], 3.0) is None
    assert first_crossing([], [], 3.0) is None


def test_only_the_first_crossing_counts():
    assert first_crossing([0, 10, 20, 30], [4.0, 2.0, 5.0, 1.0], 3.0) == pytest.approx(5.0)


def test_non_finite_losses_are_never_a_crossing():
    assert first_crossing([0, 10, 20], [4.0, math.nan, -math.inf], 3.0) is None
    # After a NaN the next finite loss below the target has no finite bracket: its own step.
    assert first_crossing([0, 10, 20], [4.0, math.nan, 2.0], 3.0) == 20.0


def test_mismatched_lengths_and_bad_target_raise():
    with pytest.raises(ValueError, match="same length"):
        first_crossing([0, 1], [1.0], 0.5)
    with pytest.raises(ValueError, match="finite"):
        first_crossing([0], [1.0], math.nan)


def test_accepts_numpy_arrays():
    steps = np.array([0, 100, 200])
    losses = np.array([5.0, 2.0, 1.0], dtype=np.float32)
    assert first_crossing(steps, losses, 3.5) == pytest.approx(50.0)
