"""How the pages write durations, rates and counts."""

from __future__ import annotations

import math
from collections.abc import Iterable


def duration(seconds: float | None) -> str:
    """``42`` → ``42 s``, ``750`` → ``12.5 min``, ``11520`` → ``3.2 h``, ``4e5`` → ``4.6 days``."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.3g} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.2g} h"
    return f"{seconds / 86400:.2g} days"


def rate(tokens_per_s: float | None) -> str:
    """``12345.6`` → ``12.3k tokens/s``."""
    if tokens_per_s is None or not math.isfinite(tokens_per_s):
        return "—"
    return f"{count(tokens_per_s)} tokens/s"


def count(value: float) -> str:
    """``950`` → ``950``, ``12345`` → ``12.3k``, ``2e6`` → ``2M``, ``1.741e9`` → ``1.74B``."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def batch(value: float) -> str:
    """A batch size in sequences, three significant digits below 1000 (a tiny study's B* of 5.17
    is not "5"), whole numbers with separators above: ``5.1734`` → ``5.17``, ``1234.5`` → ``1,234``."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def batch_format(values: Iterable[float | None]) -> str:
    """A printf format for a column of batch sizes (sequences) that gives its smallest value three
    significant digits, whole numbers from 100 on: a tiny study's B* of 4.37 with its interval
    [4.04, 4.81] reads ``%.2f`` (not "4 [4, 5]"), a B* of 56.4 ``%.1f``, of 164 ``%.0f``."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    if not finite:
        return "%.0f"
    return f"%.{max(0, min(3, 2 - math.floor(math.log10(min(finite)))))}f"
