"""A seed that ran at some batch sizes only (a chained search's replicates, ``search.replicate_batch_sizes``):
``measure_points`` reads it through the seeds' additive fit, the bootstrap through the fit's residuals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cbscore.analysis import analyze_setting, measure_points
from cbscore.analysis._points import seed_adjusted_levels
from cbscore.analysis._trial import TrialSteps


def _steps(b: int, lr: float, shift: float = 0.0) -> float:
    """S = 1000·(1 + 1000/B)·e^shift·e^(0.2·ln²(η/η*)), η* = 0.01·√(B/256): a parabola in ln η."""
    return 1000.0 * (1 + 1000.0 / b) * math.exp(shift + 0.2 * math.log(lr / (0.01 * math.sqrt(b / 256))) ** 2)


def _grid(shift: float = 0.0, seed: int = 0) -> list[TrialSteps]:
    out = []
    for b in (256, 512, 1024, 2048):
        opt = 0.01 * math.sqrt(b / 256)
        out += [TrialSteps(batch_size=b, outcome="reached", steps=_steps(b, lr, shift), seed=seed, lr=lr)
                for lr in (opt / 2.1, opt * 1.05, opt * 1.9)]
    return out


def test_at_zero_noise_a_replicate_with_its_own_seed_shift_changes_no_s_of_b():
    """The replicate seed's shift (+0.1 in ln S) and its rate off the optimum (×1.3) both come out."""
    base = measure_points(_grid())
    reps = [TrialSteps(batch_size=b, outcome="reached", steps=_steps(b, 1.3 * 0.01 * math.sqrt(b / 256), 0.1),
                       seed=1, lr=1.3 * 0.01 * math.sqrt(b / 256)) for b in (512, 2048)]
    both = measure_points(_grid() + reps)
    for p, q in zip(base, both):
        assert q.steps == pytest.approx(p.steps, rel=1e-12)
        assert q.lr_best == p.lr_best
    # Averaged as a plain mean over the seeds of a cell, the shift would move S(512) by e^0.05.
    assert dict(measure_points(_grid() + reps)[1].seed_cells)[1] == pytest.approx(
        math.exp(0.1) * base[1].steps, rel=1e-9)


def test_the_two_way_fit_reads_a_replicate_only_through_the_contrasts_its_seed_shares():
    # Seed 0 everywhere; seed 1 at B = 1 and 2, 0.2 higher and with a contrast 0.1 larger.
    table = {(1, 0): 1.0, (2, 0): 0.5, (4, 0): 0.2, (1, 1): 1.2, (2, 1): 0.8}
    mu = seed_adjusted_levels(table, [0])
    # Shift 0.25 (the mean difference); μ_1 = (1.0 + 1.2 − 0.25)/2, μ_2 = (0.5 + 0.8 − 0.25)/2, μ_4 = 0.2.
    assert mu == pytest.approx({1: 0.975, 2: 0.525, 4: 0.2})
    # At one batch size alone it changes nothing; a seed sharing none is not identified.
    assert seed_adjusted_levels({(1, 0): 1.0, (2, 0): 0.5, (2, 1): 0.9}, [0]) == pytest.approx({1: 1.0, 2: 0.5})
    assert seed_adjusted_levels({(1, 0): 1.0, (2, 1): 0.9}, [0]) is None


def test_a_replicate_seed_at_two_batch_sizes_leaves_the_bootstrap_on_the_fits_residuals():
    """One replicate pair leaves the seed table one residual degree of freedom: an interval read off
    it covered the truth in 80% of simulated studies; the fit's K − 2 residuals are used instead."""
    rng = np.random.default_rng(0)
    sizes = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    trials = [TrialSteps(batch_size=b, outcome="reached", seed=0, lr=lr,
                         steps=1e4 * (1 + 2000 / b) * math.exp(0.04 * rng.standard_normal() + 0.2 * math.log(lr) ** 2))
              for b in sizes for lr in (0.5, 1.0, 2.0)]
    reps = [TrialSteps(batch_size=b, outcome="reached", seed=1, lr=1.0, steps=1.07e4 * (1 + 2000 / b)) for b in (64, 16384)]
    boot = analyze_setting("s", trials + reps, bootstrap=50, b_ref=256).bootstrap
    assert boot.methods == ("residuals",) * 9 and boot.dof == 7
    # Two seeds everywhere keep the seeds' own residuals.
    both = trials + [TrialSteps(batch_size=t.batch_size, outcome="reached", seed=1, lr=t.lr, steps=1.07 * t.steps)
                     for t in trials]
    assert analyze_setting("s", both, bootstrap=50, b_ref=256).bootstrap.methods == ("seeds",) * 9
