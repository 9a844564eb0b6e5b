"""Numbers out of MLflow tags and metrics, which arrive as text or floats (or not at all)."""

from __future__ import annotations

import math
from typing import Any


def as_int(value: Any, default: int | None = None) -> int | None:
    """``value`` as an integer (``"12"``, ``"12.0"``, ``12.0``), else ``default``."""
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


def as_float(value: Any) -> float | None:
    """``value`` as a finite float, else ``None`` (a missing tag, ``"nan"``, ``"inf"``)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None
