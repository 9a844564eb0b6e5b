"""The local-CBS readout: which branch multipliers ``k`` lost nothing against the smaller ones.

Merrill et al. 2025 (arXiv 2505.23971, §3): after branching at ``k·B0`` (learning rate
``f(k)·η0``) for ``Δ`` tokens, the local CBS is ``k*·B0`` with ``k*`` the largest ``k`` whose
(smoothed training) loss is within ``ε`` of the loss of *every* smaller ``k``. "Within" is one
sided here: a larger batch that ends *lower* is not penalised,

    pass(k_i)  ⇔  L(k_i) − L(k_j) ≤ ε_ij   for every j < i,        k* = max{k_i : pass(k_i)}.

The true local CBS lies in ``[k*·B0, k_next·B0)`` (the bracket to the next ``k`` of the grid); a
``k*`` at the top of the grid is a lower bound only.

Merrill's rule uses one ``ε`` for every pair (:func:`merrill_local_cbs`). The lab's variant
(:func:`noise_aware_local_cbs`) reads the held-out EWA loss at the window's end and sets the
tolerance of each pair from the noise of its difference: ``ε_ij = max(ε_floor, z·SE(L_i − L_j))``
with the standard error from seeds paired by base run (``sd(d_s)/√S``, the paired-difference
standard error; Student 1908) or, with one seed, from each branch's own spread
(``√(se_i² + se_j²)``). Both report ``k*`` again at half and twice the tolerance, so that a
reader sees when the tolerance, not the data, decides the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cbscore.errors import ConfigError

Z_ONE_SIDED_95 = 1.6448536269514722
"""``Φ⁻¹(0.95)``: a larger batch fails only when it is worse beyond one-sided 95% noise."""


@dataclass(frozen=True, kw_only=True)
class LocalCbsReadout:
    """The local CBS at one checkpoint, by one rule."""

    rule: str
    """``"merrill"`` (one ε) or ``"noise-aware"`` (ε of each pair from the noise)."""
    base_batch_size: int
    """``B0``, sequences."""
    multipliers: tuple[float, ...]
    """``k`` of the branches, increasing."""
    losses: tuple[float, ...]
    """Each ``k``'s loss after ``Δ`` tokens (mean over seeds), nats per token."""
    passes: tuple[bool, ...]
    """Whether each ``k`` is within tolerance of every smaller ``k`` (the smallest always is)."""
    k_star: float
    """The largest passing ``k``."""
    local_cbs: float
    """``k*·B0``, sequences."""
    bracket: tuple[float, float | None]
    """``(k*·B0, k_next·B0)``: the local CBS lies in it; ``None`` above when ``k*`` is the grid's top."""
    epsilon: float
    """Merrill's ``ε``, or the noise-aware rule's floor, nats."""
    tolerances: tuple[tuple[float, ...], ...]
    """``ε_ij`` for every ``i`` (row) against every smaller ``j`` (row ``i`` has ``i`` entries)."""
    k_star_half_tolerance: float
    """``k*`` with every tolerance halved."""
    k_star_double_tolerance: float
    """``k*`` with every tolerance doubled."""
    z: float | None = None
    """The noise-aware rule's ``z``; ``None`` for Merrill's."""
    noise_decides: bool = False
    """Noise-aware rule: some tolerance that decided a pass or a failure came from the noise, not
    the floor."""

    @property
    def lower_bound(self) -> bool:
        """``k*`` is the largest ``k`` of the grid: the local CBS is at least ``local_cbs``."""
        return self.bracket[1] is None

    @property
    def tolerance_decides(self) -> bool:
        """``k*`` moves when the tolerance is halved or doubled: the answer rests on ``ε``."""
        return not (self.k_star_half_tolerance == self.k_star == self.k_star_double_tolerance)

    def to_dict(self) -> dict:
        return {"rule": self.rule, "base_batch_size": self.base_batch_size, "multipliers": list(self.multipliers),
                "losses": list(self.losses), "passes": list(self.passes), "k_star": self.k_star,
                "local_cbs": self.local_cbs, "bracket": list(self.bracket), "epsilon": self.epsilon,
                "tolerances": [list(r) for r in self.tolerances], "k_star_half_tolerance": self.k_star_half_tolerance,
                "k_star_double_tolerance": self.k_star_double_tolerance, "z": self.z,
                "noise_decides": self.noise_decides, "lower_bound": self.lower_bound,
                "tolerance_decides": self.tolerance_decides}

    @classmethod
    def from_dict(cls, data) -> LocalCbsReadout:
        """The readout :meth:`to_dict` wrote (its derived ``lower_bound`` and ``tolerance_decides`` are read from
        the fields again)."""
        return cls(rule=data["rule"], base_batch_size=data["base_batch_size"], multipliers=tuple(data["multipliers"]),
                   losses=tuple(data["losses"]), passes=tuple(data["passes"]), k_star=data["k_star"],
                   local_cbs=data["local_cbs"], bracket=(data["bracket"][0], data["bracket"][1]),
                   epsilon=data["epsilon"], tolerances=tuple(tuple(r) for r in data["tolerances"]),
                   k_star_half_tolerance=data["k_star_half_tolerance"],
                   k_star_double_tolerance=data["k_star_double_tolerance"], z=data["z"],
                   noise_decides=data["noise_decides"])


def merrill_local_cbs(multipliers, losses, *, base_batch_size: int, epsilon: float) -> LocalCbsReadout:
    """Merrill's rule with one ``ε`` (nats). ``losses``: (K,) or (K, S) over seeds (their mean is used)."""
    ks, table = _inputs(multipliers, losses, base_batch_size)
    _non_negative("epsilon", epsilon)
    mean = table.mean(axis=1)  # (K,)
    tol = np.full((len(ks), len(ks)), float(epsilon))  # (K, K), used below the diagonal
    return _readout("merrill", ks, mean, tol, base_batch_size, float(epsilon), None, False)


def noise_aware_local_cbs(multipliers, losses, *, base_batch_size: int, epsilon_floor: float = 0.0,
                          z: float = Z_ONE_SIDED_95, standard_errors=None) -> LocalCbsReadout:
    """The lab's rule: ``ε_ij = max(epsilon_floor, z·SE(L_i − L_j))``.

    ``losses``: (K, S) held-out EWA losses at the window's end, seed ``s`` of every ``k`` branched
    from the same base run (so the differences are paired), ``S ≥ 2``; or (K,) / (K, 1) with
    ``standard_errors`` (K,), each branch's own standard error (e.g. :func:`window_end_loss`)."""
    ks, table = _inputs(multipliers, losses, base_batch_size)
    _non_negative("epsilon_floor", epsilon_floor)
    _non_negative("z", z)
    k, seeds = table.shape
    if standard_errors is not None:
        se = np.asarray(standard_errors, dtype=float)
        if se.shape != (k,) or not np.all(np.isfinite(se)) or np.any(se < 0):
            raise ConfigError("standard_errors", standard_errors, f"must be {k} finite non-negative numbers")
        se_diff = np.sqrt(se[:, None] ** 2 + se[None, :] ** 2)  # (K, K), independent branches
    elif seeds >= 2:
        diffs = table[:, None, :] - table[None, :, :]  # (K, K, S): seed-paired L_i − L_j
        se_diff = diffs.std(axis=2, ddof=1) / np.sqrt(seeds)  # (K, K)
    else:
        raise ConfigError("losses", table.tolist(), "needs two seeds or more, or standard_errors, for the noise-aware rule")
    noise = z * se_diff
    tol = np.maximum(float(epsilon_floor), noise)  # (K, K)
    mean = table.mean(axis=1)
    result = _readout("noise-aware", ks, mean, tol, base_batch_size, float(epsilon_floor), float(z), False)
    # the comparisons that decided: every pair of a passing k, and the failing pairs of the next k
    decided = [(i, j) for i in range(k) if result.passes[i] and ks[i] <= result.k_star for j in range(i)]
    above = [i for i in range(k) if ks[i] > result.k_star]
    if above:
        i = above[0]
        decided += [(i, j) for j in range(i) if mean[i] - mean[j] > tol[i, j]]
    by_noise = any(noise[i, j] > epsilon_floor for i, j in decided)
    return replace(result, noise_decides=by_noise)


@dataclass(frozen=True, kw_only=True)
class WindowLoss:
    """A branch's smoothed loss at its window's end."""

    mean: float
    """Mean of the last logged losses, nats."""
    standard_error: float
    """Their standard deviation / √n (``nan`` for one value)."""
    n: int
    """How many logged losses were averaged."""


def window_end_loss(losses, *, fraction: float = 0.1) -> WindowLoss:
    """Smoothed training loss at a window's end: the mean of the last ``fraction`` of a branch's
    logged losses (at least one), with its spread as a standard error. Logged losses are
    already means over their log interval (:mod:`cbscore.train.callbacks`)."""
    values = np.asarray(losses, dtype=float)
    if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
        raise ConfigError("losses", losses, "must be one or more finite losses")
    if not 0 < fraction <= 1:
        raise ConfigError("fraction", fraction, "must be in (0, 1]")
    tail = values[-max(1, int(round(fraction * values.size))):]
    se = float(tail.std(ddof=1) / np.sqrt(tail.size)) if tail.size > 1 else float("nan")
    return WindowLoss(mean=float(tail.mean()), standard_error=se, n=int(tail.size))


# ---------------------------------------------------------------------------------- helpers
def _inputs(multipliers, losses, base_batch_size) -> tuple[np.ndarray, np.ndarray]:
    ks = np.asarray(multipliers, dtype=float)  # (K,)
    if ks.ndim != 1 or ks.size < 2 or not np.all(np.isfinite(ks)) or np.any(ks <= 0) or np.any(np.diff(ks) <= 0):
        raise ConfigError("multipliers", multipliers, "must be two or more positive numbers, increasing")
    table = np.asarray(losses, dtype=float)
    if table.ndim == 1:
        table = table[:, None]  # (K, 1)
    if table.ndim != 2 or table.shape[0] != ks.size or table.shape[1] < 1 or not np.all(np.isfinite(table)):
        raise ConfigError("losses", losses, f"must be {ks.size} finite losses per seed, one row per multiplier")
    if isinstance(base_batch_size, bool) or not isinstance(base_batch_size, int) or base_batch_size < 1:
        raise ConfigError("base_batch_size", base_batch_size, "must be a positive integer")
    return ks, table


def _non_negative(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
        raise ConfigError(name, value, "must be a non-negative finite number")


def _k_star(ks: np.ndarray, mean: np.ndarray, tol: np.ndarray) -> tuple[float, list[bool]]:
    gap = mean[:, None] - mean[None, :]  # (K, K): L_i − L_j
    passes = [bool(np.all(gap[i, :i] <= tol[i, :i])) for i in range(ks.size)]  # the smallest k: vacuous
    return float(ks[max(i for i, ok in enumerate(passes) if ok)]), passes


def _readout(rule, ks, mean, tol, b0, epsilon, z, noise_decides) -> LocalCbsReadout:
    k_star, passes = _k_star(ks, mean, tol)
    above = ks[ks > k_star]
    return LocalCbsReadout(
        rule=rule, base_batch_size=b0, multipliers=tuple(float(k) for k in ks), losses=tuple(float(x) for x in mean),
        passes=tuple(passes), k_star=k_star, local_cbs=k_star * b0,
        bracket=(k_star * b0, float(above[0]) * b0 if above.size else None), epsilon=epsilon,
        tolerances=tuple(tuple(float(t) for t in tol[i, :i]) for i in range(ks.size)),
        k_star_half_tolerance=_k_star(ks, mean, tol / 2)[0], k_star_double_tolerance=_k_star(ks, mean, tol * 2)[0],
        z=z, noise_decides=noise_decides,
    )

