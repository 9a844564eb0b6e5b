"""The rule behind "does this study support: B* scales with D, not with N" (Zhang et al. 2025)."""

from __future__ import annotations

import numpy as np
import pytest

from cbscore.analysis import (
    PAPER_EXPONENT_CHINCHILLA,
    PAPER_EXPONENT_D,
    PAPER_EXPONENT_N,
    compare_with_paper,
    fit_scaling_laws,
    scales_with_d_not_n,
)


def _draws(d_ci, n_ci, corr=0.0, n=4000):
    """Paired normal draws of (beta_D, alpha_N) whose central 95% are ``d_ci`` and ``n_ci``."""
    z = np.random.default_rng(0).standard_normal((2, n))
    z[1] = corr * z[0] + np.sqrt(1 - corr**2) * z[1]
    (d_lo, d_hi), (n_lo, n_hi) = d_ci, n_ci
    return ((d_lo + d_hi) / 2 + (d_hi - d_lo) / 3.92 * z[0],
            (n_lo + n_hi) / 2 + (n_hi - n_lo) / 3.92 * z[1])


@pytest.mark.parametrize("d_ci, n_ci, corr, verdict, clause", [
    # Finding 5 of issue 19: the N-exponent's interval includes 0 only because it is wide; the old
    # rule called this "supported".
    ((0.05, 0.9), (-0.5, 1.5), 0.0, "inconclusive", "D-exponent minus N-exponent over the same draws"),
    ((0.3, 0.6), (-0.05, 0.2), 0.0, "supported", "lies above 0 and so does D-exponent minus N-exponent"),
    ((0.3, 0.6), (-0.4, -0.35), 0.0, "supported", "lies above 0 and so does"),
    ((-0.1, 0.6), (-0.05, 0.2), 0.0, "inconclusive", "the D-exponent's 95% interval [-0.09"),
    ((0.3, 0.6), (0.2, 0.4), 0.0, "inconclusive", "includes 0"),
    # The same margins, drawn together (a shared setting moves both exponents alike): the
    # difference is tight and above 0, which only paired draws can show.
    ((0.3, 0.6), (0.2, 0.4), 0.99, "supported", "lies above 0 and so does"),
    ((0.1, 0.2), (0.3, 0.5), 0.0, "not supported", "grows faster with N than with D"),
    ((-0.6, -0.3), (-0.05, 0.2), 0.0, "not supported", "falls with D"),
])
def test_verdict_rule_reads_the_joint_draws(d_ci, n_ci, corr, verdict, clause):
    got, reason = scales_with_d_not_n(*_draws(d_ci, n_ci, corr))
    assert got == verdict and clause in reason, reason


def test_verdict_reason_gives_the_quantiles_of_both_conditions():
    d, n = _draws((0.3, 0.6), (-0.05, 0.2))
    _, reason = scales_with_d_not_n(d, n)
    d_lo, d_hi = np.percentile(d, [2.5, 97.5])
    x_lo, x_hi = np.percentile(d - n, [2.5, 97.5])
    assert f"[{d_lo:.3f}, {d_hi:.3f}]" in reason and f"[{x_lo:.3f}, {x_hi:.3f}]" in reason


def test_verdict_without_paired_draws_is_inconclusive():
    d, n = _draws((0.3, 0.6), (-0.05, 0.2))
    assert scales_with_d_not_n(None, n)[0] == "inconclusive"
    assert "no interval for the D-exponent at fixed N, so no draws" in scales_with_d_not_n(None, n)[1]
    assert "no interval for the N-exponent at fixed D, so no draws" in scales_with_d_not_n(d, None)[1]
    got, reason = scales_with_d_not_n(d, n[:-1])
    assert got == "inconclusive" and "do not pair up" in reason


def test_paper_values_are_the_published_exponents():
    assert (PAPER_EXPONENT_D, PAPER_EXPONENT_N, PAPER_EXPONENT_CHINCHILLA) == (0.47, 0.087, 0.47)


def test_comparison_of_a_study_shaped_like_the_paper_supports_it():
    # A fixed-N study (5 D at N = 151M) and a fixed-D study (5 N at D = 3.072B) on the paper's laws,
    # B* scattered by exp(0.05·z), each with its own draws.
    rng = np.random.default_rng(3)
    ns = [151e6] * 5 + [85e6, 302e6, 604e6, 1.2e9]
    ds = [0.768e9, 1.536e9, 3.072e9, 6.144e9, 12.288e9] + [3.072e9] * 4
    cbs = [300.0 * (d / 3.072e9) ** 0.47 * (n / 151e6) ** 0.087 * np.exp(0.05 * rng.standard_normal())
           for n, d in zip(ns, ds)]
    samples = [c * np.exp(0.05 * rng.standard_normal(300)) for c in cbs]
    laws = fit_scaling_laws([f"s{i}" for i in range(9)], ns, ds, cbs, samples, n_draws=300)
    comparison = compare_with_paper(laws)
    assert comparison.exponent_d.source == "law in D at fixed N = 1.51e+08, 5 settings"
    assert comparison.exponent_n.source == "law in N at fixed D = 3.072e+09, 5 settings"
    assert comparison.verdict == "supported", comparison.reason
    assert comparison.sentence.startswith("This study supports the paper's finding that B* scales with D, not with N: ")
