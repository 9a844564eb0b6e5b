"""A forecast of ``B*`` from a scaling law, with its interval."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Forecast:
    """``B*`` predicted by a scaling law at an ``(N, D)`` that need not have been trained."""

    cbs: float
    """Predicted critical batch size (sequences)."""
    cbs_ci: tuple[float, float] | None
    """Percentile interval over the law's bootstrap draws; ``None`` without draws."""
    n_params: float | None
    """Non-embedding parameters the forecast is for (``None`` for a law in ``D`` only)."""
    tokens: float | None
    """Training tokens the forecast is for (``None`` for a law in ``N`` only)."""
    law: str
    """Which law made it: ``"n"``, ``"d"`` or ``"joint"``."""
    fixed: str = ""
    """What that law holds fixed, in words (``"n at fixed D"``, ``"d at fixed N"``,
    ``"n and d together (D ∝ N)"``); empty for the joint law or an ungrouped one."""
