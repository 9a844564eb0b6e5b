"""Each setting's target loss: the spec's own, a pinned one, or the fit of its ended reference cell
(DESIGN.md §1, "Target loss")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cbscore.study.budgets import RERUN_TAG, cell_size
from cbscore.study.cell_trials import cell_id, records_by_cell
from cbscore.study.spec import StudySpec
from cbscore.study.trials import TrialRecord


def setting_targets(spec: StudySpec, records: Sequence[TrialRecord], *,
                    by_cell: Mapping[str, list[TrialRecord]] | None = None) -> tuple[dict[str, float], list[str]]:
    """The target loss of every setting that has one, and why the others have none.

    The spec's explicit losses when it gives them; otherwise, once every reference trial at B_ref
    has ended, :func:`cbscore.analysis.reference_target` of the whole reference cell: each run's
    held-out loss (EWA weights, best τ) at D read off a local fit of its evaluations, the best over
    learning rates per seed from a fit across rates, the mean over seeds (DESIGN.md §1, "Target
    loss"). Not the best run's own final loss (a minimum over noisy numbers, biased low, that pins
    ``S(B_ref)`` to one lucky run): ``S(B_ref)`` is then measured by the crossing rule like any other
    cell's, and the reference runs may cross after D.
    """
    from cbscore.errors import FitError

    targets: dict[str, float] = {}
    errors: list[str] = []
    # A predicting search runs what its cell asks for (plan() holds the target while it may add one).
    n_ref = 1 if (spec.search.kind == "grid" and spec.experimental.predict) else cell_size(spec, spec.b_ref)
    by_cell = records_by_cell(records) if by_cell is None else by_cell  # (plan passes the one it built)
    for setting in spec.resolve_settings():
        if spec.target_losses is not None:
            targets[setting.setting_id] = float(spec.target_losses[setting.setting_id])
            continue
        if spec.pinned_targets and setting.setting_id in spec.pinned_targets:  # kept by an extension
            targets[setting.setting_id] = float(spec.pinned_targets[setting.setting_id])
            continue
        # The cell's own runs to (1 + margin)·D; a re-run (a neighbour run on to the target) never
        # moves the target it was run against.
        ref_records = [r for r in by_cell.get(cell_id(setting.setting_id, spec.b_ref), [])
                       if not r.trial_id.endswith("." + RERUN_TAG)]
        if len(ref_records) < n_ref or not all(r.terminal for r in ref_records):
            continue
        ended = tuple(r for r in ref_records if r.status in ("finished", "reached", "censored"))
        try:
            ref_steps = setting.tokens / (spec.b_ref * spec.context_tokens)
            # Ended records never change: the planner asks at every call, the answer is kept.
            key = (tuple((r.trial_id, r.status, r.last_step, r.final_eval_loss, len(r.eval_steps)) for r in ended),
                   ref_steps)
            target = _TARGETS.get(key)
            if target is None:
                histories = tuple(h for h in (reference_history(r) for r in ended) if h)
                # (Kept in a local first: another thread's planner may empty the dict meanwhile.)
                target = _cached_target(histories, ref_steps)
                if len(_TARGETS) >= 256:
                    _TARGETS.clear()
                _TARGETS[key] = target
            targets[setting.setting_id] = target
        except FitError as exc:
            errors.append(f"setting {setting.setting_id!r}: no reference run at B_ref={spec.b_ref} "
                          f"gives a loss at D, so there is no target loss ({exc})")
    return targets, errors


_TARGETS: dict[tuple, float] = {}


def _cached_target(histories: tuple, ref_steps: float) -> float:
    """:func:`cbscore.analysis.reference_target` of ended reference runs."""
    from cbscore.analysis import reference_target

    return reference_target(list(histories), ref_steps).value


def reference_history(record: TrialRecord):
    """The :class:`cbscore.analysis.EvalHistory` of a trial record (its evaluations of the best τ;
    a record without them stands on its final loss at its last step); ``None`` if it has neither."""
    from cbscore.analysis import EvalHistory

    steps, losses = record.eval_steps, record.eval_losses
    if not steps:
        if record.final_eval_loss is None or not record.last_step:
            return None
        steps, losses = (float(record.last_step),), (record.final_eval_loss,)
    return EvalHistory(batch_size=record.batch_size, steps=steps, losses=losses, lr=record.lr,
                       seed=record.seed, outcome=record.status, role=record.role)
