"""The target loss of a setting, from the whole reference cell (DESIGN.md §1, "Target loss").

The paper takes the best reference run's own final loss. That is a minimum over noisy numbers
(5 learning rates × 3 τ, each one evaluation of one run), so it is biased low, and it pins
``S(B_ref) = D/(B_ref·T)`` to the lucky run. Here the target is the loss the reference cell
reaches at ``D``, estimated from every run:

1. **Each run's loss at D** from a local fit of its evaluations around ``D`` (a polynomial in
   ``log step`` through the evaluations within a factor :data:`LOCAL_WINDOW` of ``D``, at least
   the :data:`LOCAL_MIN_POINTS` nearest: a straight line, with a curvature term from
   :data:`LOCAL_QUADRATIC_POINTS` evaluations on), never its single final evaluation: evaluation
   noise averages out instead of one evaluation's luck deciding.
2. **Per seed, the best over learning rates** from a quadratic in ``log η`` through the best rate
   and its two neighbours where the best is interior (the loss is smooth in ``log η`` near its
   optimum; the vertex reads the optimum between grid points from three runs, not the luckiest
   one); where the best rate sits at an edge of the grid, or the three points do not curve up,
   the minimum (and the result says so).
3. **The mean over seeds** (a minimum over seeds would again be biased low).

:func:`target_draws` redraws the target for the bootstrap: each run's loss at ``D`` is moved by
the standard error of its local fit, and seeds are resampled where there are two or more, so the
target's own uncertainty moves every crossing together (DESIGN.md §1, "Intervals").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._crossing import first_crossing
from cbscore.analysis._trial import CENSORED, DIVERGED, OTHER_OUTCOMES, REACHED, TrialSteps
from cbscore.errors import FitError

#: Evaluations within this factor of ``D`` (in steps) enter a run's local fit.
LOCAL_WINDOW = 1.2
#: With this many evaluations or more, the local fit has a curvature term (a loss curve is convex
#: in ``log step``, and a straight line through a one-sided window reads it high).
LOCAL_QUADRATIC_POINTS = 6
#: A local fit uses at least this many evaluations (the nearest ones), where the run has them.
LOCAL_MIN_POINTS = 3
#: A run must have evaluated within this many steps of ``D`` (rounding of ``D/(B_ref·T)``).
REACH_TOLERANCE_STEPS = 1.0
#: How a seed's best loss over learning rates was read.
QUADRATIC, EDGE, MINIMUM = "quadratic", "edge", "minimum"


@dataclass(frozen=True, kw_only=True)
class EvalHistory:
    """One trial's held-out evaluations (averaged weights, best τ) and what identifies it."""

    batch_size: int
    """Batch size in sequences."""
    steps: tuple[float, ...]
    """Optimizer steps of the evaluations, increasing."""
    losses: tuple[float, ...]
    """Held-out losses at :attr:`steps`."""
    lr: float | None = None
    """Peak learning rate; ``None`` when unknown."""
    seed: int | None = None
    """Training seed; ``None`` when unknown."""
    outcome: str = "finished"
    """How the trial ended (``finished``, ``reached``, ``censored``, ``pruned``, ``diverged``, ...):
    a new target can turn ``reached`` into ``censored`` and back, never the others."""
    role: str = "trial"
    """``reference`` for the trials of the reference cell (they set the target), else ``trial``."""

    def __post_init__(self):
        object.__setattr__(self, "steps", tuple(float(s) for s in self.steps))
        object.__setattr__(self, "losses", tuple(float(v) for v in self.losses))
        if len(self.steps) != len(self.losses):
            raise FitError(f"an evaluation history needs as many steps as losses, but got "
                           f"{len(self.steps)} and {len(self.losses)}")


@dataclass(frozen=True, kw_only=True)
class RunAtD:
    """One reference run's loss at ``D`` from its local fit."""

    lr: float | None
    seed: int | None
    loss: float
    """Fitted loss at ``D``."""
    stderr: float
    """Standard error of :attr:`loss` from the local fit's residuals (0 with ≤ 2 evaluations)."""
    n_points: int
    """Evaluations in the local fit."""


@dataclass(frozen=True, kw_only=True)
class ReferenceTarget:
    """The target loss of one setting and how it was made."""

    value: float
    """The target: the mean over seeds of each seed's best loss at ``D`` over learning rates."""
    ref_steps: float
    """``D/(B_ref·T)``: the step at which the reference runs' losses are read."""
    runs: tuple[RunAtD, ...]
    """Every reference run that evaluated up to ``D`` with finite losses."""
    seed_values: tuple[float, ...]
    """Per seed (in seed order), its best loss at ``D`` over learning rates."""
    seed_methods: tuple[str, ...]
    """Per seed: ``quadratic`` (vertex of the fit across rates), ``edge`` (best rate at an edge of
    the grid: the minimum) or ``minimum`` (fewer than 3 rates, rates unknown, or no upward curve)."""
    seed_lrs: tuple[float | None, ...]
    """Per seed, the learning rate of the best loss (the vertex where fitted)."""
    n_excluded: int
    """Reference runs left out (diverged, or no evaluation near ``D``)."""

    @property
    def lr_at_edge(self) -> bool:
        """Whether some seed's best learning rate sits at an edge of the grid."""
        return EDGE in self.seed_methods

    def to_json_dict(self) -> dict:
        return {
            "value": self.value,
            "ref_steps": self.ref_steps,
            "seed_values": list(self.seed_values),
            "seed_methods": list(self.seed_methods),
            "n_runs": len(self.runs),
            "n_excluded": self.n_excluded,
        }


def loss_at(steps: Sequence[float], losses: Sequence[float], at: float) -> tuple[float, float, int] | None:
    """``(loss, stderr, n)``: a run's loss at step ``at`` from a local polynomial in ``log step``
    (see the module doc) through its finite evaluations within a factor :data:`LOCAL_WINDOW` of ``at`` (at least the
    :data:`LOCAL_MIN_POINTS` nearest). ``None`` when the run never evaluated within
    :data:`REACH_TOLERANCE_STEPS` of ``at``, or any loss is non-finite (it diverged)."""
    s = np.asarray(steps, dtype=float)
    v = np.asarray(losses, dtype=float)
    if s.size == 0 or not np.all(np.isfinite(v)) or s.max() < at - REACH_TOLERANCE_STEPS:
        return None
    keep = s > 0
    s, v = s[keep], v[keep]
    if s.size == 0:
        return None
    distance = np.abs(np.log(s / at))  # (n,)
    order = np.argsort(distance, kind="stable")
    n = max(int(np.sum(distance <= math.log(LOCAL_WINDOW))), min(LOCAL_MIN_POINTS, s.size))
    x, y = np.log(s[order[:n]] / at), v[order[:n]]  # x = 0 at D
    if n == 1 or np.ptp(x) == 0:
        return float(y.mean()), 0.0, n
    columns = [np.ones(n), x] + ([x * x] if n >= LOCAL_QUADRATIC_POINTS else [])
    design = np.stack(columns, axis=1)  # (n, p)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    p = design.shape[1]
    if n <= p:
        return float(coef[0]), 0.0, n
    resid = y - design @ coef
    sigma2 = float(resid @ resid) / (n - p)
    cov = sigma2 * np.linalg.inv(design.T @ design)
    return float(coef[0]), math.sqrt(max(cov[0, 0], 0.0)), n


def best_over_rates(lrs: Sequence[float | None], losses: Sequence[float]) -> tuple[float, str, float | None]:
    """``(loss, method, lr)``: one seed's best loss over learning rates (see the module doc)."""
    losses = [float(v) for v in losses]
    i_min = int(np.argmin(losses))
    if any(lr is None for lr in lrs) or len(set(lrs)) != len(lrs) or len(lrs) < 3:
        return losses[i_min], MINIMUM, lrs[i_min]
    order = np.argsort(np.log(np.asarray(lrs, dtype=float)))
    x = np.log(np.asarray(lrs, dtype=float))[order]
    y = np.asarray(losses)[order]
    j = int(np.argmin(y))
    if j == 0 or j == len(y) - 1:
        return float(y[j]), EDGE, float(math.exp(x[j]))
    c2, c1, c0 = np.polyfit(x[j - 1:j + 2], y[j - 1:j + 2], 2)
    if c2 <= 0:
        return float(y[j]), MINIMUM, float(math.exp(x[j]))
    vertex = -c1 / (2 * c2)  # inside [x_{j-1}, x_{j+1}] because y_j is the lowest of the three
    return float(c0 - c1 * c1 / (4 * c2)), QUADRATIC, float(math.exp(vertex))


def _combine(runs: Sequence[RunAtD], losses: Sequence[float]):
    by_seed: dict[int | None, list[int]] = {}
    for i, run in enumerate(runs):
        by_seed.setdefault(run.seed, []).append(i)
    order = sorted(by_seed, key=lambda s: (s is None, s if s is not None else 0))
    values, methods, lrs = [], [], []
    for seed in order:
        idx = by_seed[seed]
        value, method, lr = best_over_rates([runs[i].lr for i in idx], [losses[i] for i in idx])
        values.append(value)
        methods.append(method)
        lrs.append(lr)
    return values, methods, lrs


def reference_target(histories: Iterable[EvalHistory], ref_steps: float) -> ReferenceTarget:
    """The target loss of a setting from every reference run's evaluation history.

    Args:
        histories: the reference cell's trials (every learning rate and seed; each with the
            losses of its best τ).
        ref_steps: ``D/(B_ref·T)``, the step at which the target is read.

    Raises:
        FitError: no reference run evaluated up to ``D`` with finite losses.
    """
    if not (math.isfinite(ref_steps) and ref_steps > 0):
        raise FitError(f"the reference step count must be a positive number, but got {ref_steps!r}")
    runs, excluded = [], 0
    for h in histories:
        read = loss_at(h.steps, h.losses, ref_steps)
        if read is None:
            excluded += 1
            continue
        loss, stderr, n = read
        runs.append(RunAtD(lr=h.lr, seed=h.seed, loss=loss, stderr=stderr, n_points=n))
    if not runs:
        raise FitError(f"no reference run evaluated up to D ({ref_steps:,.1f} steps) with finite losses "
                       f"({excluded} diverged or stopped early)")
    values, methods, lrs = _combine(runs, [r.loss for r in runs])
    return ReferenceTarget(
        value=float(np.mean(values)),
        ref_steps=float(ref_steps),
        runs=tuple(runs),
        seed_values=tuple(values),
        seed_methods=tuple(methods),
        seed_lrs=tuple(lrs),
        n_excluded=excluded,
    )


def target_draws(target: ReferenceTarget, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """(n_draws,) bootstrap redraws of :attr:`ReferenceTarget.value`.

    Each draw moves every run's loss at ``D`` by its local fit's standard error (a normal draw:
    the reading of the loss at ``D``), recombines over learning rates per seed, and averages over
    seeds drawn with replacement where there are two or more (each seed's deviation from the
    mean scaled by ``sqrt(n/(n-1))``, as the S bootstrap does). With one seed the run-to-run luck
    of the reference cell is not in these draws: it is the reference point's own residual in the
    S bootstrap (a reference cell that ran fast is one cell's error, whichever way it is read).
    """
    base = np.array([r.loss for r in target.runs])  # (n_runs,)
    stderr = np.array([r.stderr for r in target.runs])
    seeds = np.array(target.seed_values)
    n_seeds = len(seeds)
    out = np.empty(n_draws)
    for k in range(n_draws):
        losses = base + stderr * rng.standard_normal(base.size)
        values = np.array(_combine(target.runs, losses)[0])  # (n_seeds,)
        if n_seeds >= 2:
            mean = values.mean()
            dev = (values - mean) * math.sqrt(n_seeds / (n_seeds - 1.0))
            out[k] = mean + dev[rng.integers(0, n_seeds, n_seeds)].mean()
        else:
            out[k] = values.mean()
    return out


#: A trial the trainer stopped at its first evaluation below the old target is extrapolated to a
#: lower one along its last evaluations, by at most this factor in steps (else it is censored).
MAX_EXTRAPOLATION = 1.25


def retarget(history: EvalHistory, target: float) -> TrialSteps:
    """One trial's steps to ``target`` from its evaluation history (the bootstrap's redrawn target).

    The crossing rule of every trial (:func:`first_crossing`). A trial that stopped at the old
    target (``reached``) and does not reach a lower one within its evaluations is extrapolated
    along the straight line in ``log step`` through its last :data:`LOCAL_MIN_POINTS` evaluations
    (up to :data:`MAX_EXTRAPOLATION` times its last step): it stopped because it crossed, not
    because it could go no further. Pruned, diverged or failed trials keep their outcome; any other
    trial that does not cross is censored at its last evaluated step.
    """
    crossing = first_crossing(history.steps, history.losses, target)
    common = dict(batch_size=history.batch_size, seed=history.seed, lr=history.lr)
    if crossing is not None:
        return TrialSteps(outcome=REACHED, steps=crossing, **common)
    if history.outcome == REACHED and len(history.steps) >= 2:
        s = np.asarray(history.steps[-LOCAL_MIN_POINTS:])
        v = np.asarray(history.losses[-LOCAL_MIN_POINTS:])
        if np.all(np.isfinite(v)) and np.all(s > 0):
            slope, intercept = np.polyfit(np.log(s), v, 1)
            if slope < 0:
                step = math.exp((target - intercept) / slope)
                if s[-1] < step <= MAX_EXTRAPOLATION * s[-1]:
                    return TrialSteps(outcome=REACHED, steps=step, **common)
    if history.outcome in (DIVERGED, *OTHER_OUTCOMES) and history.outcome != "finished":
        return TrialSteps(outcome=history.outcome, **common)
    last = history.steps[-1] if history.steps else 0.0
    return TrialSteps(outcome=CENSORED, budget_steps=last if last > 0 else None, **common)
