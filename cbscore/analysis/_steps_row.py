"""One trial of a steps table as a typed row: what in-process callers (the lab's reads, the pages,
``cbs study report``) pass around instead of CSV-shaped string dicts.

The CSV stays the wire format (``cbs fit`` reads it, ``cbs study export`` writes it); a
:class:`StepsRow` holds the values a table was made of, unchanged (an integer stays an integer),
so :meth:`StepsRow.to_dict` written by a CSV writer gives the same file, byte for byte, as the
dicts it replaces. :func:`cbscore.analysis.analyze_table` takes these rows as they are.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from cbscore.analysis._trial import REACHED
from cbscore.errors import DataError


@dataclass(frozen=True, kw_only=True)
class StepsRow:
    """One trial of a steps table: the ``cbs fit`` columns, then the lab's own (which trial and run
    it was, its optimizer settings). Fields are in the column order of the lab's table
    (``workers.query.api.TABLE_COLUMNS``); a blank cell is ``None`` (``""`` for the lab's names)."""

    setting: str
    """The setting's name (a model size and data size, or ``{setting}.{schedule}``)."""
    batch_size: int
    """Sequences per optimizer step."""
    steps: float | None = None
    """Steps to the target where the table gives them (the lab's table: reached trials only)."""
    n_params: float | None = None
    """Non-embedding parameters of the setting's model."""
    tokens: float | None = None
    """Training tokens of the setting."""
    context: int | None = None
    """Tokens per sequence."""
    outcome: str = REACHED
    """``reached``, ``censored``, ``diverged`` or another of :data:`cbscore.analysis.OUTCOMES`."""
    trial_id: str = ""
    """The lab's trial id (``""`` for a table that was not run here)."""
    role: str = ""
    """``search``, ``reference``, ... (the lab's role of the trial)."""
    lr: float | None = None
    """Peak learning rate."""
    beta2: float | None = None
    """Adam's β2 of the trial."""
    tau: float | None = None
    """Half-life (steps) of the loss average whose crossing made ``steps``."""
    seed: int | None = None
    """The trial's seed (repeats of a cell)."""
    run_id: str = ""
    """The trial's MLflow run (``""``: none to link to)."""
    budget_steps: float | None = None
    """Steps a censored trial trained without reaching the target (a lower bound on its ``S``)."""
    steps_projected: float | None = None
    """A trial pruned at equal tokens: its steps to target projected from its curve."""
    stopped_by: str = ""
    """The rule that pruned the trial (``""`` for other outcomes)."""

    def to_dict(self) -> dict[str, Any]:
        """The row as a mapping of column to value (``None`` for a blank cell), in column order:
        what a CSV writer writes and :func:`cbscore.analysis.normalize_row` reads."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any], where: str = "row") -> StepsRow:
        """A row from a mapping of column to value: the rows of
        :func:`cbscore.analysis.read_steps_csv` (already typed), or text cells. Numbers are kept
        as given (an ``int`` stays one); text becomes a number; a blank cell is ``None``; columns
        it does not know are left out. ``beta2`` and ``tau`` only label a point, so one that is no
        finite number is ``None``; the other columns' must be numbers.

        Raises:
            DataError: a missing ``setting`` or ``batch_size``, or a value that is no number,
                naming ``where`` and the column.
        """
        for column in ("setting", "batch_size"):
            if _blank(row.get(column)):
                raise DataError(f"{where}, column {column!r}: must be given, but got {row.get(column)!r}.")
        values: dict[str, Any] = {"setting": str(row["setting"]).strip(),
                                  "batch_size": _integer(where, "batch_size", row["batch_size"])}
        for column in ("steps", "n_params", "tokens", "lr", "budget_steps", "steps_projected"):
            values[column] = _number(where, column, row.get(column))
        for column in ("context", "seed"):
            value = row.get(column)
            values[column] = None if _blank(value) else _integer(where, column, value)
        for column in ("beta2", "tau"):
            values[column] = _label_number(row.get(column))
        outcome = row.get("outcome")
        values["outcome"] = REACHED if _blank(outcome) else str(outcome).strip().lower()
        for column in ("trial_id", "role", "run_id", "stopped_by"):
            value = row.get(column)
            values[column] = "" if value is None else str(value)
        return cls(**values)


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _number(where: str, column: str, value: object) -> float | None:
    """``value`` as a number (a number as it is), ``None`` when blank."""
    if _blank(value):
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return value
    try:
        return float(str(value).strip())
    except ValueError:
        raise DataError(f"{where}, column {column!r}: must be a number, but got {value!r}.") from None


def _integer(where: str, column: str, value: object) -> int:
    number = _number(where, column, value)
    if number is None or not math.isfinite(number) or not float(number).is_integer():
        raise DataError(f"{where}, column {column!r}: must be an integer, but got {value!r}.")
    return int(number)


def _label_number(value: object) -> float | None:
    """A finite number for a point's label, else ``None`` (a label is no measurement to refuse)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
