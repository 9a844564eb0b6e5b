"""What the planner returns: the :class:`Plan` of one call, each cell's :class:`CellState` and the
:class:`AskRequest` of an Optuna cell, and the counts that status pages read off a plan."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cbscore.study.trials import TERMINAL, TrialRecord, TrialSpec

#: The rules that stop a running trial as ``pruned``, as :attr:`Plan.stopped_by` and the ``stopped_by``
#: tag name them: the spec field each is set by.
STOP_RULES = {
    "prune_margin": "still above the target at an evaluation past (1 + prune_margin)·the best crossing of its seed",
    "stop_far_rates": "outside the fit's window, trailing its seed's leader at equal steps by far_rate_margin",
    "equal_token_margin": "prune_at_equal_tokens: trailing its seed's leader at equal steps by equal_token_margin",
    "equal_token_fraction": "prune_at_equal_tokens: a rate the fit reads, stopped at equal_token_fraction of the "
                            "cell's steps and projected",
}


@dataclass(frozen=True, kw_only=True)
class AskRequest:
    """Ask the cell's Optuna sampler for ``count`` more trials, then build each with
    :func:`trial_from_ask`."""

    cell_id: str
    """Cell id; also the name of the cell's Optuna study (prefixed by the study name)."""
    setting_id: str
    """Setting id."""
    batch_size: int
    """Batch size in sequences."""
    role: str
    """``reference`` or ``trial``."""
    count: int
    """Trials to ask for now."""
    first_number: int
    """Number of the first new trial (trials of a cell are numbered 0, 1, ...)."""
    max_steps: int | None
    """Step cap for the new trials."""
    target_loss: float | None
    """Target for the new trials (``None`` in the reference cell)."""


@dataclass(frozen=True, kw_only=True)
class CellState:
    """Progress of one cell ``(setting, batch size)``."""

    cell_id: str
    """Cell id: ``{setting_id}.b{B}`` in a grid (a local or schedule study's name their runs:
    ``.base``, ``.b{B}.wsd``, ...)."""
    setting_id: str
    """Setting id."""
    batch_size: int
    """Batch size in sequences."""
    role: str
    """A grid's ``reference`` (sets the target) or ``trial``; a local or schedule study's own roles."""
    state: str
    """``waiting`` (not released), ``running``, ``resolved`` (S known, trials still ending), ``done``,
    or ``skipped`` (it could not reach the target within its budget: nothing runs)."""
    n_trials: int
    """Trials the cell will run in all."""
    counts: Mapping[str, int]
    """Trials by status."""
    steps_to_target: float | None
    """Best (minimum) steps to target of the cell so far."""
    max_steps: int | None
    """Step cap of the cell's trials."""
    rates_note: str = ""
    """With ``search.predict``: the predicted optimum and which allowed rates the cell runs and why
    (:func:`cbscore.study.lr_predict.explain_rates`)."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What the runner should do now."""

    start: tuple[TrialSpec, ...] = ()
    """Grid trials to enqueue now (not yet in the records)."""
    ask: tuple[AskRequest, ...] = ()
    """Optuna cells that need more trials now."""
    stop: tuple[tuple[str, str], ...] = ()
    """``(trial_id, reason)`` of running trials to stop (reason ``pruned``)."""
    stopped_by: Mapping[str, str] = field(default_factory=dict)
    """Which rule asks each of ``stop`` (:data:`STOP_RULES`), by trial id: the runner tags the run
    with it (``stopped_by``) and reports split what pruned trials spent by rule."""
    lost: tuple[str, ...] = ()
    """Running trials whose heartbeat went stale: enqueue again (attempt + 1, resume)."""
    fail: tuple[str, ...] = ()
    """Stale trials already at the attempt cap: end them ``failed``."""
    targets: Mapping[str, float] = field(default_factory=dict)
    """Target loss per setting id, where known."""
    cells: tuple[CellState, ...] = ()
    """Every cell's progress, for status pages."""
    errors: tuple[str, ...] = ()
    """Settings that cannot go on, with the reason."""
    done: bool = False
    """Every cell is done (or its setting failed): nothing more will run."""


def skipped_trials(p: Plan) -> int:
    """Trials the plan will never run because their cells are ``skipped``."""
    return sum(c.n_trials for c in p.cells if c.state == "skipped")


def skipped_cells(p: Plan) -> dict[str, tuple[int, ...]]:
    """Per setting, the batch sizes of its ``skipped`` cells: the planner will never run them (the
    fit's notes name them; a steps table alone cannot say so)."""
    out: dict[str, list[int]] = {}
    for c in p.cells:
        if c.state == "skipped":
            out.setdefault(c.setting_id, []).append(c.batch_size)
    return {setting: tuple(sizes) for setting, sizes in out.items()}


def status_counts(records: Iterable[TrialRecord], p: Plan) -> dict[str, int]:
    """Trials by status, plus ``skipped``: the trials of skipped cells (they never run, and count
    as ended in every progress figure)."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    skipped = skipped_trials(p)
    if skipped:
        counts["skipped"] = skipped
    return counts


def ended_trials(counts: Mapping[str, int]) -> int:
    """Trials with an outcome in ``counts`` (:func:`status_counts`), skipped ones included."""
    return sum(v for k, v in counts.items() if k in TERMINAL or k == "skipped")
