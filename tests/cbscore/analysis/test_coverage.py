"""Coverage of the nominal 95% intervals, checked by simulation (DESIGN.md §1, "Intervals": a
nominal 95% interval must cover the truth at least 90% of the time).

Few resamples per case (200) keep the file fast; the expanded percentile tails still sit between
resamples, so the checks are of the method, not of Monte-Carlo luck.
"""

from __future__ import annotations

import numpy as np
import pytest

from cbscore.analysis import (
    MeasuredPoint,
    analyze_table,
    bootstrap_steps_fit,
    fit_power_law,
    fit_steps,
    power_law,
)

from .synthetic import PAPER_BATCH_SIZES, curve, table_rows

#: The paper's models (DESIGN.md §1): N and Chinchilla D.
N = np.array([85e6, 151e6, 302e6, 604e6, 1.2e9])
D = np.array([1.741e9, 3.072e9, 6.144e9, 12.288e9, 24.576e9])
CASES, RESAMPLES = 200, 200
S_MIN, B_NOISE, R, B_REF = 1000.0, 500.0, 0.2, 256.0


def _point(batch_size, steps, seed_steps=()):
    return MeasuredPoint(
        batch_size=int(batch_size), steps=float(steps), trial_steps=tuple(sorted(seed_steps or (steps,))),
        n_trials=max(1, len(seed_steps)), n_censored=0, n_diverged=0, n_other=0, seed_steps=tuple(seed_steps),
        seed_cells=tuple(enumerate(seed_steps)) if seed_steps else ((None, float(steps)),),
    )


#: The lab's measured noise of ln S (issue 38, docs/results/reproduce/README.md, "Noise"): a shift
#: common to a seed across every batch size, and seed × cell noise.
LAB_SEED_COMMON, LAB_SEED_CELL = 0.071, 0.033


@pytest.mark.parametrize("n_seeds,batch_sizes", [(2, (4, 8, 16, 32)), (3, (4, 8, 16, 32)), (2, PAPER_BATCH_SIZES)])
def test_b_star_interval_covers_the_truth_under_the_labs_seed_clustered_noise(n_seeds, batch_sizes):
    # ln S[s, B] = ln S_true(B) + γ_s + ε[s, B], γ ~ N(0, 0.071²) shared by every B of a seed,
    # ε ~ N(0, 0.033²): a nominal 95% interval of B* must cover the truth 90-98% of the time, and
    # the common shift must not widen it (it cancels in B_noise).
    b = np.asarray(batch_sizes, dtype=float)
    b_ref, b_noise = b[0], 3.0 * b[0]
    true_cbs = (1 + R) * b_ref + R * b_noise
    clean = curve(b, 100.0, b_noise)
    covered = 0
    for case in range(CASES):
        rng = np.random.default_rng(40_000 + case)
        gamma = LAB_SEED_COMMON * rng.standard_normal(n_seeds)
        seeds = clean[:, None] * np.exp(gamma[None, :] + LAB_SEED_CELL * rng.standard_normal((len(b), n_seeds)))
        steps = np.exp(np.log(seeds).mean(axis=1))
        fit = fit_steps(b, steps)
        points = [_point(bb, s, tuple(row)) for bb, s, row in zip(b, steps, seeds)]
        boot = bootstrap_steps_fit(points, fit, n_resamples=RESAMPLES, seed=case, b_ref=b_ref, overhead=R)
        lo, hi = boot.cbs_ci
        covered += lo <= true_cbs <= hi
    assert 0.9 * CASES <= covered <= 0.98 * CASES, covered


def test_setting_interval_covers_b_noise_and_b_star_in_90_percent_of_200_noisy_curves():
    # S(B) = S_min + S_min·B_noise/B (McCandlish et al. 2018, eq. 2.11) times exp(0.05·z) at each
    # of the paper's nine batch sizes, one measurement per batch size: bootstrap by residuals.
    true_cbs = (1 + R) * B_REF + R * B_NOISE  # closed form, DESIGN.md §1
    covered = {"b_noise": 0, "cbs": 0}
    clean = curve(PAPER_BATCH_SIZES, S_MIN, B_NOISE)
    for case in range(CASES):
        rng = np.random.default_rng(case)
        steps = clean * np.exp(0.05 * rng.standard_normal(len(clean)))
        fit = fit_steps(PAPER_BATCH_SIZES, steps)
        points = [_point(b, s) for b, s in zip(PAPER_BATCH_SIZES, steps)]
        boot = bootstrap_steps_fit(points, fit, n_resamples=RESAMPLES, seed=case)
        assert boot.methods == ("residuals",) * 9
        covered["b_noise"] += boot.b_noise_ci[0] <= B_NOISE <= boot.b_noise_ci[1]
        covered["cbs"] += boot.cbs_ci[0] <= true_cbs <= boot.cbs_ci[1]
    assert min(covered.values()) >= 0.9 * CASES, covered


def test_setting_interval_covers_b_noise_when_every_cell_ran_three_seeds():
    # Each seed's S(B) is the clean curve times exp(0.1·z); S(B) is their geometric mean and the
    # bootstrap redraws the seed × cell residuals of the two-way table.
    clean = curve(PAPER_BATCH_SIZES, S_MIN, B_NOISE)
    covered = 0
    for case in range(CASES):
        rng = np.random.default_rng(10_000 + case)
        seeds = clean[:, None] * np.exp(0.1 * rng.standard_normal((len(clean), 3)))  # (K, 3)
        steps = np.exp(np.log(seeds).mean(axis=1))
        fit = fit_steps(PAPER_BATCH_SIZES, steps)
        points = [_point(b, s, tuple(row)) for b, s, row in zip(PAPER_BATCH_SIZES, steps, seeds)]
        boot = bootstrap_steps_fit(points, fit, n_resamples=RESAMPLES, seed=case)
        assert boot.methods == ("seeds",) * 9
        covered += boot.b_noise_ci[0] <= B_NOISE <= boot.b_noise_ci[1]
    assert covered >= 0.9 * CASES, covered


def test_law_interval_covers_the_exponent_when_settings_scatter_around_the_law():
    # Five settings whose B* scatter by exp(0.2·z) around B* = 3·N^0.3, each with its own
    # bootstrap draws (spread 0.05 around its measured B*): the between-setting variance of the
    # random-effects fit carries the scatter (4x the draws), the draws each setting's uncertainty.
    covered = 0
    for case in range(CASES):
        rng = np.random.default_rng(20_000 + case)
        measured = power_law(N, 3.0, 0.3) * np.exp(0.2 * rng.standard_normal(len(N)))
        samples = [b * np.exp(0.05 * rng.standard_normal(RESAMPLES)) for b in measured]
        fit = fit_power_law(N, measured, variable="n", cbs_samples=samples, n_draws=RESAMPLES, seed=case)
        covered += fit.exponent_ci[0] <= 0.3 <= fit.exponent_ci[1]
    assert covered >= 0.9 * CASES, covered


def test_exact_curves_scattered_around_a_law_give_an_exponent_interval_of_nonzero_width():
    # Five noise-free curves (each setting's bootstrap is exact, zero width) whose B_noise
    # scatters ±30% around B_noise ∝ N^0.5: the law's interval must still show the scatter.
    scatter = np.array([1.3, 0.7, 1.3, 0.7, 1.3])
    specs = [
        {"setting": f"s{i}", "n_params": n, "tokens": d, "s_min": 1500.0, "b_noise": 2000.0 * (n / N[0]) ** 0.5 * f}
        for i, (n, d, f) in enumerate(zip(N, D, scatter))
    ]
    analysis = analyze_table(table_rows(specs), bootstrap=200)
    for s in analysis.settings:
        assert s.cbs_ci[1] - s.cbs_ci[0] == pytest.approx(0.0, abs=1e-6 * s.cbs)
    (law,) = analysis.scaling.chinchilla
    lo, hi = law.exponent_ci
    assert hi - lo > 0.1 and lo < law.exponent < hi
