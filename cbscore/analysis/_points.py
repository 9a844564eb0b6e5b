"""Steps-to-target per batch size, from every learning rate of a cell (DESIGN.md §1).

The paper takes, per batch size, the minimum over its learning rates. Under noise that is a
minimum of noisy values, biased low, and by an amount that changes with how many rates are
competitive at each ``B`` (fewer where the optimum sits at an edge of the grid, typically the
largest ``B``), which moves ``B_noise`` and ``B*``. The default here reads
``S(B)`` off a fit across the rates instead:

    log S(η) = s_c + k·(ln η − ln η*_c)²   for every cell c = (B, seed) of one setting,

a parabola in ``ln η`` near the optimum (the shape of loss and steps against the log learning
rate in the tuning sweeps of Wortsman et al. 2023, arXiv 2309.14322, Fig. 1, and of Bjorck et al.
2024, arXiv 2409.19913). The curvature ``k`` is shared by the cells of a setting, the level
``s_c`` and optimum ``η*_c`` are per cell, so the model is linear in ``(α_c, β_c, k)`` after
expanding the square and one least-squares solve fits it. ``S_c = exp(s_c)`` averages the noise of
several rates instead of selecting its luckiest draw. The raw minimum is kept beside it
(:attr:`MeasuredPoint.steps_min`); ``cbs study simulate`` compares the two against a known truth.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._trial import CENSORED, DIVERGED, REACHED, TrialSteps
from cbscore.errors import ConfigError

#: Per-cell estimators of ``S``: ``fit`` (a parabola in ``ln η`` with a curvature shared by the
#: setting's cells) and ``min`` (the paper's minimum over the rates).
ESTIMATORS = ("fit", "min")
#: The estimator used unless a caller names another (chosen on the simulator).
DEFAULT_ESTIMATOR = "fit"
#: Rates on each side of a cell's best that enter the fit (the parabola is local: far from the
#: optimum, steps grow faster than any parabola and then diverge).
FIT_NEIGHBOURS = 2
#: ...of those beyond the next neighbour, only rates within this factor of the best.
FIT_SPAN = 4.0
#: A rate that needed more than this many times the best rate's steps is far from the optimum, where
#: steps grow faster than a parabola in ``ln η`` (and where a study's doubled budget may have cut
#: it, so a study and its full grid would read different windows): left out of the fit.
FIT_MAX_STEPS_RATIO = 2.0


@dataclass(frozen=True, kw_only=True)
class MeasuredPoint:
    """``S(B)`` at one batch size, with the trials behind it."""

    batch_size: int
    """Batch size in sequences."""
    steps: float | None
    """``S(B)``: per seed, the level of the fit across learning rates (``estimator == "fit"``) or
    the fewest steps over the rates (``"min"``); with several seeds, the geometric mean over
    seeds (:attr:`seed_steps`). ``None`` if no trial reached."""
    trial_steps: tuple[float, ...]
    """Steps of every reached trial, ascending (shown; never resampled: the rates of a cell are
    not repeats, DESIGN.md §1 "Intervals")."""
    n_trials: int
    """All trials at this batch size, whatever their outcome."""
    n_censored: int
    """Trials that never reached the target within their budget."""
    n_diverged: int
    """Trials whose loss became non-finite or blew up."""
    n_other: int
    """Pruned, stopped, failed or unfinished trials."""
    seed_steps: tuple[float, ...] = ()
    """Where reached trials carry two or more distinct seeds: ``S`` of each such seed (same
    estimator), in seed order; the bootstrap resamples these. Empty when one seed (or none
    recorded) reached."""
    seed_cells: tuple[tuple[object, float], ...] = ()
    """``(seed, S)`` of every seed that reached here (same estimator; one entry when one seed
    reached), in seed order. A seed is a cluster across every batch size of the setting
    (:class:`cbscore.analysis.SeedTable` pairs them up)."""
    n_seeds_unreached: int = 0
    """Seeds with trials here none of which reached (left out of the mean over seeds)."""
    steps_lower_bound: float | None = None
    """Where no trial reached but some were censored with a known budget: ``S(B)`` exceeds this,
    the fewest over learning rates of the most steps each rate trained (a rate re-run at a larger
    cap counts at the larger), since each censored trial's ``S`` exceeds its own budget. ``None``
    otherwise."""
    steps_min: float | None = None
    """The paper's estimate beside :attr:`steps`: per seed the fewest steps over the rates,
    combined over seeds the same way. ``None`` if no trial reached."""
    estimator: str = "min"
    """What :attr:`steps` is: ``"fit"`` where every reached seed was read off the fit across
    rates, ``"min"`` where at least one seed fell back to its minimum (one reached rate, rates
    unknown, or no curvature to fit)."""
    lr_best: float | None = None
    """Best learning rate: per seed the fit's optimum (kept within the rates tried) or the
    minimum's rate; geometric mean over seeds. ``None`` where rates are unknown."""
    lr_at_edge: bool = False
    """Whether, in some seed, the best reached rate is the smallest or the largest rate tried at
    this batch size (diverged and censored rates count as tried): the optimum is not bracketed,
    and the grid should be extended past that edge (DESIGN.md §1)."""
    lr_edge_seeds: tuple[tuple[int | None, str], ...] = ()
    """``(seed, edge)`` for each reached seed whose best rate is at an edge, ``edge`` being
    ``"lowest"`` or ``"highest"``: which way the grid should be extended, and in how many seeds."""

    @property
    def n_reached(self) -> int:
        """Trials that reached the target."""
        return len(self.trial_steps)

    @property
    def n_seeds(self) -> int:
        """Seeds whose trials reached here (1 when seeds were not recorded but a trial reached)."""
        return len(self.seed_steps) or (1 if self.trial_steps else 0)


@dataclass(frozen=True)
class _CellFit:
    """The fit's reading of one cell (one batch size, one seed)."""

    steps: float
    lr: float | None
    fitted: bool


def _geo_mean(values: Sequence[float]) -> float:
    if len(set(values)) == 1:  # one seed: its own number, not exp(log(x)) one rounding away
        return float(values[0])
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _best_key(t: TrialSteps) -> tuple[float, float]:
    """A cell's best trial: fewest steps, and of rates that tie (exactly, as noiseless simulated
    rates a factor apart on each side of the optimum do) the smallest, whatever order the trials
    come in (a study and its full grid list them in different orders)."""
    return (t.steps, t.lr if t.lr is not None else 0.0)


def window_rates(tried: Sequence[float], best: float, span: float | None = None) -> tuple[float, ...]:
    """The rates a cell's fit reads: of the rates ``tried`` (pruned and censored ones count), the
    best one, its next neighbour on each side, and the rates up to :data:`FIT_NEIGHBOURS` places
    away that lie within a factor ``span`` (:data:`FIT_SPAN`) of it. The parabola is local: far
    from the optimum, on a sparse stretch of the grid, steps grow slower than any parabola in
    ``ln η`` and then diverge. The planner never prunes these rates."""
    span = FIT_SPAN if span is None else span
    rates = sorted(set(tried) | {best})
    at = rates.index(best)
    return tuple(lr for i, lr in enumerate(rates)
                 if abs(i - at) <= 1 or (abs(i - at) <= FIT_NEIGHBOURS and max(lr, best) / min(lr, best) <= span))


def fit_window(reached: list[TrialSteps], tried: Sequence[float]) -> list[TrialSteps]:
    """The cell's reached trials at the rates of :func:`window_rates` around its best reached rate
    that needed at most :data:`FIT_MAX_STEPS_RATIO` times the best's steps: what the fit reads of
    one cell (and so what any rule must measure there, to the crossing or by a projection exact
    enough, to leave the fit where the full grid puts it)."""
    best = min(reached, key=_best_key)
    keep = set(window_rates(tried, best.lr))
    return [t for t in reached if t.lr in keep and t.steps <= FIT_MAX_STEPS_RATIO * best.steps]


@dataclass(frozen=True)
class RateFit:
    """The fit across learning rates of one setting: its shared curvature and what it leaves."""

    curvature: float | None
    """``k`` of ``log S = α_c + β_c·u + k·u²`` (``u = ln η − ln η_best``), shared by the cells;
    ``None`` without a residual degree of freedom or a positive curvature."""
    residual_ss: float
    """Sum of squared residuals of ``log S`` about the parabolas (rate-level noise)."""
    dof: int
    """Residual degrees of freedom: observations − 2·cells − 1 (0 when not fitted)."""


def _rate_fit(rows: Sequence[tuple[tuple, np.ndarray, np.ndarray]]) -> RateFit:
    """One least-squares solve of ``log S = α_c + β_c·u + k·u²`` over ``rows`` (design
    (n_obs, 2·cells + 1): per-cell intercept and slope, then the shared ``u²`` column)."""
    n_obs = sum(len(u) for _, u, _ in rows)
    dof = n_obs - 2 * len(rows) - 1
    if not rows or dof < 1:
        return RateFit(curvature=None, residual_ss=0.0, dof=0)
    design = np.zeros((n_obs, 2 * len(rows) + 1))
    y = np.empty(n_obs)
    at = 0
    for j, (_, u, log_s) in enumerate(rows):
        n = len(u)
        design[at:at + n, 2 * j] = 1.0
        design[at:at + n, 2 * j + 1] = u
        design[at:at + n, -1] = u * u
        y[at:at + n] = log_s
        at += n
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    k = float(coef[-1])
    if not (math.isfinite(k) and k > 0):
        return RateFit(curvature=None, residual_ss=0.0, dof=0)
    return RateFit(curvature=k, residual_ss=float(np.sum((y - design @ coef) ** 2)), dof=dof)


def fit_across_rates(cells: dict[tuple[int, int | None], list[TrialSteps]],
                     tried: dict[tuple[int, int | None], Sequence[float]] | None = None,
                     projected: dict[tuple[int, int | None], list[TrialSteps]] | None = None) -> dict[tuple, _CellFit]:
    """``S`` of every cell ``(B, seed)`` from a parabola in ``ln η`` with a shared curvature.

    Each cell with two or more distinct rates in its window (the best reached rate and its
    neighbours, :func:`fit_window`) is fitted by least squares as ``log S = α_c + β_c·u + k·u²``
    (``u = ln η − ln η_best,c``, centred for conditioning); the optimum ``u* = −β_c/(2k)`` is kept
    within the window (never extrapolated past the rates tried) and ``S_c = exp(α_c + β_c·u* +
    k·u*²)``. The curvature ``k`` is shared by the setting's cells and fitted on the windows of
    three rates (a window cut to two by a pruned or censored neighbour would weigh differently in
    a study than in its full grid; the planner never prunes the best rate's neighbours and re-runs
    a censored one, so such windows are rare). Cells with one rate in the window, or unknown rates,
    keep their minimum; so does every cell when no positive curvature is found.
    ``projected``: per cell, trials stopped at equal tokens with their projected steps
    (:func:`cbscore.analysis.project_pruned`, as ``reached`` stand-ins): they join the window where
    their rate is in it, never as its best.
    """
    return _fit_and_curvature(cells, tried, projected)[0]


def _fit_and_curvature(cells, tried=None, projected=None) -> tuple[dict[tuple, _CellFit], float | None]:
    """:func:`fit_across_rates` and the curvature ``k`` it shared (``None`` where it fitted none)."""
    out, rows = _window_rows(cells, tried, projected)
    k = _rate_fit([r for r in rows if len(r[1]) >= 3]).curvature
    if k is None:
        return out, None
    for key, u, log_s in rows:
        # With k known, (α_c, β_c) by least squares on log S − k·u² (exact for two rates).
        a_mat = np.stack([np.ones_like(u), u], axis=1)  # (n, 2)
        (alpha, beta), *_ = np.linalg.lstsq(a_mat, log_s - k * u * u, rcond=None)
        u_star = min(max(-float(beta) / (2.0 * k), float(u.min())), float(u.max()))
        level = float(alpha) + float(beta) * u_star + k * u_star * u_star
        out[key] = _CellFit(steps=math.exp(level), lr=out[key].lr * math.exp(u_star), fitted=True)
    return out, k


def partial_seeds(trials_by_batch: dict[int, list[TrialSteps]]) -> set:
    """Seeds with trials at some of the batch sizes where trials ran but not all (a replicate seed
    run in a few cells, :mod:`cbscore.study.chained`); empty where every seed ran everywhere."""
    where: dict = {}
    for b, group in trials_by_batch.items():
        for t in group:
            if t.seed is not None:
                where.setdefault(t.seed, set()).add(b)
    return {s for s, bs in where.items() if len(bs) < len(trials_by_batch)}


def _at_optimum(fit: _CellFit, optimum: float | None, k: float | None) -> _CellFit:
    """A cell the fit did not read (one rate in its window), read at ``optimum``: ``log S`` less
    ``k·(ln η − ln η*)²``, the parabola's excess at its rate (the model of :func:`fit_across_rates`,
    whose optimum depends on ``B`` and not on the seed: a seed shifts ``log S`` alone, DESIGN.md §1)."""
    if fit.fitted or optimum is None or k is None or fit.lr is None:
        return fit
    u = math.log(fit.lr / optimum)
    return _CellFit(steps=fit.steps * math.exp(-k * u * u), lr=optimum, fitted=True)


def seed_adjusted_levels(log_steps: dict[tuple[int, object], float], full: Sequence) -> dict[int, float] | None:
    """``μ_B`` of the additive model ``ln S[s, B] = μ_B + γ_s + ε[s, B]`` (Scheffé 1959, *The Analysis
    of Variance*, §4.1) fitted by least squares on the observed cells ``{(B, seed): ln S}`` of an
    unbalanced table (Searle 1987, *Linear Models for Unbalanced Data*), its seed shifts centred on
    the ``full`` seeds (those observed wherever the others are), so that a batch size only they
    observed keeps their mean. ``None`` where the table does not identify every ``μ_B`` and ``γ_s``
    (a seed that shares no batch size with the others).

    A seed observed at a few batch sizes carries its own shift ``γ_s``; the mean over the seeds of a
    cell would add that shift to those cells only. Here its shift is its mean difference from the
    others over the cells it shares with them, and it informs only the contrasts between those cells
    (observed at one batch size alone, it changes nothing)."""
    sizes = sorted({b for b, _ in log_steps})
    seeds = list(dict.fromkeys(full)) + sorted({s for _, s in log_steps if s not in full}, key=repr)
    if not full or not sizes:
        return None
    design = np.zeros((len(log_steps), len(sizes) + len(seeds) - 1))  # (n_obs, K + n - 1)
    y = np.empty(len(log_steps))
    for i, ((b, s), v) in enumerate(sorted(log_steps.items(), key=lambda kv: (kv[0][0], repr(kv[0][1])))):
        design[i, sizes.index(b)] = 1.0
        at = seeds.index(s)
        if at:  # the first full seed is the reference level
            design[i, len(sizes) + at - 1] = 1.0
        y[i] = v
    if np.linalg.matrix_rank(design) < design.shape[1]:
        return None
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    gamma = np.concatenate([[0.0], coef[len(sizes):]])  # (n,)
    shift = float(np.mean(gamma[:len(dict.fromkeys(full))]))
    return {b: float(coef[j]) + shift for j, b in enumerate(sizes)}


def _window_rows(cells, tried, projected) -> tuple[dict[tuple, _CellFit], list[tuple[tuple, np.ndarray, np.ndarray]]]:
    """Each cell's minimum (the fallback) and the ``(cell, u (n,), log S (n,))`` rows of the cells
    whose window holds two or more rates (:func:`fit_across_rates`)."""
    out: dict[tuple, _CellFit] = {}
    rows: list[tuple[tuple, np.ndarray, np.ndarray]] = []  # (cell, u (n,), log S (n,))
    for key, reached in cells.items():
        best = min(reached, key=_best_key)
        out[key] = _CellFit(steps=best.steps, lr=best.lr, fitted=False)
        if any(t.lr is None for t in reached):
            continue
        rates = sorted(set((tried or {}).get(key, ())) | {t.lr for t in reached})
        window = fit_window(reached, rates)
        extra = [t for t in (projected or {}).get(key, ()) if t.lr is not None]
        if extra:
            # Stand-ins for rates that did not reach (a rate that did keeps its own crossing).
            have = {t.lr for t in reached}
            keep = set(window_rates(rates, best.lr))
            window += [t for t in extra if t.lr in keep and t.lr not in have
                       and t.steps <= FIT_MAX_STEPS_RATIO * best.steps]
        if len({t.lr for t in window}) < 2:
            continue
        u = np.array([math.log(t.lr / best.lr) for t in window])
        rows.append((key, u, np.log([t.steps for t in window])))
    return out, rows


def _replicated(grouped, cells, fits, k, partial):
    """What :func:`measure_points` reads where some seeds ran at some batch sizes only (``partial``,
    :func:`partial_seeds`): ``(fits, μ_B of the fit's levels, μ_B of the minima)``. A partial seed's
    cell the fit did not read (a replicate's one rate) is read at the optimum of the other seeds' fits
    at its batch size through the shared curvature (:func:`_at_optimum`); every cell's ``ln S`` then
    enters :func:`seed_adjusted_levels` (``None`` for both where it identifies no ``μ_B``)."""
    full = sorted({t.seed for g in grouped.values() for t in g if t.seed is not None} - partial, key=repr)
    fits = dict(fits)
    optimum: dict[int, float] = {}
    for b in grouped:
        own = [fits[(b, s)].lr for s in full if (b, s) in fits and fits[(b, s)].fitted]
        if own:
            optimum[b] = _geo_mean(own)
    for (b, s), reached in cells.items():
        if s in partial:
            low = min(reached, key=_best_key)
            base = fits.get((b, s), _CellFit(steps=low.steps, lr=low.lr, fitted=False))
            fits[(b, s)] = _at_optimum(base, optimum.get(b), k)
    level = seed_adjusted_levels({key: math.log(fits[key].steps if key in fits else min(t.steps for t in cells[key]))
                                  for key in cells}, full)
    low = seed_adjusted_levels({key: math.log(min(t.steps for t in reached)) for key, reached in cells.items()}, full)
    if level is None or low is None:
        return fits, None, None
    return fits, level, low


def rate_fit(trials: Iterable[TrialSteps]) -> RateFit:
    """The shared learning-rate curvature of one setting's trials and the rate-level residuals
    about it (the windows of three or more rates, as :func:`fit_across_rates` fits them)."""
    cells: dict[tuple[int, int | None], list[TrialSteps]] = {}
    tried: dict[tuple[int, int | None], list[float]] = {}
    for t in trials:
        if t.outcome == REACHED:
            cells.setdefault((t.batch_size, t.seed), []).append(t)
        if t.lr is not None:
            tried.setdefault((t.batch_size, t.seed), []).append(t.lr)
    _, rows = _window_rows(cells, tried, None)
    return _rate_fit([r for r in rows if len(r[1]) >= 3])


def measure_points(
    trials: Iterable[TrialSteps], *, estimator: str = DEFAULT_ESTIMATOR
) -> tuple[MeasuredPoint, ...]:
    """Group one setting's trials by batch size; ``S(B)`` per seed from its learning rates.

    ``estimator="fit"`` reads each seed's ``S`` off the fit across rates
    (:func:`fit_across_rates`), ``"min"`` takes the fewest steps (the paper's choice, Zhang et
    al. 2025, arXiv 2410.21676, §3.1); both are reported (:attr:`MeasuredPoint.steps_min`).
    Censored and diverged trials never enter ``S`` (DESIGN.md §1); they are counted, and where
    nothing reached, the censored trials' budgets give :attr:`MeasuredPoint.steps_lower_bound`.
    With several seeds, ``S(B)`` is the geometric mean over seeds: the fit is on ``log S``, so
    that is the mean it would see, and a minimum over repeats would be biased low. Where a seed ran
    at some batch sizes only (a replicate, :func:`partial_seeds`), the mean over a cell's seeds
    would carry that seed's own shift of ``log S`` into those cells alone: there ``S(B)`` is
    ``exp(μ_B)`` of the seeds' additive fit instead (:func:`seed_adjusted_levels`), and a cell of
    such a seed that the fit across rates does not read (one rate) is read at the other seeds'
    optimum through the shared curvature. Points come back sorted by batch size, including batch
    sizes where nothing reached.
    """
    if estimator not in ESTIMATORS:
        raise ConfigError("estimator", estimator, f"must be one of {', '.join(ESTIMATORS)}")
    grouped: dict[int, list[TrialSteps]] = {}
    for trial in trials:
        grouped.setdefault(trial.batch_size, []).append(trial)
    cells: dict[tuple[int, int | None], list[TrialSteps]] = {}
    tried: dict[tuple[int, int | None], list[float]] = {}
    projected: dict[tuple[int, int | None], list[TrialSteps]] = {}
    for batch_size, group in grouped.items():
        for t in group:
            if t.outcome == REACHED:
                cells.setdefault((batch_size, t.seed), []).append(t)
            elif t.steps_projected is not None:
                projected.setdefault((batch_size, t.seed), []).append(
                    TrialSteps(batch_size=batch_size, outcome=REACHED, steps=t.steps_projected, seed=t.seed, lr=t.lr))
            if t.lr is not None:
                tried.setdefault((batch_size, t.seed), []).append(t.lr)
    fits, k = _fit_and_curvature(cells, tried, projected) if estimator == "fit" else ({}, None)
    partial = partial_seeds(grouped)
    levels = levels_min = None
    if partial:
        fits, levels, levels_min = _replicated(grouped, cells, fits, k, partial)
    points = []
    for batch_size in sorted(grouped):
        group = grouped[batch_size]
        reached = sorted(t.steps for t in group if t.outcome == REACHED)
        seeds = sorted({t.seed for t in group}, key=lambda s: (s is None, s if s is not None else 0))
        reached_seeds = [s for s in seeds if (batch_size, s) in cells]
        seed_min = [min(t.steps for t in cells[(batch_size, s)]) for s in reached_seeds]
        seed_est, seed_lr, fitted = [], [], True
        for s, low in zip(reached_seeds, seed_min):
            cell = fits.get((batch_size, s))
            if cell is None:
                cell = _CellFit(steps=low, lr=min(cells[(batch_size, s)], key=_best_key).lr, fitted=False)
            seed_est.append(cell.steps)
            seed_lr.append(cell.lr)
            fitted = fitted and cell.fitted
        edge_seeds = []  # (seed, "lowest" | "highest"): which edge holds that seed's best rate
        for s in reached_seeds:
            tried = [t.lr for t in group if t.seed == s and t.lr is not None]
            best = min(cells[(batch_size, s)], key=_best_key)
            if best.lr is not None and len(set(tried)) >= 2 and best.lr in (min(tried), max(tried)):
                edge_seeds.append((s, "lowest" if best.lr == min(tried) else "highest"))
        n_censored = sum(t.outcome == CENSORED for t in group)
        n_diverged = sum(t.outcome == DIVERGED for t in group)
        # S(B) is the best rate's S: each rate's S exceeds the most steps any of its runs trained (a
        # censored trial re-run at a larger cap counts at the larger), so S(B) exceeds the fewest of those.
        per_rate: dict[tuple, float] = {}
        for i, t in enumerate(group):
            if t.outcome == CENSORED and t.budget_steps is not None:
                key = (t.lr, t.seed) if t.lr is not None else ("trial", i)
                per_rate[key] = max(per_rate.get(key, 0.0), t.budget_steps)
        budgets = list(per_rate.values())
        own = [v for s, v in zip(reached_seeds, seed_lr) if s not in partial] if partial else seed_lr
        steps, steps_min = (_geo_mean(seed_est) if seed_est else None), (_geo_mean(seed_min) if seed_min else None)
        if levels is not None and any(s in partial for s in reached_seeds):
            steps = math.exp(levels[batch_size])
            steps_min = math.exp(levels_min[batch_size])
        points.append(
            MeasuredPoint(
                batch_size=batch_size,
                steps=steps,
                trial_steps=tuple(reached),
                n_trials=len(group),
                n_censored=n_censored,
                n_diverged=n_diverged,
                n_other=len(group) - len(reached) - n_censored - n_diverged,
                seed_steps=tuple(seed_est) if len(seed_est) >= 2 else (),
                seed_cells=tuple(zip(reached_seeds, seed_est)),
                n_seeds_unreached=(len(seeds) - len(reached_seeds)) if reached else 0,
                steps_lower_bound=min(budgets) if budgets and not reached else None,
                steps_min=steps_min,
                estimator="fit" if (fitted and seed_est) else "min",
                lr_best=(_geo_mean(own) if own and all(v is not None for v in own) else None),
                lr_at_edge=bool(edge_seeds),
                lr_edge_seeds=tuple(edge_seeds),
            )
        )
    return tuple(points)


def edge_phrase(point: MeasuredPoint) -> str:
    """``8 (the lowest rate, 2 of 2 seeds)``: where a point's best rate sits at an edge, which edge
    and in how many of its reached seeds (one seed: no count), for the fit's notes and the pages."""
    seeds = getattr(point, "lr_edge_seeds", ())
    n = len(getattr(point, "seed_cells", ()))
    if not seeds:  # a point built without the seeds (a hand-made one): the batch size alone
        return str(point.batch_size)
    sides = sorted({side for _, side in seeds})
    if len(sides) == 1:
        where = f"the {sides[0]} rate"
        if n > 1:
            where += f", {len(seeds)} of {n} seeds"
        return f"{point.batch_size} ({where})"
    parts = [f"the {side} rate in seed(s) {', '.join(str(s) for s, e in seeds if e == side)}" for side in sides]
    return f"{point.batch_size} ({', '.join(parts)}, of {n} seeds)"
