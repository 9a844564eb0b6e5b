import numpy as np
import pytest

from cbscore.analysis import fit_joint_power_law, fit_power_law, fit_scaling_laws, power_law
from cbscore.errors import FitError

N = np.array([85e6, 151e6, 302e6, 604e6, 1.2e9])
D = np.array([1.741e9, 3.072e9, 6.144e9, 12.288e9, 24.576e9])


def _samples(cbs, sigma, rng, n=1000):
    """Bootstrap-like samples of each setting's B*: lognormal around the point."""
    return [c * np.exp(sigma * rng.standard_normal(n)) for c in cbs]


def test_power_law_recovers_coefficient_and_exponent_exactly():
    cbs = power_law(D, 0.02, 0.47)
    fit = fit_power_law(D, cbs, variable="d")
    assert fit.coef == pytest.approx(0.02, rel=1e-9)
    assert fit.exponent == pytest.approx(0.47, rel=1e-12)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.exponent_ci is None and fit.forecast(5e10).cbs_ci is None
    assert fit.forecast(5e10).cbs == pytest.approx(0.02 * 5e10**0.47, rel=1e-9)


def test_power_law_interval_carries_per_setting_uncertainty():
    # Settings exactly on the law: no scatter beyond the draws (tau2 = 0), so the interval's
    # width comes from each setting's own draws alone, and doubles with their spread.
    true = power_law(N, 3.0, 0.3)
    widths = []
    for sigma in (0.1, 0.2):
        rng = np.random.default_rng(0)
        fit = fit_power_law(N, true, variable="n", cbs_samples=_samples(true, sigma, rng), seed=1)
        lo, hi = fit.exponent_ci
        assert lo < 0.3 < hi
        widths.append(hi - lo)
        fc = fit.forecast(2.4e9)
        assert fc.cbs_ci[0] <= fc.cbs <= fc.cbs_ci[1] and fc.law == "n" and fc.n_params == 2.4e9
    assert widths[1] == pytest.approx(2 * widths[0], rel=0.15)


def test_paper_units_put_n_in_millions_and_d_in_billions():
    n_law = fit_power_law(N, power_law(N, 3.0, 0.3), variable="n")
    assert n_law.coef_paper_units == pytest.approx(3.0 * 1e6**0.3)
    assert n_law(151e6) == pytest.approx(n_law.coef_paper_units * 151**0.3)
    assert "N in millions" in n_law.paper_units
    d_law = fit_power_law(D, power_law(D, 0.02, 0.47), variable="d")
    assert d_law(3.072e9) == pytest.approx(d_law.coef_paper_units * 3.072**0.47)
    assert "D in billions" in d_law.paper_units


def test_two_settings_give_a_law_but_no_interval():
    rng = np.random.default_rng(0)
    fit = fit_power_law([1e8, 4e8], [300.0, 600.0], variable="n", cbs_samples=_samples([300.0, 600.0], 0.1, rng))
    assert fit.exponent == pytest.approx(0.5) and fit.exponent_ci is None and fit.coef_ci is None
    assert fit.notes == (
        "law in n_params: no interval from 2 settings (an interval needs at least 3, so that their "
        "scatter around the law can be measured)",
    )


def test_two_settings_are_enough_for_a_one_variable_law():
    fit = fit_power_law([1e8, 4e8], [300.0, 600.0], variable="n")
    assert fit.exponent == pytest.approx(0.5)


def test_refuses_fewer_than_two_distinct_values():
    with pytest.raises(FitError, match=r"fewer than 2 settings with distinct n_params \(got 1\)"):
        fit_power_law([1e8, 1e8], [300.0, 310.0], variable="n")
    with pytest.raises(FitError, match=r"distinct tokens \(got 1\)"):
        fit_power_law([1e9], [300.0], variable="d")
    with pytest.raises(FitError, match="positive finite"):
        fit_power_law([1e8, 2e8], [300.0, -1.0], variable="n")


def test_joint_law_recovers_both_exponents_from_a_grid():
    n = np.repeat([1e8, 3e8, 1e9], 3)
    d = np.tile([2e9, 6e9, 2e10], 3)
    cbs = power_law(n, 1.0, 0.05) * d**0.45 * 0.01
    fit = fit_joint_power_law(n, d, cbs)
    assert (fit.exponent_n, fit.exponent_d) == pytest.approx((0.05, 0.45), rel=1e-9)
    assert fit.coef == pytest.approx(0.01, rel=1e-8)
    rng = np.random.default_rng(1)
    noisy = fit_joint_power_law(n, d, cbs, cbs_samples=_samples(cbs, 0.05, rng))
    assert noisy.exponent_n_ci[0] <= 0.05 <= noisy.exponent_n_ci[1]
    assert noisy.exponent_d_ci[0] <= 0.45 <= noisy.exponent_d_ci[1]
    fc = noisy.forecast(2e9, 4e10)
    assert fc.cbs == pytest.approx(0.01 * 2e9**0.05 * 4e10**0.45, rel=1e-8)
    assert fc.cbs_ci[0] < fc.cbs < fc.cbs_ci[1]


def test_joint_law_refusals():
    with pytest.raises(FitError, match=r"fewer than 4 settings for the joint law \(got 3\)"):
        fit_joint_power_law([1e8, 2e8, 4e8], [1e9, 1e9, 2e9], [300.0, 320.0, 400.0])
    with pytest.raises(FitError, match="N and D vary together"):
        fit_joint_power_law(N, D, power_law(D, 0.02, 0.47))  # Chinchilla: D ≈ 20·N
    with pytest.raises(FitError, match="tokens to vary"):
        fit_joint_power_law(N[:4], [1e9] * 4, [300.0, 310.0, 320.0, 330.0])


def test_scaling_laws_pick_settings_that_carry_each_variable():
    names = ["a", "b", "c", "d", "e"]
    cbs = list(power_law(D, 0.02, 0.47))
    laws = fit_scaling_laws(names, [None, None, 3e8, 3e8, 3e8], list(D), cbs)
    # A law in D across the three settings that share N = 3e8, and one across the two that give
    # no N (taken as sharing it, and said so). No law in N, no joint law.
    assert [law.settings for law in laws.d_laws] == [("c", "d", "e"), ("a", "b")]
    assert laws.d.settings == ("c", "d", "e") and laws.d.exponent == pytest.approx(0.47)
    assert laws.d.fixed_name == "n_params" and laws.d.fixed_value == pytest.approx(3e8)
    assert laws.n_laws == () and laws.chinchilla == () and laws.n is None and laws.joint is None
    assert ("scaling law in tokens at fixed n_params (not given): settings a, b give no n_params; "
            "taken as sharing it") in laws.errors
    with pytest.raises(FitError, match="no scaling law"):
        laws.forecast(tokens=1e11)  # two laws in D: which N?
    assert laws.forecast(n_params=3e8, tokens=1e11).cbs == pytest.approx(0.02 * 1e11**0.47)
    with pytest.raises(FitError, match="no scaling law"):
        laws.forecast(n_params=1e9)
