"""Token budgets of a study's trials, cell by cell, and what the whole grid would spend.

Budgets that cannot bias B* (DESIGN.md §1; :func:`cell_budget_tokens`): with tuned
hyper-parameters, tokens to target ``E(B)`` grow with B and steps to target ``S(B)`` do not
(McCandlish et al. 2018, eqs. 2.11-2.12; Zhang et al. 2025, §2). So a cell below B_ref gets
``(1 + budget_margin)·D`` tokens and a cell above B_ref ``(1 + budget_margin)·min S(B' < B)``
steps, however many tokens that is. A cell censored at that cap is a lower bound, not a gap.

A cell censored at its budget is run once more at :data:`RERUN_CAP_FACTOR` times it
(:mod:`cbscore.study.cell_plan`); such a re-run's trial id ends in :data:`RERUN_TAG`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from cbscore.study.spec import StudySpec
from cbscore.study.spec_parts import Setting
from cbscore.study.trials import TrialRecord

#: A cell censored at its step cap or token budget, or a censored neighbour of a cell's best rate,
#: is run once more at this multiple of its cap or token budget.
RERUN_CAP_FACTOR = 2.0
#: Suffix of the trial id of such a second run.
RERUN_TAG = "x2"
#: What a re-run's trial id ends with (its first attempt's id, then this): read in every plan's filters.
RERUN_SUFFIX = "." + RERUN_TAG


def cell_budget_tokens(spec: StudySpec, setting: Setting, batch_size: int, role: str,
                       max_steps: int | None) -> int:
    """Token budget of a trial of cell ``(setting, batch_size)`` (DESIGN.md §1, "Budgets that cannot
    bias B*").

    * the reference cell: ``(1 + budget_margin)·D`` when it sets the target (the target is the
      cell's fitted loss at D, and its own runs must be able to cross it after D: S(B_ref) is
      measured like every other cell's, DESIGN.md §1), else D;
    * below B_ref (targets from reference runs): ``(1 + budget_margin)·D``: tokens to target
      ``E(B) = E_min·(1 + B/B_noise)`` grow with B (McCandlish et al. 2018, eq. 2.12), so no
      smaller batch size needs more than B_ref's D;
    * above B_ref: the step cap ``max_steps`` (``(1 + budget_margin)·S`` of the smaller batch
      sizes) *is* the budget: steps to target ``S(B) = S_min·(1 + B_noise/B)`` never grow with B
      (eq. 2.11), however many tokens that is. A fixed multiple of D would cut off exactly the
      large-B points that pin S_min;
    * otherwise (explicit targets, or no smaller S known yet): ``budget_multiple·D``.
    """
    if role == "reference":
        return int((1 + spec.budget_margin) * setting.tokens) if spec.target_losses is None else setting.tokens
    if batch_size > spec.b_ref and max_steps is not None:
        return max_steps * batch_size * spec.context_tokens
    if batch_size < spec.b_ref and spec.target_losses is None:
        return int((1 + spec.budget_margin) * setting.tokens)
    return int(spec.budget_multiple * setting.tokens)


def planned_budget(spec: StudySpec, setting: Setting, batch_size: int) -> tuple[str, int | None, int]:
    """``(role, step cap, tokens)`` of a cell's trials as planned before anything is measured: the
    largest budget :func:`cell_budget_tokens` can give it (above B_ref, a cap of
    ``(1 + budget_margin)·D/(B_ref·T)`` steps, what S(B_ref) is by construction)."""
    role = "reference" if (batch_size == spec.b_ref and spec.target_losses is None) else "trial"
    cap = None
    if batch_size > spec.b_ref and spec.target_losses is None:
        ref_steps = setting.tokens // (spec.b_ref * spec.context_tokens)
        cap = int(math.ceil((1 + spec.budget_margin) * ref_steps))
    return role, cap, cell_budget_tokens(spec, setting, batch_size, role, cap)


def setting_grid_tokens(spec: StudySpec, setting: Setting) -> int:
    """Tokens one setting spends if every trial ran its whole budget (:func:`cell_budget_tokens`),
    before anything is measured: above B_ref the step cap is taken as ``(1 + budget_margin)·S(B_ref)``
    with ``S(B_ref) = D/(B_ref·T)``, the most any cell above B_ref can get when S does not grow."""
    return sum(cell_size(spec, b) * planned_budget(spec, setting, b)[2] for b in spec.batch_sizes)


def grid_tokens(spec: StudySpec) -> int:
    """Tokens the same study would spend at fixed budgets: every trial runs its whole budget."""
    return sum(setting_grid_tokens(spec, s) for s in spec.resolve_settings())


def grid_trials(spec: StudySpec) -> int:
    """Number of trials of the study (every cell × hyper-parameter × seed for a grid)."""
    return len(spec.resolve_settings()) * sum(cell_size(spec, b) for b in spec.batch_sizes)


def cell_size(spec: StudySpec, batch_size: int | None = None) -> int:
    """Trials of one cell as planned, before any rate added past an edge: every rate × seed of a
    grid (a chained search: ``lrs`` at the reference cell, three rates elsewhere, and its
    replicates), or the search's ``n_trials``. ``batch_size=None`` is the reference cell."""
    if spec.search.runs_rates:
        reference = batch_size is None or (batch_size == spec.b_ref and spec.target_losses is None)
        replicates = spec.search.replicates if batch_size in spec.replicated_batch_sizes else 0
        return spec.search.trials_per_cell(reference=reference) * len(spec.seeds) + replicates
    return spec.search.n_trials


def spent_tokens(records: Iterable[TrialRecord]) -> int:
    """Tokens the records trained."""
    return sum(r.tokens for r in records)
