"""The local CBS over training tokens: a power law ``B*(t) = a·t^b`` fitted on log axes.

Merrill et al. 2025 (arXiv 2505.23971, §4) find the local CBS near 0 at initialisation, rising
fast, then flattening; over the stretch before the plateau a power law in tokens is the simplest
curve that a batch-size warm-up can be read from (:func:`cbscore.local.plan_warmup`). The fit is
ordinary least squares of ``ln B*`` on ``ln t`` (as the lab fits every power law: Zhang et al.
2025, arXiv 2410.21676, §4), with the classical t-interval of the slope and the intercept
(``se(b) = s/√Sxx``, ``se(ln a) = s·√(1/n + x̄²/Sxx)``, ``s² = RSS/(n − 2)``; e.g. Draper & Smith,
*Applied Regression Analysis*, 3rd ed., §3.1). A readout at the top of its grid is a lower bound:
it stays in the fit at its value and is named in the notes, since the fit then leans low there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from cbscore.analysis._models import power_law
from cbscore.errors import FitError


@dataclass(frozen=True, kw_only=True)
class LocalCbsCurve:
    """``B*(t) = coef·t^exponent`` (``t`` in tokens, ``B*`` in sequences)."""

    coef: float
    """``a``, sequences per token^exponent."""
    exponent: float
    """``b``."""
    coef_ci: tuple[float, float] | None
    """Interval of ``a`` at ``level``; ``None`` with two points (no degrees of freedom left)."""
    exponent_ci: tuple[float, float] | None
    """Interval of ``b`` at ``level``; ``None`` likewise."""
    tokens: tuple[float, ...]
    """The checkpoints' stream positions, tokens."""
    local_cbs: tuple[float, ...]
    """The local CBS at each, sequences."""
    r2: float
    """Coefficient of determination on log axes."""
    level: float
    """Two-sided level of the intervals."""
    notes: tuple[str, ...] = ()
    """What the reader should know (lower bounds, no interval)."""

    def __call__(self, tokens):
        """``B*`` on the curve at ``tokens``."""
        return power_law(tokens, self.coef, self.exponent)

    def tokens_at(self, batch_size: float) -> float:
        """Stream position where the curve reaches ``batch_size``: ``(B/a)^(1/b)`` (``inf`` when
        it never does: ``b ≤ 0`` and ``B`` above the curve). A flat curve through readouts of
        exactly ``B`` reaches it: ``a = exp(ln B)`` is off ``B`` by rounding (``exp(ln 8) =
        7.999999999999998``), so ``a`` counts within a relative 1e-9."""
        if self.exponent <= 0:
            return float("inf") if batch_size > self.coef * (1 + 1e-9) else 0.0
        return float((batch_size / self.coef) ** (1.0 / self.exponent))


def fit_local_cbs_curve(tokens, local_cbs, *, level: float = 0.95, lower_bounds=None) -> LocalCbsCurve:
    """Fit ``B*(t) = a·t^b`` to local-CBS readouts at stream positions ``tokens``.

    ``lower_bounds``: (n,) booleans, a readout at the top of its grid (:attr:`LocalCbsReadout.lower_bound`)."""
    t = np.asarray(tokens, dtype=float)  # (n,)
    b = np.asarray(local_cbs, dtype=float)  # (n,)
    if t.ndim != 1 or t.shape != b.shape or t.size < 2:
        raise FitError(f"A power law over tokens needs two checkpoints or more, but got {t.size}.")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(b)) and np.all(t > 0) and np.all(b > 0)):
        raise FitError("Tokens and local CBS must be positive finite numbers for a fit on log axes, "
                       f"but got tokens={t.tolist()}, local_cbs={b.tolist()}.")
    if np.unique(t).size < 2:
        raise FitError(f"A power law over tokens needs two different token counts, but got {t.tolist()}.")
    if not 0 < level < 1:
        raise FitError(f"level must be in (0, 1), but got {level}.")
    x, y = np.log(t), np.log(b)
    n = x.size
    x_mean, y_mean = x.mean(), y.mean()
    sxx = float(np.sum((x - x_mean) ** 2))
    slope = float(np.sum((x - x_mean) * (y - y_mean)) / sxx)
    intercept = float(y_mean - slope * x_mean)
    resid = y - (intercept + slope * x)
    rss = float(np.sum(resid**2))
    tss = float(np.sum((y - y_mean) ** 2))
    r2 = 1.0 - rss / tss if tss > 0 else 1.0
    notes = []
    coef_ci = exponent_ci = None
    if n > 2:
        s = np.sqrt(rss / (n - 2))
        q = float(stats.t.ppf(0.5 + level / 2, df=n - 2))
        se_slope = s / np.sqrt(sxx)
        se_intercept = s * np.sqrt(1.0 / n + x_mean**2 / sxx)
        exponent_ci = (slope - q * se_slope, slope + q * se_slope)
        coef_ci = (float(np.exp(intercept - q * se_intercept)), float(np.exp(intercept + q * se_intercept)))
    else:
        notes.append("two checkpoints: the curve passes through both and has no interval")
    if lower_bounds is not None:
        flags = np.asarray(lower_bounds, dtype=bool)
        if flags.shape != t.shape:
            raise FitError(f"lower_bounds must flag each of the {n} checkpoints, but got {flags.tolist()}.")
        if flags.any():
            at = ", ".join(f"{v:.4g}" for v in t[flags])
            notes.append(f"the local CBS at {at} tokens is at the top of its grid (a lower bound): the curve leans low there")
    return LocalCbsCurve(coef=float(np.exp(intercept)), exponent=slope, coef_ci=coef_ci, exponent_ci=exponent_ci,
                         tokens=tuple(float(v) for v in t), local_cbs=tuple(float(v) for v in b), r2=r2, level=level,
                         notes=tuple(notes))
