"""Validation of steps-table rows: one row per trial, typed, or an error naming row and column."""

from __future__ import annotations

import math
from collections.abc import Mapping

from cbscore.analysis._steps_row import StepsRow
from cbscore.analysis._trial import CENSORED, OUTCOMES, REACHED
from cbscore.errors import DataError

#: Columns every steps table has.
REQUIRED_COLUMNS = ("setting", "batch_size", "steps")
#: Columns a steps table may have; any other column is carried along and ignored. ``seed`` marks
#: repeats (``S`` per seed is the minimum over its learning rates); ``budget_steps`` is the steps a
#: censored trial ran without reaching the target (a lower bound on its ``S``).
#: ``lr`` is the trial's peak learning rate: with it, a cell's ``S`` comes from a fit across rates.
#: ``steps_projected``: a ``pruned`` trial stopped at equal tokens, its steps to target projected from
#: its curve against its cell's leader (``cbscore.analysis.project_pruned``); the fit reads it.
OPTIONAL_COLUMNS = ("n_params", "tokens", "context", "outcome", "seed", "budget_steps", "lr", "steps_projected")


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _fail(where: str, column: str, reason: str, value: object) -> DataError:
    return DataError(f"{where}, column {column!r}: {reason}, but got {value!r}.")


def _number(where: str, column: str, value: object) -> float:
    if isinstance(value, bool):
        raise _fail(where, column, "must be a positive finite number", value)
    try:
        number = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise _fail(where, column, "must be a positive finite number", value) from None
    if not math.isfinite(number) or number <= 0:
        raise _fail(where, column, "must be a positive finite number", value)
    return number


def _integer(where: str, column: str, value: object) -> int:
    try:
        number = _number(where, column, value)
    except DataError:
        raise _fail(where, column, "must be a positive integer", value) from None
    if not number.is_integer():
        raise _fail(where, column, "must be a positive integer", value)
    return int(number)


def _seed(where: str, value: object) -> int:
    if isinstance(value, bool):
        raise _fail(where, "seed", "must be a non-negative integer", value)
    try:
        number = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise _fail(where, "seed", "must be a non-negative integer", value) from None
    if not (math.isfinite(number) and number >= 0 and number.is_integer()):
        raise _fail(where, "seed", "must be a non-negative integer", value)
    return int(number)


def normalize_row(row: Mapping | StepsRow, where: str) -> dict:
    """One row (a mapping of column to value, or a :class:`StepsRow`), checked and typed:
    ``setting`` str, ``batch_size`` int, ``steps`` float or ``None``, ``n_params``/``tokens``
    float or ``None``, ``context`` int or ``None``, ``outcome`` one of :data:`OUTCOMES`
    (``reached`` when blank and steps are given), ``seed`` int ≥ 0 or ``None``, ``lr`` float or
    ``None``, ``budget_steps`` float or ``None`` (censored rows only: the ``budget_steps`` column,
    else the steps the row gives, which a censored trial ran without reaching). Other keys are kept as
    they are. ``where`` names the row in messages (e.g. ``"steps.csv line 4 (row 3)"``).

    Raises:
        DataError: a missing column or a value that cannot be used, naming row and column.
    """
    if isinstance(row, StepsRow):
        row = row.to_dict()
    for column in REQUIRED_COLUMNS:
        if column not in row:
            raise DataError(f"{where}: missing column {column!r}.")
    out = dict(row)
    setting = row["setting"]
    if _blank(setting):
        raise _fail(where, "setting", "must be a non-empty name", setting)
    out["setting"] = str(setting).strip()
    out["batch_size"] = _integer(where, "batch_size", row["batch_size"])
    for column in ("n_params", "tokens"):
        value = row.get(column)
        out[column] = None if _blank(value) else _number(where, column, value)
    context = row.get("context")
    out["context"] = None if _blank(context) else _integer(where, "context", context)
    seed = row.get("seed")
    out["seed"] = None if _blank(seed) else _seed(where, seed)
    lr = row.get("lr")
    out["lr"] = None if _blank(lr) else _number(where, "lr", lr)
    outcome = row.get("outcome")
    if _blank(outcome):
        outcome = None
    else:
        outcome = str(outcome).strip().lower()
        if outcome not in OUTCOMES:
            raise _fail(where, "outcome", f"must be one of {', '.join(OUTCOMES)} or empty", row.get("outcome"))
    steps = row["steps"]
    if outcome in (None, REACHED):
        if _blank(steps):
            raise _fail(
                where, "steps", "is empty; give the steps to target, or an outcome such as "
                "censored or diverged", steps,
            )
        out["steps"] = _number(where, "steps", steps)
        out["outcome"] = REACHED
    else:
        # Steps of a trial that did not reach are ignored (a pruned trial may report how far it got),
        # except a censored trial's, which are its budget: a lower bound on its S.
        out["steps"] = None
        out["outcome"] = outcome
    projected = row.get("steps_projected")
    out["steps_projected"] = None
    if out["outcome"] == "pruned" and not _blank(projected):
        # A trial stopped at equal tokens: its steps to target projected from its curve.
        out["steps_projected"] = _number(where, "steps_projected", projected)
    budget = row.get("budget_steps")
    out["budget_steps"] = None
    if out["outcome"] == CENSORED:
        if not _blank(budget):
            out["budget_steps"] = _number(where, "budget_steps", budget)
        elif not _blank(steps):
            out["budget_steps"] = _number(where, "steps", steps)
    return out
