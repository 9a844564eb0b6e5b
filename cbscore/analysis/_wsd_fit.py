"""The E(S) trade-off under WSD: the classical hyperbola and Huang et al.'s revised form, side by side.

Tokens (here: sequences) to target ``E = B·S`` against steps to target ``S``, one point per
batch size (or per batch size and seed).

**Classical** (McCandlish et al. 2018, arXiv 1812.06162, eq. 2.11; what ``S(B) = a + b/B`` is)::

    (S/S_min − 1)·(E/E_min − 1) = 1   ⇔   E(S) = E_min·S / (S − S_min),   B_noise = E_min / S_min

E falls monotonically towards ``E_min`` as ``S`` grows: the smaller the batch, the fewer tokens.

**Revised for WSD** (Zhou, Huang, Xing, Zhang, Peng, Guo & Qiu 2026, "How to Set the Batch Size
for Large-Scale Pre-training?", arXiv 2601.05034). What could be verified offline is the abstract
and a third-party summary of the paper's piecewise form (the paper itself was not readable here),
three stages in ``S``::

    E(S) = b/(S − S_min) + B_0          S_min < S < S_1      (inverse linear)
    E(S) = C·(S − S_opt)² + E_min       S_1 < S < S_2        (quadratic)
    E(S) = A_1·S + A_0                  S > S_2              (linear)

with ``B_min`` "the minimum batch size threshold required to achieve a target loss" and ``B_opt``
"the optimal batch size that maximizes data efficiency by minimizing total tokens". The paper's
exact formulas for ``B_min`` and ``B_opt`` and for the stage boundaries could not be checked, so
this module fits **only the quadratic stage** (three parameters: a handful of batch sizes cannot
carry seven) and computes the two quantities the abstract names from that fitted curve, by their
stated meaning, not by the paper's formula:

- ``B_opt = E_min / S_opt``: the batch of the point where tokens to target are fewest;
- ``B_min = min_S E(S)/S``: on the fitted curve no smaller batch ``B = E/S`` reaches the target
  (``E(S)/S = C·S − 2C·S_opt + (C·S_opt² + E_min)/S`` is least at ``S* = √(S_opt² + E_min/C)``,
  ``B_min = 2C·(S* − S_opt)``).

Both fits are least squares on ``ln E`` at the measured ``S``; which fits better is judged by the
small-sample AIC (AICc, Hurvich & Tsai 1989) and by leave-one-out prediction error of ``ln E``, and
is left undecided when the points are too few (AICc needs ``n > k + 1``) or the two are within
2 AICc units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from cbscore.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class EsFit:
    """One E(S) form fitted to the points."""

    form: str
    """``classical`` or ``quadratic`` (the revised form's quadratic stage)."""
    params: dict
    """``classical``: ``s_min``, ``e_min``; ``quadratic``: ``c``, ``s_opt``, ``e_min`` (steps, sequences)."""
    rss: float
    """Residual sum of squares of ``ln E``."""
    n: int
    """Points fitted."""
    k: int
    """Parameters fitted."""
    aicc: float | None
    """``n·ln(RSS/n) + 2k + 2k(k+1)/(n−k−1)``; ``None`` when ``n ≤ k + 1``."""
    loo_rmse: float | None
    """Root mean square leave-one-out error of ``ln E``; ``None`` when a refit has ``n − 1 < k`` points."""

    def to_dict(self) -> dict:
        return {"form": self.form, "params": dict(self.params), "rss": self.rss, "n": self.n, "k": self.k,
                "aicc": self.aicc, "loo_rmse": self.loo_rmse}


@dataclass(frozen=True, kw_only=True)
class WsdEsAnalysis:
    """The classical and the revised E(S) fits, their batch sizes, and which fits better."""

    classical: EsFit | None
    quadratic: EsFit | None
    b_noise: float | None
    """``E_min / S_min`` of the classical fit, sequences."""
    b_opt: float | None
    """``E_min / S_opt`` of the quadratic fit, sequences (module docstring)."""
    b_min: float | None
    """``min_S E(S)/S`` of the quadratic fit, sequences (module docstring)."""
    better: str
    """``classical``, ``quadratic`` or ``undecided``."""
    reason: str
    """Why (the AICc difference, the leave-one-out errors, or why neither can say)."""
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"classical": None if self.classical is None else self.classical.to_dict(),
                "quadratic": None if self.quadratic is None else self.quadratic.to_dict(),
                "b_noise": self.b_noise, "b_opt": self.b_opt, "b_min": self.b_min, "better": self.better,
                "reason": self.reason, "notes": list(self.notes)}


def classical_e(s, s_min, e_min):
    """``E(S) = E_min·S/(S − S_min)`` (McCandlish et al. 2018, eq. 2.11)."""
    s = np.asarray(s, dtype=float)
    return e_min * s / (s - s_min)


def quadratic_e(s, c, s_opt, e_min):
    """``E(S) = C·(S − S_opt)² + E_min`` (Zhou et al. 2026's transition stage)."""
    s = np.asarray(s, dtype=float)
    return c * (s - s_opt) ** 2 + e_min


def _fit_classical(s: np.ndarray, e: np.ndarray):
    b = e / s  # batch of each point
    design = np.stack([np.ones_like(b), 1 / b], axis=1)  # S = S_min + E_min/B
    (a0, b0), *_ = np.linalg.lstsq(design, s, rcond=None)
    a0 = min(max(a0, 1e-9), 0.99 * s.min())
    b0 = max(b0, 1e-9)

    def resid(p):
        s_min, log_e = p
        return np.log(classical_e(s, s_min, math.exp(log_e))) - np.log(e)

    res = least_squares(resid, [a0, math.log(b0)], bounds=([0.0, -50], [0.999 * s.min(), 50]))
    return {"s_min": float(res.x[0]), "e_min": float(math.exp(res.x[1]))}, float(np.sum(res.fun ** 2))


def _fit_quadratic(s: np.ndarray, e: np.ndarray):
    j = int(np.argmin(e))
    c0 = np.polyfit(s, e, 2)[0] if s.size >= 3 else 0.0
    c0 = c0 if c0 > 0 else max(float(np.ptp(e)), 1e-9) / max(float(np.ptp(s)) ** 2, 1e-9)

    def resid(p):
        log_c, s_opt, log_e = p
        return np.log(quadratic_e(s, math.exp(log_c), s_opt, math.exp(log_e))) - np.log(e)

    res = least_squares(resid, [math.log(c0), float(s[j]), math.log(float(e[j]))],
                        bounds=([-80, 0.0, -50], [80, 100 * float(s.max()), 50]))
    return ({"c": float(math.exp(res.x[0])), "s_opt": float(res.x[1]), "e_min": float(math.exp(res.x[2]))},
            float(np.sum(res.fun ** 2)))


def _aicc(rss: float, n: int, k: int) -> float | None:
    if n <= k + 1:
        return None
    return n * math.log(max(rss, 1e-300) / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


def _loo(s: np.ndarray, e: np.ndarray, fit, model, k: int) -> float | None:
    if s.size - 1 < k + 1:
        return None
    errs = []
    for i in range(s.size):
        keep = np.arange(s.size) != i
        params, _ = fit(s[keep], e[keep])
        pred = model(s[i:i + 1], **params)[0]
        errs.append(math.log(pred) - math.log(e[i]) if pred > 0 and math.isfinite(pred) else math.inf)
    return float(math.sqrt(np.mean(np.square(errs))))


def _grid_end(b: np.ndarray, b_opt: float) -> tuple[str, float] | None:
    """``("lowest" | "highest", B)`` where ``b_opt`` is nearer (in ``ln B``) the lowest or the highest
    batch size measured than any other one, so the quadratic's vertex has data on one side only;
    ``None`` with fewer than three batch sizes (no inside) or a vertex nearer an inner one."""
    sizes = np.unique(b)
    if sizes.size < 3:
        return None
    if b_opt <= math.sqrt(sizes[0] * sizes[1]):
        return "lowest", float(sizes[0])
    if b_opt >= math.sqrt(sizes[-2] * sizes[-1]):
        return "highest", float(sizes[-1])
    return None


def fit_wsd_es(batch_sizes, steps) -> WsdEsAnalysis:
    """Both E(S) forms on ``(B, S)`` points (sequences, steps; censored cells left out by the caller)."""
    b = np.asarray(batch_sizes, dtype=float)
    s = np.asarray(steps, dtype=float)
    if b.shape != s.shape or b.ndim != 1 or not np.all(np.isfinite(b) & np.isfinite(s)) or np.any(b <= 0) or np.any(s <= 0):
        raise ConfigError("points", list(zip(b.tolist(), s.tolist())), "must be positive finite (B, S) pairs")
    e = b * s
    notes = []
    if s.size < 3:
        return WsdEsAnalysis(classical=None, quadratic=None, b_noise=None, b_opt=None, b_min=None, better="undecided",
                             reason=f"{s.size} points: the E(S) fits need 3 or more", notes=())
    cp, crss = _fit_classical(s, e)
    qp, qrss = _fit_quadratic(s, e)
    n = int(s.size)
    classical = EsFit(form="classical", params=cp, rss=crss, n=n, k=2, aicc=_aicc(crss, n, 2),
                      loo_rmse=_loo(s, e, _fit_classical, classical_e, 2))
    quadratic = EsFit(form="quadratic", params=qp, rss=qrss, n=n, k=3, aicc=_aicc(qrss, n, 3),
                      loo_rmse=_loo(s, e, _fit_quadratic, quadratic_e, 3))
    b_noise = cp["e_min"] / cp["s_min"] if cp["s_min"] > 0 else None
    c, s_opt, e_min = qp["c"], qp["s_opt"], qp["e_min"]
    b_opt = e_min / s_opt if s_opt > 0 else None
    s_star = math.sqrt(s_opt ** 2 + e_min / c)
    b_min = 2 * c * (s_star - s_opt)
    if not s.min() <= s_opt <= s.max():
        notes.append(f"S_opt = {s_opt:.4g} lies outside the measured steps [{s.min():.4g}, {s.max():.4g}]: "
                     "B_opt is an extrapolation")
    elif b_opt is not None and (end := _grid_end(b, b_opt)) is not None:
        notes.append(f"B_opt = {b_opt:.4g} sits at the {end[0]} batch size measured (nearer B = {end[1]:g} than any "
                     f"other): the fit puts E(S)'s minimum at the grid's end, not inside it; measuring B_opt needs "
                     f"{'smaller' if end[0] == 'lowest' else 'larger'} batch sizes")
    if classical.aicc is None or quadratic.aicc is None:
        better, reason = "undecided", f"{n} points: AICc of the 3-parameter form needs 5 or more"
    else:
        delta = quadratic.aicc - classical.aicc
        if abs(delta) < 2:
            better, reason = "undecided", f"AICc within 2 (quadratic − classical = {delta:+.2f})"
        else:
            better = "quadratic" if delta < 0 else "classical"
            reason = f"AICc quadratic − classical = {delta:+.2f}"
    if classical.loo_rmse is not None and quadratic.loo_rmse is not None:
        reason += (f"; leave-one-out rms error of ln E: classical {classical.loo_rmse:.3g}, "
                   f"quadratic {quadratic.loo_rmse:.3g}")
    return WsdEsAnalysis(classical=classical, quadratic=quadratic, b_noise=b_noise, b_opt=b_opt, b_min=b_min,
                         better=better, reason=reason, notes=tuple(notes))


def es_points(rows) -> dict[str, tuple[list[float], list[float]]]:
    """Per setting, the ``(B, S)`` points the E(S) fits read from steps-table rows: each
    ``(B, seed)``'s fewest steps over its reached trials (censored and diverged rows left out)."""
    best: dict[str, dict[tuple, float]] = {}
    for r in rows:
        outcome = r.get("outcome") or "reached"
        steps = r.get("steps")
        if outcome != "reached" or steps in (None, ""):
            continue
        key = (int(float(r["batch_size"])), r.get("seed"))
        cell = best.setdefault(str(r["setting"]), {})
        cell[key] = min(cell.get(key, math.inf), float(steps))
    return {name: ([float(b) for b, _ in cells], list(cells.values())) for name, cells in best.items()}


def format_es(name: str, fit: WsdEsAnalysis) -> list[str]:
    """The text lines of one setting's E(S) fits."""
    def g(x):
        return "—" if x is None else f"{x:.4g}"

    lines = [f"E(S) {name}: classical (McCandlish et al. 2018) B_noise = {g(fit.b_noise)}; revised, quadratic stage "
             f"(Zhou/Huang et al. 2026): B_opt = {g(fit.b_opt)}, B_min = {g(fit.b_min)}; better: {fit.better} "
             f"({fit.reason})"]
    return lines + [f"  note: {n}" for n in fit.notes]
