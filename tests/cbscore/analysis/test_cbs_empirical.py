import math

import numpy as np
import pytest

from cbscore.analysis import cbs_empirical, fit_steps
from cbscore.errors import FitError

from .synthetic import curve


def test_interpolates_on_log_log_axes_between_last_pass_and_first_fail():
    # B·S: 25600 at B_ref = 256; 28160 at 512 (passes 1.2 × 25600 = 30720); 40960 at 1024 (fails).
    b, s = [256, 512, 1024], [100.0, 55.0, 40.0]
    u1, u2 = math.log(28160 / 30720), math.log(40960 / 30720)
    expected = math.exp(math.log(512) + (-u1) / (u2 - u1) * math.log(2))
    assert cbs_empirical(b, s, b_ref=256, overhead=0.2) == pytest.approx(expected, rel=1e-12)


def test_no_passing_point_above_b_ref_interpolates_from_b_ref():
    # 512 already fails (B·S = 40960 > 30720): B* lies between 256 and 512.
    b, s = [128, 256, 512], [210.0, 100.0, 80.0]
    u1, u2 = -math.log(1.2), math.log(40960 / 30720)
    expected = math.exp(math.log(256) + (-u1) / (u2 - u1) * math.log(2))
    assert cbs_empirical(b, s) == pytest.approx(expected, rel=1e-12)


def test_takes_the_largest_passing_point():
    # 512 fails, 1024 passes again, 2048 fails: the largest passing point (1024) is used.
    b, s = [256, 512, 1024, 2048], [100.0, 70.0, 28.0, 40.0]
    u1, u2 = math.log(1024 * 28 / 30720), math.log(2048 * 40 / 30720)
    expected = math.exp(math.log(1024) + (-u1) / (u2 - u1) * math.log(2))
    assert cbs_empirical(b, s) == pytest.approx(expected, rel=1e-12)


def test_dense_noise_free_points_agree_with_the_closed_form():
    b = 2.0 ** np.arange(6, 15, 0.125)
    s = curve(b, 2000.0, 3000.0)
    exact = fit_steps(b, s).cbs(0.2, 256)  # 1.2·256 + 0.2·3000 = 907.2
    assert exact == pytest.approx(907.2)
    assert cbs_empirical(b, s, 256, 0.2) == pytest.approx(exact, rel=2e-3)


def test_b_ref_between_measured_sizes_uses_interpolated_s_ref():
    b = 2.0 ** np.arange(6, 15, 0.125)
    s = curve(b, 2000.0, 3000.0)
    assert 300.0 not in b
    assert cbs_empirical(b, s, b_ref=300.0) == pytest.approx(1.2 * 300 + 0.2 * 3000, rel=2e-3)


def test_refuses_b_ref_outside_the_measured_range():
    with pytest.raises(FitError, match="outside the measured batch sizes"):
        cbs_empirical([512, 1024, 2048], [100.0, 60.0, 45.0], b_ref=256)


def test_refuses_when_every_point_passes_or_none_lies_above_b_ref():
    with pytest.raises(FitError, match="beyond the largest measured batch size"):
        cbs_empirical([256, 512, 1024], [100.0, 50.0, 26.0], b_ref=256)
    with pytest.raises(FitError, match="above B_ref"):
        cbs_empirical([64, 128, 256], [300.0, 170.0, 100.0], b_ref=256)
