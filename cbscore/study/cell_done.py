"""When a cell is done: which of its first attempts run once more, when it can be skipped, and when
it is complete or resolved, each a small function with one job (the cell planner,
:mod:`cbscore.study.cell_plan`, composes them).

* :func:`reruns`: a grid cell whose every rate ended censored at its cap or budget (none reached)
  is run once more at :data:`cbscore.study.budgets.RERUN_CAP_FACTOR` times it before it counts as
  censored (a cap from a noisy smaller cell, or a budget that noise pushed the cell past,
  can cut the curve); so is a censored or pruned neighbour of a seed's best rate, since ``S(B)`` is
  read off a fit through the best rate and its neighbours (``cbscore.analysis.measure_points``),
  which a budget or an early prune must not cut; and in the reference cell a neighbour of the best
  that had not crossed the target by the end of its ``(1 + margin)·D``.
* :func:`skipped`: a cell is skipped once a smaller batch size ended with every trial censored
  after at least this cell's token budget: tokens to target ``E(B) = B·T·S(B)`` never fall as B grows
  (McCandlish et al. 2018, eq. 2.12: ``E(B) = E_min·(1 + B/B_noise)``), so the cell could only end
  censored too, and censored points never enter ``S(B)`` or the fits (DESIGN.md §1).
* :func:`censored_bound`: the lower bound on tokens to target such a cell hands up its chain.
* :func:`cell_state`: ``done``, ``resolved``, ``running`` or ``waiting``.
"""

from __future__ import annotations

from collections.abc import Sequence

from cbscore.study.budgets import RERUN_SUFFIX, cell_budget_tokens
from cbscore.study.crossings import CrossingReader, best_neighbours, record_crossing
from cbscore.study.spec import StudySpec
from cbscore.study.spec_parts import Setting
from cbscore.study.trials import TrialRecord


def first_attempts(recs: Sequence[TrialRecord]) -> list[TrialRecord]:
    """A cell's records without its re-runs."""
    return [r for r in recs if not r.trial_id.endswith(RERUN_SUFFIX)]


def reruns(spec: StudySpec, role: str, recs: Sequence[TrialRecord], first: Sequence[TrialRecord],
           target: float | None, best: float | None, rates: Sequence[float],
           crossing: CrossingReader = record_crossing) -> list[TrialRecord]:
    """The first attempts of a grid cell whose first attempts all ended (module docstring) to run once
    more; ``best``: the cell's fewest steps to target, ``rates``: its planned rates, ``crossing``:
    how a record's crossing is read (its planner's :class:`cbscore.study.crossings.Crossings`)."""
    if target is None:
        return []
    if role == "trial":
        # (Trials stopped at equal tokens trailed one of these: their projections need its
        # crossing, and a far rate's stop says nothing of a cell no rate reached.)
        ended_short = ("censored", "diverged", "pruned") if spec.compares_at_equal_tokens else ("censored", "diverged")
        if best is None and all(r.status in ended_short for r in first):
            return [r for r in first if r.status == "censored"]
        # A neighbour pruned before the best settled (a later rate won) is run again too. The
        # best is read off every crossing, re-runs' too (a rate past an edge, added once a
        # re-run crossed, is a neighbour of that crossing).
        near = best_neighbours(recs, target, rates, crossing)
        # (Stopped at equal tokens, a neighbour's steps are projected from its curve: no re-run.)
        again = ("censored",) if spec.experimental.prune_at_equal_tokens else ("censored", "pruned")
        return [r for r in first if r.status in again and (r.seed, r.lr) in near]
    if best is None:
        return []
    # The reference runs train (1 + margin)·D without a target; a neighbour of the best rate that
    # had not crossed the cell's target by then is run again to twice that, stopping at the
    # target, so that S(B_ref) is read off the same window as any cell's (left out, the window
    # keeps only the lucky neighbours: S(B_ref) 3% low at σ = 0.1).
    near = best_neighbours(recs, target, rates, crossing)
    return [r for r in first if r.status in ("finished", "censored") and (r.seed, r.lr) in near
            and crossing(r, target) is None]


def skipped(spec: StudySpec, setting: Setting, batch_size: int, cap: int | None, at_least: float) -> bool:
    """Whether an unstarted trial cell is skipped: the smaller batch sizes' bound on tokens to target
    (``at_least``) reaches what its trials could train (module docstring)."""
    if at_least <= 0:
        return False
    budget_tokens = cell_budget_tokens(spec, setting, batch_size, "trial", cap)
    steps = budget_tokens // (batch_size * spec.context_tokens)  # TrainConfig.total_steps
    trainable = min(steps, cap if cap is not None else steps) * batch_size * spec.context_tokens
    return at_least >= trainable


def censored_bound(recs: Sequence[TrialRecord], at_least: float) -> float:
    """The bound on tokens to target after a complete cell whose every rate diverged or trained
    without reaching the target: ``E(B)`` is above the fewest over rates of the most each rate
    trained (``at_least`` unchanged where no trial trained)."""
    trained: dict[tuple[float, int], int] = {}
    for r in recs:
        if r.status == "censored" and r.tokens > 0:
            trained[(r.lr, r.seed)] = max(trained.get((r.lr, r.seed), 0), r.tokens)
    return max(at_least, float(min(trained.values()))) if trained else at_least


def cell_state(role: str, complete: bool, first_done: bool, best: float | None, target: float | None,
               released: bool) -> tuple[str, bool]:
    """``(state, resolved)`` of a cell: resolved once complete or (a trial cell) a trial reached the
    target, the reference cell once its first runs ended and the target is known (``S(B_ref)`` is known
    then; re-runs refine the fit)."""
    resolved = complete or (role == "trial" and best is not None)
    if role == "reference":
        resolved = (complete or first_done) and target is not None
    state = "done" if complete else "resolved" if resolved else "running" if released else "waiting"
    return state, resolved
