"""Shape before slope (issue 38): seed-paired doubling ratios, the lack-of-fit test, which doublings
carry a law's trend, the noise components and the verdict that reads them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from cbscore.analysis import (
    MeasuredPoint,
    SeedTable,
    analyze_table,
    doubling_pairs,
    doubling_ratios,
    lack_of_fit,
    read_steps_csv,
)
from cbscore.analysis._interval import student_t_quantile
from cbscore.study.sim_tables import LAB_NOISE, LabNoise, SimSetting, TruthShape, simulated_rows

REPRODUCE = Path(__file__).resolve().parents[3] / "docs/results/reproduce/steps.csv"


def _table(batch_sizes, log_s):
    """A SeedTable of ``log_s`` (n seeds, K batch sizes) through MeasuredPoints, as the analysis builds it."""
    points = []
    for j, b in enumerate(batch_sizes):
        cells = tuple((s, float(math.exp(v))) for s, v in enumerate(log_s[:, j]))
        points.append(MeasuredPoint(batch_size=b, steps=float(math.exp(log_s[:, j].mean())), trial_steps=(1.0,),
                                    n_trials=1, n_censored=0, n_diverged=0, n_other=0,
                                    seed_steps=tuple(c[1] for c in cells), seed_cells=cells))
    return SeedTable.from_points(points)


def test_doubling_pairs_take_every_factor_near_two_on_a_root_two_ladder():
    assert doubling_pairs([4, 6, 8, 11, 16, 23, 32]) == [(4, 8), (6, 11), (8, 16), (11, 23), (16, 32)]
    assert doubling_pairs([4, 8, 16, 32]) == [(4, 8), (8, 16), (16, 32)]
    assert doubling_pairs([4, 12]) == []


def test_a_seed_common_shift_cancels_in_the_doubling_ratios_and_the_table_separates_it():
    b = (4, 8, 16, 32)
    clean = np.log(100 * (1 + 12.0 / np.array(b)))
    log_s = np.stack([clean + 0.2, clean - 0.2])  # (2, 4): seeds differ by 0.4 at every B, no cell noise
    table = _table(b, log_s)
    assert table.dof == 3 and table.gamma == pytest.approx([0.2, -0.2])
    assert table.cell_variance == pytest.approx(0.0, abs=1e-20)
    ratios = doubling_ratios(table, b_ref=4)
    assert [r.place for r in ratios] == ["first", "beyond", "beyond"]
    for r, (lo, hi) in zip(ratios, [(4, 8), (8, 16), (16, 32)]):
        expected = (1 + 12.0 / lo) / (1 + 12.0 / hi)
        assert r.ratio == pytest.approx(expected) and r.per_seed == pytest.approx((math.log(expected),) * 2)
        assert r.ci == pytest.approx((math.log(expected),) * 2)


def test_a_ratio_interval_is_t_on_the_tables_dof_times_the_pooled_cell_variance():
    rng = np.random.default_rng(5)
    b = (4, 8, 16, 32, 64)
    log_s = np.log(100 * (1 + 12.0 / np.array(b)))[None, :] + 0.05 * rng.standard_normal((3, 5))
    table = _table(b, log_s)
    assert table.dof == (3 - 1) * (5 - 1)
    resid = log_s - log_s.mean(axis=0) - log_s.mean(axis=1, keepdims=True) + log_s.mean()
    var = float(np.sum(resid ** 2)) / 8
    assert table.cell_variance == pytest.approx(var)
    r = doubling_ratios(table, b_ref=4)[0]
    half = student_t_quantile(0.975, 8) * math.sqrt(2 * var / 3)
    assert r.ci == pytest.approx((r.log_ratio - half, r.log_ratio + half))


def test_the_reproduce_d_trend_is_carried_by_the_first_doubling_alone():
    # Issue 38's numbers, re-read from the committed table: seed-paired slopes per e-fold of D over the
    # four tiny-0.1M settings, seed fixed effect, t on 5 dof.
    table = analyze_table(read_steps_csv(REPRODUCE), b_ref=4, overhead=0.2, bootstrap=200)
    shape = next(s for s in table.shapes if s.source.startswith("law in D"))
    by_pair = {t.doublings[0]: t for t in shape.trends}
    assert by_pair[(4, 8)].slope == pytest.approx(0.084, abs=0.001) and by_pair[(4, 8)].dof == 5
    assert by_pair[(4, 8)].positive
    assert by_pair[(8, 16)].ci[0] < 0 < by_pair[(8, 16)].ci[1]
    assert by_pair[(16, 32)].slope == pytest.approx(-0.010, abs=0.001)
    assert by_pair[(16, 32)].ci[1] < 0.016  # excludes even B_noise ∝ D^0.1
    assert shape.beyond.ci[0] < 0 < shape.beyond.ci[1]
    comparison = table.paper_comparison()
    assert comparison.verdict != "supported"
    assert "first doubling from B_ref alone" in comparison.sentence
    noise = table.noise
    assert noise.rate_sd == pytest.approx(0.030, abs=0.001)
    assert noise.seed_cell_sd == pytest.approx(0.034, abs=0.001)
    assert noise.seed_common_sd == pytest.approx(0.066, abs=0.001)
    assert noise.curvature == pytest.approx(0.198, abs=0.001)


def _settings(q_slope=0.0, knee=0.0, n_arm=True):
    pairs = [(98_304, 31_250), (98_304, 125_000), (98_304, 500_000)]
    if n_arm:
        pairs += [(331_776, 125_000), (786_432, 125_000)]
    return [SimSetting(name=f"N{n}_D{d}", n_params=n, tokens=d,
                       truth=TruthShape(s_min=d / 500, b_noise=15.0 * (d / 125_000) ** knee,
                                        small_batch_log=q_slope * math.log(d / 125_000), b_ref=4))
            for n, d in pairs]


def test_lack_of_fit_rejects_a_small_batch_penalty_and_keeps_the_fitted_form():
    quiet = LabNoise(seed_common_sd=0.07, seed_cell_sd=0.01, rate_sd=0.01, lr_curvature=0.2)
    b = (4, 6, 8, 11, 16, 23, 32)
    penalty = [SimSetting(name="p", n_params=1e5, tokens=1e5, truth=TruthShape(s_min=100, b_noise=15, small_batch_log=0.15))]
    plain = [SimSetting(name="q", n_params=1e5, tokens=1e5, truth=TruthShape(s_min=100, b_noise=15))]
    rejected = kept = 0
    for i in range(10):
        for settings in (penalty, plain):
            s = analyze_table(simulated_rows(settings, b, seeds=3, noise=quiet, rng=np.random.default_rng(i)),
                              b_ref=4, bootstrap=0).settings[0]
            if settings is penalty:
                rejected += s.lack_of_fit.rejected
            else:
                kept += not s.lack_of_fit.rejected
    assert rejected == 10 and kept >= 8


def test_noise_components_recover_the_simulated_lab_noise():
    rows = simulated_rows(_settings() * 4, (4, 8, 16, 32), seeds=3, rng=np.random.default_rng(0))
    for i, row in enumerate(rows):  # twenty distinct settings
        row["setting"] = f"{row['setting']}_{i // (4 * 3 * 5 * 5)}"
    noise = analyze_table(rows, b_ref=4, bootstrap=0).noise
    assert noise.n_settings == 20
    assert noise.rate_sd == pytest.approx(LAB_NOISE.rate_sd, rel=0.15)
    assert noise.seed_common_sd == pytest.approx(LAB_NOISE.seed_common_sd, rel=0.3)
    assert noise.curvature == pytest.approx(LAB_NOISE.lr_curvature, rel=0.15)
    # A cell averages five rates' noise on top of its own: about the 0.034 measured on reproduce.
    assert noise.seed_cell_sd == pytest.approx(0.034, rel=0.2)


@pytest.mark.parametrize("truth,want_supported", [("small-batch", False), ("knee", True)])
def test_the_verdict_tells_a_small_batch_effect_from_a_moving_knee(truth, want_supported):
    settings = _settings(q_slope=0.084) if truth == "small-batch" else _settings(knee=0.3)
    supported = named = 0
    for i in range(8):
        rows = simulated_rows(settings, (4, 8, 16, 32), seeds=2, rng=np.random.default_rng(100 + i))
        table = analyze_table(rows, b_ref=4, bootstrap=100, seed=i)
        comparison = table.paper_comparison()
        supported += comparison.verdict == "supported"
        shape = next(s for s in table.shapes if s.source.startswith("law in D"))
        if shape.first.positive and not shape.beyond.positive:
            # A trend in the first doubling alone is named for what it is.
            assert "small-batch effect" in comparison.sentence
            named += 1
    if want_supported:
        assert supported >= 7 and named == 0
    else:
        assert supported == 0 and named >= 6


def test_the_truths_b_star_by_the_rule_is_the_closed_form_without_a_penalty():
    t = TruthShape(s_min=100, b_noise=15, b_ref=4)
    assert t.cbs(0.2) == pytest.approx(1.2 * 4 + 0.2 * 15, rel=1e-6)
    steeper = TruthShape(s_min=100, b_noise=15, b_ref=4, small_batch_log=0.1)
    assert steeper.cbs(0.2) > t.cbs(0.2)  # S(B_ref) raised: linear scaling from it holds further


def test_lack_of_fit_needs_a_noise_estimate():
    b = (4, 8, 16)
    table = _table(b, np.log(100 * (1 + 12.0 / np.array(b)))[None, :])
    assert table.dof == 0 and lack_of_fit(table, [0.0, 0.0, 0.0]) is None


def test_the_knee_is_b_noise_over_two_on_the_fitted_form_and_says_when_it_is_off_the_grid():
    # A doubling from B costs a third more tokens where (B + B_n)/(B + B_n/2) = 3/2: B = B_n/2
    # (McCandlish et al. 2018, eq. 2.11); read between the ladder's points on log axes.
    from cbscore.analysis._shape import knee

    ladder = (4, 6, 8, 11, 16, 23, 32)
    for b_noise in (12.0, 15.0, 24.0):
        found = knee(ladder, [math.log(1 + b_noise / b) for b in ladder])
        assert found == pytest.approx(b_noise / 2, rel=0.15)
    assert knee(ladder, [math.log(1 + 4.0 / b) for b in ladder]) is None  # B_n/2 = 2: below the grid
    assert knee(ladder, [math.log(1 + 200.0 / b) for b in ladder]) == math.inf  # B_n/2 = 100: past it
    # A seed-common shift changes nothing: only differences of ln S enter.
    assert knee(ladder, [math.log(1 + 15.0 / b) + 0.3 for b in ladder]) == pytest.approx(
        knee(ladder, [math.log(1 + 15.0 / b) for b in ladder]))
