"""Why B* grows with D: the least-squares theory of Zhang et al. 2025 (arXiv 2410.21676, §4) as an exact simulator.

Problem
    ``Problem(a, b, sigma2, d, p)``: features ``x ~ N(0, diag(i^−a))``, source condition
    ``λ_i·w*_i² = i^−b``, label noise ``σ²``, ``d`` modes, per-mode step ``η·λ_i^−p``;
    ``critical_step_size(problem, B)`` → ``η_crit(B)``, the largest stable step size.
Recursion (:mod:`cbscore.theory.recursion`, derivation in its docstring)
    ``Spectrum.solve(problem, B, η)`` → the exact expected risk as a sum of exponentials:
    ``.last()``, ``.ewa(τ)`` (the lab's bias-corrected EWA) and ``.uniform()`` give a
    :class:`RiskCurve` that evaluates ``R(t)`` at any integer step; ``direct_risk`` steps the
    moment recursion one step at a time (the reference it is tested against).
Protocol (:mod:`cbscore.theory.protocol`)
    ``run_theory(problem, Grid(...), b_ref=4, overhead=0.2, d_samples=…)`` → ``TheoryResult``:
    Zhang's Definition 1 at every ``D`` with the lab's :mod:`cbscore.analysis` (target at
    ``B_ref`` after ``D/B_ref`` steps, ``f(B)``, the empirical and fitted ``B*``, ``B_noise``),
    the laws in ``D`` and :func:`theory_exponents` beside them.
"""

from cbscore.theory.problem import MAX_MODES, Problem, critical_step_size, stability_margin
from cbscore.theory.protocol import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_D_SAMPLES,
    DEFAULT_ETA_FRACTIONS,
    DEFAULT_TAUS,
    Grid,
    LawFit,
    Run,
    SettingResult,
    TheoryResult,
    analyze,
    run_theory,
    simulate,
    step_grid,
    theory_exponents,
)
from cbscore.theory.recursion import ITERATES, RiskCurve, Spectrum, direct_risk

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_D_SAMPLES",
    "DEFAULT_ETA_FRACTIONS",
    "DEFAULT_TAUS",
    "ITERATES",
    "MAX_MODES",
    "Grid",
    "LawFit",
    "Problem",
    "RiskCurve",
    "Run",
    "SettingResult",
    "Spectrum",
    "TheoryResult",
    "analyze",
    "critical_step_size",
    "direct_risk",
    "run_theory",
    "simulate",
    "stability_margin",
    "step_grid",
    "theory_exponents",
]
