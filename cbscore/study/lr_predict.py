"""Which learning rates a grid cell runs when the search predicts them (``search.predict``).

The spec's grid, continued past each edge by ``search.lr_extensions`` rates at the grid's outermost
ratio, is the set of **allowed** rates (:func:`allowed_rates`). A predicting cell starts with the
allowed rate nearest its predicted optimum and that rate's two neighbours, and adds a rate only
where the data ask for it (:func:`rates_to_run`): past the tried edge where a seed's best rate sits
(the optimum is not bracketed yet), and the rates of the fit's window around the best
(``cbscore.analysis.window_rates`` on the allowed rates), so the cell's ``S(B)`` is read off the
same rates the full grid's fit would read.

The prediction (:func:`predict_lr`): the best rates of the setting's measured cells fitted in
``ln B``; the optimum of Adam moves as ``√B`` (Malladi et al. 2022, arXiv 2205.10287, the
square-root scaling rule), the slope used until three batch sizes are measured and the prior the
fitted slope is clipped around (``[0, 1]``). Before any cell of the setting is measured: the
spec's ``search.lr_prior`` where it names one (the paper presets: the paper's released rate), else
the geometric middle of the grid (the full grid's own centre).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from cbscore.analysis import window_rates

#: Slope of ``ln η*`` in ``ln B`` before three batch sizes are measured (Adam's square-root rule).
PRIOR_LR_EXPONENT = 0.5
#: A fitted slope is clipped to this range (a noisy fit through three cells can say anything).
LR_EXPONENT_RANGE = (0.0, 1.0)


def allowed_rates(lrs: Sequence[float], extensions: int) -> tuple[float, ...]:
    """The grid plus up to ``extensions`` rates past each edge, ascending, each continuing the
    outermost ratio and rounded to three significant digits exactly as the planner extends a cell
    (``planner.cell_rates``)."""
    base = sorted(lrs)
    low = base[1] / base[0] if len(base) > 1 else 2.0
    high = base[-1] / base[-2] if len(base) > 1 else 2.0
    out = list(base)
    lo, hi = base[0], base[-1]
    for _ in range(extensions):
        lo = float(f"{lo / low:.3g}")
        hi = float(f"{hi * high:.3g}")
        out = [lo, *out, hi]
    return tuple(out)


def predict_lr(lrs: Sequence[float], measured: Mapping[int, float], batch_size: int,
               prior: float | None = None) -> float:
    """Predicted best learning rate at ``batch_size`` from the best rates of measured cells
    (``{batch size: best rate}``), module docstring; ``prior`` (``search.lr_prior``) is the answer
    while nothing is measured."""
    if not measured:
        if prior is not None:
            return prior
        return math.exp(sum(math.log(v) for v in lrs) / len(lrs))
    xs = [math.log(b) for b in measured]
    ys = [math.log(v) for v in measured.values()]
    slope = PRIOR_LR_EXPONENT
    if len(set(xs)) >= 3:
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        slope = min(max(slope, LR_EXPONENT_RANGE[0]), LR_EXPONENT_RANGE[1])
    # The line through the points' centre with that slope (least squares for the intercept).
    intercept = sum(y - slope * x for x, y in zip(xs, ys)) / len(xs)
    return math.exp(intercept + slope * math.log(batch_size))


def nearest(allowed: Sequence[float], lr: float) -> int:
    """Index of the allowed rate nearest ``lr`` in ``ln η``."""
    return min(range(len(allowed)), key=lambda i: abs(math.log(allowed[i] / lr)))


def first_rates(allowed: Sequence[float], predicted: float) -> tuple[float, ...]:
    """The predicted rate (nearest allowed) and its allowed neighbours."""
    at = nearest(allowed, predicted)
    return tuple(allowed[max(0, at - 1):at + 2])


def rates_to_run(allowed: Sequence[float], grid: Sequence[float], tried: Sequence[float],
                 best: Sequence[float], predicted: float | None = None) -> tuple[float, ...]:
    """The rates a predicting cell runs once its tried rates have ended: those tried, the next
    allowed rate past the tried edge where a seed's ``best`` rate sits, and the fit's window
    around every best on the rates the full grid would have tried (the spec's ``grid`` and the
    extensions the cell made); and the next allowed rate towards the ``predicted`` optimum (the
    trend of the other cells) while it lies past the tried rates: one lucky rate can look
    bracketed by two unlucky neighbours. Nothing is added once each best is bracketed, the
    trend's optimum lies within the tried rates and the window is run."""
    out = set(tried)
    full = sorted(set(grid) | set(tried))
    lo, hi = min(tried), max(tried)
    for b in best:
        if b == lo and allowed.index(lo) > 0:
            out.add(allowed[allowed.index(lo) - 1])
        if b == hi and allowed.index(hi) < len(allowed) - 1:
            out.add(allowed[allowed.index(hi) + 1])
        out |= set(window_rates(full, b))
    if predicted is not None:
        at = nearest(allowed, predicted)
        if allowed[at] < lo and allowed.index(lo) > 0:
            out.add(allowed[allowed.index(lo) - 1])
        elif allowed[at] > hi and allowed.index(hi) < len(allowed) - 1:
            out.add(allowed[allowed.index(hi) + 1])
    return tuple(sorted(out))


def explain_rates(allowed: Sequence[float], rates: Sequence[float], predicted: float | None,
                  best: Sequence[float]) -> str:
    """One line: the predicted optimum, the rates run (of the allowed ones) and the best so far, and
    the allowed rates left out (never bracketing the optimum nor in the fit's window)."""
    skipped = [v for v in allowed if v not in set(rates)]
    parts = []
    if predicted is not None:
        parts.append(f"η* from the other cells ≈ {predicted:.3g}")
    parts.append("runs " + ", ".join(f"{v:g}" for v in sorted(rates)))
    if best:
        parts.append("best " + ", ".join(f"{v:g}" for v in best))
    if skipped:
        parts.append("not run (outside the bracket and the fit's window) " + ", ".join(f"{v:g}" for v in skipped))
    return "; ".join(parts)
