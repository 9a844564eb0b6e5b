"""How ``B*`` moves with the overhead ``r`` and the reference batch size ``B_ref``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cbscore.analysis._bootstrap import BootstrapResult
from cbscore.analysis._cbs import cbs_empirical
from cbscore.analysis._steps_fit import StepsFit
from cbscore.errors import FitError

#: The overheads of the sensitivity table (the paper uses 0.2 only).
SENSITIVITY_OVERHEADS = (0.1, 0.2, 0.3, 0.5)


@dataclass(frozen=True, kw_only=True)
class SensitivityRow:
    """``B*`` at one ``(r, B_ref)``: fitted (with interval) and read off the points."""

    overhead: float
    """``r``."""
    b_ref: float
    """``B_ref`` (sequences)."""
    cbs: float
    """Fitted ``B* = (1 + r)·B_ref + r·B_noise``."""
    cbs_ci: tuple[float, float] | None
    """Bootstrap interval of the fitted ``B*``; ``None`` without a bootstrap."""
    cbs_empirical: float | None
    """``B*`` read off the measured points; ``None`` when they cannot give one."""
    empirical_note: str | None
    """Why :attr:`cbs_empirical` is ``None``."""


def sensitivity_table(
    fit: StepsFit,
    b_refs: Sequence[float],
    overheads: Sequence[float] = SENSITIVITY_OVERHEADS,
    bootstrap: BootstrapResult | None = None,
) -> tuple[SensitivityRow, ...]:
    """One row per ``(B_ref, r)``, ``B_ref`` outer, both ascending.

    The empirical ``B*`` uses the points ``fit`` was fitted to (see :func:`cbs_empirical`).
    """
    rows = []
    for b_ref in sorted(set(float(b) for b in b_refs)):
        for overhead in sorted(set(float(r) for r in overheads)):
            try:
                empirical, note = cbs_empirical(fit.batch_sizes, fit.steps, b_ref, overhead), None
            except FitError as exc:
                empirical, note = None, str(exc)
            rows.append(
                SensitivityRow(
                    overhead=overhead,
                    b_ref=b_ref,
                    cbs=fit.cbs(overhead, b_ref),
                    cbs_ci=None if bootstrap is None else bootstrap.cbs_ci_at(overhead, b_ref),
                    cbs_empirical=empirical,
                    empirical_note=note,
                )
            )
    return tuple(rows)
