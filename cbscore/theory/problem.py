"""The least-squares problem of Zhang et al. 2025 (arXiv 2410.21676, §4) and its stable step sizes.

Features ``x ~ N(0, H)``, ``H = diag(λ_i)``, ``λ_i = i^−a`` for ``i = 1 … d``; target
``y = xᵀw* + ξ``, ``ξ ~ N(0, σ²)``; source condition ``λ_i·w*_i² = i^−b``. One-pass mini-batch SGD
from ``w_0 = 0`` with ``B`` fresh samples per step and the per-coordinate step ``γ_i = η·λ_i^−p``
(``p = 0`` is plain SGD; ``p > 0`` a diagonal, Adam-like preconditioner that is exact for this
diagonal ``H``). ``D = B·S`` samples after ``S`` steps.

The power laws are those of Lin et al. 2024 (arXiv 2406.08466, Assumption 2) and Zhang et al.
2025 (§4): ``a > 1`` makes ``tr H`` finite as ``d → ∞``; ``b > 1`` makes the initial risk
``Σ_i λ_i w*_i² = Σ_i i^−b`` finite.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from cbscore.errors import ConfigError

#: Largest number of modes the simulator accepts (its cost grows like d² per configuration).
MAX_MODES = 4096


def _number(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(field, value, "must be a number")
    if not math.isfinite(float(value)):
        raise ConfigError(field, value, "must be a finite number")
    return float(value)


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One linear-regression problem and optimizer family (everything but ``B``, ``η`` and the average)."""

    a: float = 1.5
    """Spectrum exponent: ``λ_i = i^−a`` (dimensionless, ``a > 1``)."""
    b: float = 2.5
    """Source exponent: ``λ_i·w*_i² = i^−b`` (dimensionless, ``b > 1``)."""
    sigma2: float = 1.0
    """Label-noise variance ``σ²`` (squared target units, ``≥ 0``)."""
    d: int = 512
    """Number of modes kept (features), ``1 … MAX_MODES``."""
    p: float = 0.0
    """Preconditioner exponent: the step of mode ``i`` is ``η·λ_i^−p`` (``0 ≤ p < 1``; 0 is SGD)."""

    def __post_init__(self) -> None:
        for field, low in (("a", 1.0), ("b", 1.0)):
            if _number(field, getattr(self, field)) <= low:
                raise ConfigError(field, getattr(self, field), f"must be a number above {low:g}")
        if _number("sigma2", self.sigma2) < 0:
            raise ConfigError("sigma2", self.sigma2, "must be a number ≥ 0")
        if isinstance(self.d, bool) or not isinstance(self.d, (int, np.integer)) or not 1 <= self.d <= MAX_MODES:
            raise ConfigError("d", self.d, f"must be a whole number from 1 to {MAX_MODES}")
        if not 0.0 <= _number("p", self.p) < 1.0:
            raise ConfigError("p", self.p, "must be a number in [0, 1)")

    # ------------------------------------------------------------------ the spectrum
    @property
    def eigenvalues(self) -> np.ndarray:
        """(d,) ``λ_i = i^−a``."""
        return np.arange(1, self.d + 1, dtype=float) ** -self.a

    @property
    def initial_error(self) -> np.ndarray:
        """(d,) ``E[(w_0 − w*)_i²] = w*_i² = i^−b/λ_i`` (``w_0 = 0``)."""
        i = np.arange(1, self.d + 1, dtype=float)
        return i ** (self.a - self.b)

    @property
    def initial_risk(self) -> float:
        """``R_0 = Σ_i λ_i w*_i² = Σ_i i^−b``: the excess risk of ``w_0 = 0``."""
        return float(np.sum(np.arange(1, self.d + 1, dtype=float) ** -self.b))

    def effective_steps(self, eta: float) -> np.ndarray:
        """(d,) ``g_i = γ_i·λ_i = η·λ_i^(1−p)``: the contraction of mode ``i`` per step is ``1 − g_i``."""
        return eta * self.eigenvalues ** (1.0 - self.p)

    # ------------------------------------------------------------------ wire format
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; ``Problem.from_dict(p.to_dict()) == p``."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Problem:
        if not isinstance(data, Mapping):
            raise ConfigError("problem", data, "must be a dict of Problem fields")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(unknown[0], data[unknown[0]], "is not a Problem field")
        return cls(**dict(data))


def check_batch_size(batch_size: object, field: str = "batch_size") -> int:
    """``batch_size`` as an int, or :class:`ConfigError` unless it is a positive whole number."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer, float, np.floating)):
        raise ConfigError(field, batch_size, "must be a positive whole number")
    if not (math.isfinite(float(batch_size)) and float(batch_size) >= 1 and float(batch_size) == int(batch_size)):
        raise ConfigError(field, batch_size, "must be a positive whole number")
    return int(batch_size)


def stability_margin(problem: Problem, batch_size: int, eta: float) -> float:
    """``1 − Σ_i g_i/(2B − (B + 1)·g_i)``; positive exactly when the second moments converge.

    The second moments follow ``A ← (diag(ρ) + v·λᵀ)·A + σ²·v`` (:mod:`cbscore.theory.recursion`),
    with ``ρ_i = (1 − g_i)² + g_i²/B`` and ``λ_i v_i = g_i²/B``. Its eigenvalues ``μ`` are the roots
    of ``Σ_i λ_i v_i/(μ − ρ_i) = 1``; they interlace the ``ρ_i`` from above (Golub 1973, §5), so
    all lie in ``[0, 1)`` exactly when every ``ρ_i < 1`` (``g_i < 2B/(B + 1)``) and the secular
    function is below 1 at ``μ = 1``: ``Σ_i (g_i²/B)/(1 − ρ_i) = Σ_i g_i/(2B − (B + 1)g_i) < 1``.
    (For ``B = 1`` and small ``ηλ_1`` this is the classical ``η < 2/tr H``, Bach & Moulines 2013,
    arXiv 1306.2119.) Returns ``−inf`` where some ``ρ_i ≥ 1``.
    """
    g = problem.effective_steps(eta)
    room = 2.0 * batch_size - (batch_size + 1.0) * g
    if np.any(room <= 0):
        return -math.inf
    return 1.0 - float(np.sum(g / room))


def critical_step_size(problem: Problem, batch_size: int) -> float:
    """``η_crit(B)``: the largest ``η`` at which the expected risk stays bounded (it diverges past it).

    The root in ``η`` of :func:`stability_margin` (which falls monotonically in ``η``), found by
    bisection to a relative 1e-13.
    """
    batch_size = check_batch_size(batch_size)
    g_unit = problem.effective_steps(1.0)
    hi = 2.0 * batch_size / ((batch_size + 1.0) * float(g_unit.max()))  # the first ρ_i reaches 1
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if stability_margin(problem, batch_size, mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return lo
