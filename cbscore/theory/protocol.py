"""Zhang et al.'s Definition 1 run on the exact least-squares simulator: B*, B_noise and their laws in D.

The protocol (Zhang et al. 2025, arXiv 2410.21676, §2.2 and Definition 1; DESIGN.md §1):

1. For every batch size ``B`` and step size ``η = f_j·η_crit(B)`` on the grid (and every EWA ``τ``),
   the exact expected risk curve ``R(t)`` (:mod:`cbscore.theory.recursion`). One pass serves every
   ``D`` and every target.
2. For a data size ``D`` (samples): the target is the best risk at ``B_ref`` after ``D/B_ref``
   steps, minimised over ``η`` (and ``τ``).
3. Steps to target ``f(B)``: for each configuration the first step ``t`` with ``R(t) ≤ target``
   (located on the geometric step grid, then to the exact integer by bisection inside the grid
   cell where it first happens, which assumes one crossing inside that cell; ``R`` need not be
   monotone), minimised over ``η`` (and ``τ``): the paper's minimum over the grid, exact here
   because the simulator has no noise. A ``B`` whose every configuration misses the target by the
   last step of the grid has no ``f(B)``.
4. The lab's analysis on those points (:mod:`cbscore.analysis`): the empirical ``B*`` read off the
   points (``cbs_empirical``: the largest ``B`` with ``B·f(B) ≤ (1 + r)·B_ref·f(B_ref)``,
   interpolated on log axes), the fit ``f(B) = S_min + E_min/B`` on ``log f`` over ``B ≥ B_ref``
   (``fit_steps``) with ``B_noise = E_min/S_min`` and the fitted ``B* = (1 + r)·B_ref + r·B_noise``.
5. Across ``D``: power laws ``B* = c·D^β`` on log axes (``fit_power_law``) beside the theory's
   exponents (:func:`theory_exponents`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from cbscore.analysis import cbs_empirical, fit_power_law, fit_steps
from cbscore.errors import ConfigError, FitError
from cbscore.theory.problem import Problem, check_batch_size, critical_step_size
from cbscore.theory.recursion import RiskCurve, Spectrum, check_iterate, check_tau

#: The grids: B = 2^0 … 2^12, η = η_crit(B)·0.95·2^−j for j = 1 … 11 (top 0.475·η_crit). Near the stability
#: limit the risk of SGD is heavy-tailed: at 0.95·η_crit, 3,000 Monte-Carlo runs of SGD (``sgd_risks`` of
#: tests/cbscore/test_theory_montecarlo.py, seeds 7 and 8, d = 50) sat up to 10 standard
#: errors below the exact expectation (last iterate, B = 4, t = 60) and up to 5 (uniform average, B = 16), so
#: the exact risk there cannot be checked against SGD itself; from 0.475·η_crit down every check holds
#: (tests/cbscore/test_theory_montecarlo.py covers the grid's top rate).
DEFAULT_BATCH_SIZES = tuple(2**k for k in range(13))
DEFAULT_ETA_FRACTIONS = tuple(0.95 * 2.0**-j for j in range(1, 12))
#: EWA decays searched: averaging horizons 1/(1 − τ) of 3 … 10^6 steps, half a decade apart.
DEFAULT_TAUS = tuple(1.0 - 10.0**-x for x in np.arange(0.5, 6.01, 0.5))
#: Data sizes (samples) of the law in D: 10^3 … 10^6, half a decade apart.
DEFAULT_D_SAMPLES = tuple(float(round(10.0**x)) for x in np.arange(3.0, 6.01, 0.5))


def step_grid(max_steps: int, ratio: float = 1.05) -> np.ndarray:
    """Steps ``0, 1, 2, …`` rounded from ``ratio^k``, without repeats, ending at ``max_steps``."""
    if not ratio > 1.0:
        raise ConfigError("ratio", ratio, "must be a number above 1")
    n = int(math.ceil(math.log(max_steps) / math.log(ratio))) + 2
    steps = np.unique(np.round(ratio ** np.arange(n)))
    steps = steps[steps < max_steps]
    return np.concatenate([[0.0], steps, [float(max_steps)]])


def theory_exponents(a: float, b: float) -> dict[str, float]:
    """Exponents ``β`` of ``B* ∝ D^β`` predicted for this problem, by iterate.

    ``"averaged"``: ``1 − a/min{b, 2a + 1}``, Zhang et al. 2025 (§4) for averaged SGD as quoted in
    issue 26 (not re-derived here). ``"last"``: ``(b − 1)/(a + b − 1)``, derived in
    ``docs/theory.md`` by the same balance for a constant-step last iterate (bias
    ``(ηS)^−(b−1)/a`` against variance ``∝ η·tr H/B``, linear scaling ``η ∝ B`` up to the largest
    stable ``η``), not a result of the paper.
    """
    return {"averaged": 1.0 - a / min(b, 2.0 * a + 1.0), "last": (b - 1.0) / (a + b - 1.0)}


@dataclass(frozen=True, kw_only=True)
class Grid:
    """What the simulator runs: batch sizes, step sizes, averages and the step grid."""

    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    """Batch sizes ``B`` (samples per step)."""
    eta_fractions: tuple[float, ...] = DEFAULT_ETA_FRACTIONS
    """Step sizes as fractions of ``η_crit(B)`` (each in (0, 1))."""
    iterate: str = "uniform"
    """Which iterate is evaluated: ``uniform`` (the average of all iterates, the averaged SGD that Zhang et
    al. 2025 analyse in §4; the default), ``ewa`` (minimised over :attr:`taus`) or ``last``."""
    taus: tuple[float, ...] = DEFAULT_TAUS
    """EWA decays ``τ`` searched (``iterate="ewa"`` only)."""
    max_steps: int = 3_000_000
    """Last step of the step grid."""
    ratio: float = 1.05
    """Ratio of the geometric step grid."""

    def __post_init__(self) -> None:
        if not self.batch_sizes:
            raise ConfigError("batch_sizes", self.batch_sizes, "must list at least one batch size")
        object.__setattr__(self, "batch_sizes", tuple(sorted({check_batch_size(b, "batch_sizes") for b in self.batch_sizes})))
        fracs = tuple(float(f) for f in self.eta_fractions)
        if not fracs or any(not 0.0 < f < 1.0 for f in fracs):
            raise ConfigError("eta_fractions", self.eta_fractions, "must be one or more numbers in (0, 1)")
        object.__setattr__(self, "eta_fractions", fracs)
        check_iterate(self.iterate)
        object.__setattr__(self, "taus", tuple(check_tau(t) for t in self.taus))
        if self.iterate == "ewa" and not self.taus:
            raise ConfigError("taus", self.taus, "must list at least one τ for the EWA")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, (int, np.integer)) or self.max_steps < 2:
            raise ConfigError("max_steps", self.max_steps, "must be a whole number ≥ 2")
        if not isinstance(self.ratio, (int, float)) or not self.ratio > 1.0:
            raise ConfigError("ratio", self.ratio, "must be a number above 1")


@dataclass(frozen=True, kw_only=True, eq=False)
class Run:
    """Every configuration's risk curve, on the step grid and in closed form."""

    problem: Problem
    grid: Grid
    steps: np.ndarray
    """(T,) the step grid."""
    eta_crit: np.ndarray
    """(nB,) ``η_crit(B)``."""
    curves: tuple[tuple[RiskCurve, ...], ...]
    """Per batch size, its configurations (``η`` major, then ``τ``)."""
    risk: tuple[np.ndarray, ...]
    """Per batch size, (n_config, T) the risk on the step grid."""


def simulate(problem: Problem, grid: Grid) -> Run:
    """Every configuration of ``grid`` on ``problem``: the exact risk on the step grid."""
    steps = step_grid(grid.max_steps, grid.ratio)
    curves, risk, crit = [], [], []
    for b in grid.batch_sizes:
        eta_c = critical_step_size(problem, b)
        crit.append(eta_c)
        per_b, values = [], []
        for frac in grid.eta_fractions:
            spec = Spectrum.solve(problem, b, frac * eta_c)
            if grid.iterate == "last":
                these = [spec.last()]
            elif grid.iterate == "uniform":
                these = [spec.uniform()]
            else:
                these = [spec.ewa(tau) for tau in grid.taus]
            per_b.extend(these)
            values.append(spec.evaluate(these, steps))
        curves.append(tuple(per_b))
        risk.append(np.concatenate(values))
    return Run(problem=problem, grid=grid, steps=steps, eta_crit=np.array(crit), curves=tuple(curves),
               risk=tuple(risk))


def first_step_at_or_below(curve: RiskCurve, steps: np.ndarray, values: np.ndarray, target: float) -> float | None:
    """The first integer step with ``R ≤ target``: its grid cell, then bisection inside it."""
    hit = np.flatnonzero(values <= target)
    if hit.size == 0:
        return None
    j = int(hit[0])
    if j == 0:
        return float(steps[0])
    lo, hi = int(steps[j - 1]), int(steps[j])  # R(lo) > target ≥ R(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if float(curve(mid)) <= target:
            hi = mid
        else:
            lo = mid
    return float(hi)


@dataclass(frozen=True, kw_only=True)
class SettingResult:
    """One data size ``D``: the target, ``f(B)`` per batch size and the lab's CBS numbers."""

    d_samples: float
    """``D`` in samples; the reference runs ``D/B_ref`` steps."""
    target: float
    """Best excess risk at ``B_ref`` after ``D/B_ref`` steps (over ``η`` and ``τ``)."""
    batch_sizes: tuple[int, ...]
    steps: tuple[float | None, ...]
    """``f(B)``: steps to target at each batch size (``None``: not reached by the last step)."""
    best: tuple[int | None, ...]
    """Index of the configuration that reached first, per batch size."""
    cbs_empirical: float | None
    """``B*`` read off the points (the lab's empirical 20% CBS), ``None`` with :attr:`errors`."""
    b_noise: float | None
    """``B_noise = E_min/S_min`` of the fit over ``B ≥ B_ref``."""
    s_min: float | None
    cbs: float | None
    """The fitted ``B* = (1 + r)·B_ref + r·B_noise``."""
    errors: dict[str, str] = field(default_factory=dict)
    """Why a number is ``None``."""

    def to_json_dict(self) -> dict:
        return {"d_samples": self.d_samples, "target": self.target, "cbs_empirical": self.cbs_empirical,
                "b_noise": self.b_noise, "s_min": self.s_min, "cbs": self.cbs,
                "steps": {str(b): s for b, s in zip(self.batch_sizes, self.steps)}, "errors": dict(self.errors)}


@dataclass(frozen=True, kw_only=True)
class LawFit:
    """``y = c·D^β`` fitted on log axes across the data sizes that have a value."""

    quantity: str
    coef: float
    exponent: float
    n_points: int

    def __call__(self, d_samples):
        return self.coef * np.asarray(d_samples, dtype=float) ** self.exponent


@dataclass(frozen=True, kw_only=True, eq=False)
class TheoryResult:
    """The protocol's answer for one problem and grid."""

    problem: Problem
    grid: Grid
    b_ref: int
    overhead: float
    settings: tuple[SettingResult, ...]
    laws: dict[str, LawFit]
    """Fitted laws in ``D`` of ``cbs_empirical``, ``b_noise`` and ``cbs`` (where 2+ points exist)."""
    theory: dict[str, float]
    """:func:`theory_exponents`."""
    run: Run

    def to_json_dict(self) -> dict:
        return {
            "problem": self.problem.to_dict(),
            "iterate": self.grid.iterate,
            "b_ref": self.b_ref,
            "overhead": self.overhead,
            "batch_sizes": list(self.grid.batch_sizes),
            "eta_fractions": list(self.grid.eta_fractions),
            "taus": list(self.grid.taus) if self.grid.iterate == "ewa" else None,
            "max_steps": self.grid.max_steps,
            "eta_crit": {str(b): float(e) for b, e in zip(self.grid.batch_sizes, self.run.eta_crit)},
            "settings": [s.to_json_dict() for s in self.settings],
            "laws": {k: {"coef": v.coef, "exponent": v.exponent, "n_points": v.n_points} for k, v in self.laws.items()},
            "theory_exponents": dict(self.theory),
        }


def analyze(run: Run, *, b_ref: int = 4, overhead: float = 0.2,
            d_samples: Sequence[float] = DEFAULT_D_SAMPLES) -> TheoryResult:
    """Definition 1 at each ``D`` in ``d_samples`` on a finished :func:`simulate` run."""
    b_ref = check_batch_size(b_ref, "b_ref")
    if b_ref not in run.grid.batch_sizes:
        raise ConfigError("b_ref", b_ref, f"must be one of the batch sizes {list(run.grid.batch_sizes)}")
    if not isinstance(overhead, (int, float)) or not 0 < overhead < math.inf:
        raise ConfigError("overhead", overhead, "must be a positive number")
    d_list = tuple(float(d) for d in d_samples)
    if not d_list or any(not (math.isfinite(d) and d >= b_ref) for d in d_list):
        raise ConfigError("d_samples", d_samples, f"must be one or more numbers ≥ B_ref = {b_ref}")
    ref = run.grid.batch_sizes.index(b_ref)
    settings = [_setting(run, ref, b_ref, overhead, d) for d in sorted(d_list)]
    laws = {}
    for name in ("cbs_empirical", "b_noise", "cbs"):
        pts = [(s.d_samples, getattr(s, name)) for s in settings if getattr(s, name) is not None]
        if len({d for d, _ in pts}) >= 2:
            fit = fit_power_law([d for d, _ in pts], [v for _, v in pts], variable="d")
            laws[name] = LawFit(quantity=name, coef=float(fit.coef), exponent=float(fit.exponent), n_points=len(pts))
    return TheoryResult(problem=run.problem, grid=run.grid, b_ref=b_ref, overhead=float(overhead),
                        settings=tuple(settings), laws=laws, theory=theory_exponents(run.problem.a, run.problem.b),
                        run=run)


def _setting(run: Run, ref: int, b_ref: int, overhead: float, d_samples: float) -> SettingResult:
    ref_steps = max(1, int(round(d_samples / b_ref)))
    if ref_steps > run.grid.max_steps:
        raise ConfigError("d_samples", d_samples, f"needs {ref_steps} steps at B_ref, beyond max_steps = {run.grid.max_steps}")
    target = float(min(float(c(ref_steps)) for c in run.curves[ref]))
    steps, best = [], []
    for curves, values in zip(run.curves, run.risk):
        # Only the configurations whose first grid point at or below the target is the earliest can
        # hold the minimum (any other crosses after that point's predecessor): bisect those alone.
        below = values <= target  # (n_config, T)
        cell = np.where(below.any(axis=1), below.argmax(axis=1), np.iinfo(np.int64).max)
        first = int(cell.min())
        if first == np.iinfo(np.int64).max:
            steps.append(None)
            best.append(None)
            continue
        hits = [(first_step_at_or_below(curves[i], run.steps, values[i], target), int(i))
                for i in np.flatnonzero(cell == first)]
        s, i = min(hits)
        steps.append(s)
        best.append(i)
    errors: dict[str, str] = {}
    have = [(b, s) for b, s in zip(run.grid.batch_sizes, steps) if s is not None]
    bs, ss = [b for b, _ in have], [s for _, s in have]
    cbs_emp = b_noise = s_min = cbs = None
    try:
        cbs_emp = cbs_empirical(bs, ss, b_ref, overhead)
    except FitError as exc:
        errors["cbs_empirical"] = str(exc)
    try:
        upper = [(b, s) for b, s in have if b >= b_ref]
        fit = fit_steps([b for b, _ in upper], [s for _, s in upper])
        b_noise, s_min, cbs = float(fit.b_noise), float(fit.s_min), float(fit.cbs(overhead, b_ref))
    except FitError as exc:
        errors["b_noise"] = errors["cbs"] = str(exc)
    return SettingResult(d_samples=d_samples, target=target, batch_sizes=run.grid.batch_sizes, steps=tuple(steps),
                         best=tuple(best), cbs_empirical=cbs_emp, b_noise=b_noise, s_min=s_min, cbs=cbs, errors=errors)


def run_theory(problem: Problem, grid: Grid | None = None, *, b_ref: int = 4, overhead: float = 0.2,
               d_samples: Sequence[float] = DEFAULT_D_SAMPLES) -> TheoryResult:
    """:func:`simulate` then :func:`analyze` (``b_ref`` is checked before anything runs)."""
    grid = grid or Grid()
    if check_batch_size(b_ref, "b_ref") not in grid.batch_sizes:
        raise ConfigError("b_ref", b_ref, f"must be one of the batch sizes {list(grid.batch_sizes)}")
    return analyze(simulate(problem, grid), b_ref=b_ref, overhead=overhead, d_samples=d_samples)


