import math

import pytest

from cbscore.analysis import first_crossing


def test_interpolates_between_straddling_evaluations():
    # 3.0 at step 100, 2.0 at step 200: target 2.5 is crossed half way.
    assert first_crossing([0, 100, 200, 300], [5.0, 3.0, 2.0, 1.0], 2.5) == pytest.approx(150.0)


def test_first_evaluation_already_below_returns_its_step():
    assert first_crossing([50, 100], [1.0, 0.5], 2.0) == 50.0


def test_exact_hit_returns_that_step():
    assert first_crossing([0, 10, 20], [4.0, 3.0, 2.0], 3.0) == pytest.approx(10.0)


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
    import numpy as np

    steps = np.array([0, 100, 200])
    losses = np.array([5.0, 3.0, 2.0], dtype=np.float32)
    assert first_crossing(steps, losses, 2.5) == pytest.approx(150.0)
