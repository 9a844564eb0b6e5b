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


@pytest.mark.parametrize("d_ci, n_ci, verdict, clause", [
    ((0.3, 0.6), (-0.05, 0.2), "supported", "the N-exponent's [-0.050, 0.200] includes 0"),
    ((0.3, 0.6), (0.05, 0.2), "supported", "lies below it"),
    ((0.3, 0.6), (-0.4, -0.35), "supported", "lies below it"),
    ((-0.1, 0.6), (-0.05, 0.2), "inconclusive", "the D-exponent's interval [-0.100, 0.600] includes 0"),
    ((0.3, 0.6), (0.2, 0.4), "inconclusive", "excludes 0 and overlaps the D-exponent's"),
    ((0.1, 0.2), (0.3, 0.5), "not supported", "grows faster with N than with D"),
    ((-0.6, -0.3), (-0.05, 0.2), "not supported", "falls with D"),
    (None, (-0.05, 0.2), "inconclusive", "no interval for the D-exponent"),
    ((0.3, 0.6), None, "inconclusive", "no interval for the N-exponent"),
])
def test_verdict_rule(d_ci, n_ci, verdict, clause):
    got, reason = scales_with_d_not_n(d_ci, n_ci)
    assert got == verdict and clause in reason


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
