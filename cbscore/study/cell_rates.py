"""The learning rates each grid cell runs: the spec's grid, extended past an edge where a cell's
best rate sits there, or (``experimental.predict``) chosen around the rate predicted from the setting's
other cells (:mod:`cbscore.study.lr_predict`); a chained search's cells other than the reference
bracket their neighbour's best rate (:mod:`cbscore.study.chained`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from cbscore.study.budgets import RERUN_SUFFIX
from cbscore.study.spec import StudySpec
from cbscore.study.trials import TrialRecord


def cell_rates(spec: StudySpec, recs: Sequence[TrialRecord], role: str,
               predicted: float | None = None) -> tuple[tuple[float, ...], bool]:
    """The learning rates a grid cell runs, and whether it is still deciding on more (a chained
    search's reference cell too; its other cells: :func:`cbscore.study.chained.chained_rates`).

    The spec's grid, plus the rates already added past an edge (present in ``recs``). Once every
    trial of those rates has ended, a cell whose best rate (per seed: fewest steps to target, or
    lowest final loss in the reference cell) is the smallest or the largest rate tried gets the
    next rate past that edge, continuing the grid's outermost ratio, up to
    ``search.lr_extensions`` per side (DESIGN.md §1: a minimum over rates that does not bracket
    the optimum overstates ``S(B)``, most at the largest ``B`` where the optimum has moved up, as
    ``√B`` for Adam, Malladi et al. 2022, arXiv 2205.10287). A diverged rate above the best
    brackets it from above. Returns ``(rates ascending, pending)``: ``pending`` is True while
    the cell may still add a rate (its trials have not all ended).
    """
    # Re-runs add no rate, but their crossings count for the best: a cell whose first attempts all
    # ended censored at a cap and crossed when re-run still extends past an edge its best sits at,
    # as the full grid does.
    every = list(recs)
    recs = [r for r in recs if not r.trial_id.endswith(RERUN_SUFFIX)]
    if spec.search.kind == "grid" and spec.experimental.predict:
        return _predicted_cell_rates(spec, recs, role, predicted)
    base = reference_base(spec) if role == "reference" else sorted(spec.search.lrs)
    rates = sorted(set(base) | {r.lr for r in recs})
    complete = len(recs) >= len(rates) * len(spec.seeds) and all(r.terminal for r in every)
    if not spec.search.runs_rates or spec.search.lr_extensions == 0 or not recs or not complete:
        return tuple(rates), not complete
    below = sum(1 for v in rates if v < base[0])
    above = sum(1 for v in rates if v > base[-1])
    low_ratio = base[1] / base[0] if len(base) > 1 else 2.0
    high_ratio = base[-1] / base[-2] if len(base) > 1 else 2.0
    extra: set[float] = set()
    for best_lr in (_seed_best_rates(every, role) if len(rates) >= 2 else ()):
        if best_lr == rates[0] and below < spec.search.lr_extensions:
            extra.add(float(f"{rates[0] / low_ratio:.3g}"))
        if best_lr == rates[-1] and above < spec.search.lr_extensions:
            extra.add(float(f"{rates[-1] * high_ratio:.3g}"))
    if extra:
        return tuple(sorted(set(rates) | extra)), True
    return tuple(rates), False


def reference_base(spec: StudySpec) -> list[float]:
    """The rates a reference cell starts with: ``lrs``, or (a chained search with ``reference_rates:
    bracket``) three rates around their geometric middle, ``search.bracket_ratio`` apart."""
    lrs = sorted(spec.search.lrs)
    if spec.search.kind != "chained" or spec.search.reference_rates != "bracket":
        return lrs
    middle = math.exp(sum(math.log(v) for v in lrs) / len(lrs))
    rho = spec.search.bracket_ratio
    return [float(f"{v:.3g}") for v in (middle / rho, middle, middle * rho)]


def _seed_best_rates(recs: Sequence[TrialRecord], role: str) -> list[float]:
    """Each seed's best rate among ended trials: fewest steps to target, or (the reference cell)
    lowest final held-out loss."""
    out = []
    for seed in sorted({r.seed for r in recs}):
        mine = [r for r in recs if r.seed == seed]
        if role == "reference":
            scored = [(r.final_eval_loss, r.lr) for r in mine
                      if r.status in ("finished", "reached", "censored") and r.final_eval_loss is not None
                      and math.isfinite(r.final_eval_loss)]
        else:
            scored = [(r.steps_to_target, r.lr) for r in mine
                      if r.status == "reached" and r.steps_to_target is not None]
        if scored:
            out.append(min(scored)[1])
    return out


def _predicted_cell_rates(spec: StudySpec, recs: Sequence[TrialRecord], role: str,
                          predicted: float | None) -> tuple[tuple[float, ...], bool]:
    """:func:`cell_rates` of a predicting search (``experimental.predict``, :mod:`cbscore.study.lr_predict`)."""
    from cbscore.study.lr_predict import allowed_rates, first_rates, predict_lr, rates_to_run

    allowed = allowed_rates(spec.search.lrs, spec.search.lr_extensions)
    if not recs:
        guess = predicted
        if guess is None:
            guess = predict_lr(spec.search.lrs, {}, spec.b_ref, spec.experimental.lr_prior)
        return first_rates(allowed, guess), True
    tried = sorted({r.lr for r in recs})
    complete = len(recs) >= len(tried) * len(spec.seeds) and all(r.terminal for r in recs)
    if not complete:
        return tuple(tried), True
    best = _seed_best_rates(recs, role)
    if not best:
        return tuple(tried), False
    rates = rates_to_run(allowed, spec.search.lrs, tried, best, predicted)
    return rates, len(rates) > len(tried)


def cell_best_rate(spec: StudySpec, batch_size: int, recs: Sequence[TrialRecord]) -> float | None:
    """A cell's measured best rate, what :func:`cbscore.study.lr_predict.predict_lr` fits over a
    setting's cells: the geometric mean over seeds of each seed's optimal rate once every first
    attempt ended, else ``None``."""
    recs = [r for r in recs if not r.trial_id.endswith(RERUN_SUFFIX)]
    if not recs or not all(r.terminal for r in recs):
        return None
    role = "reference" if (batch_size == spec.b_ref and spec.target_losses is None) else "trial"
    best = _seed_optima(recs, role)
    return math.exp(sum(math.log(v) for v in best) / len(best)) if best else None


def _seed_optima(recs: Sequence[TrialRecord], role: str) -> list[float]:
    """Each seed's optimal rate: the vertex of a parabola in ``ln η`` through its best rate and the
    two rates next to it (``ln S``, or the final loss in the reference cell), kept between them;
    the best rate itself where it has no scored rate on each side. Much less noisy than the best
    rate alone, which noise moves by a whole grid step (cbscore.analysis._points does the same
    across a whole setting)."""
    out = []
    for seed in sorted({r.seed for r in recs}):
        mine = [r for r in recs if r.seed == seed]
        if role == "reference":
            pts = {r.lr: r.final_eval_loss for r in mine if r.status in ("finished", "reached", "censored")
                   and r.final_eval_loss is not None and math.isfinite(r.final_eval_loss)}
        else:
            pts = {r.lr: math.log(r.steps_to_target) for r in mine
                   if r.status == "reached" and r.steps_to_target}
        if not pts:
            continue
        xs = sorted(pts)
        at = min(range(len(xs)), key=lambda i: pts[xs[i]])
        if 0 < at < len(xs) - 1:
            (x0, x1, x2) = (math.log(v) for v in xs[at - 1:at + 2])
            y0, y1, y2 = (pts[v] for v in xs[at - 1:at + 2])
            # Vertex of the parabola through three points (Lagrange form).
            den = (x0 - x1) * (x0 - x2) * (x1 - x2)
            a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / den
            bq = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / den
            if a > 0:
                out.append(math.exp(min(max(-bq / (2 * a), x0), x2)))
                continue
        out.append(xs[at])
    return out


def cell_prediction(spec: StudySpec, setting_id: str, best_rates: Mapping[str, Mapping[int, float]],
                    batch_size: int) -> float | None:
    """The predicted best rate of a cell from the trend of the setting's other measured cells: its
    first rates are chosen around it, and a cell adds the next rate towards it while it lies
    outside the rates tried. The reference cell, measured first, is predicted from the other
    settings' reference cells where one has ended (their best rates at the same B_ref)."""
    from cbscore.study.lr_predict import predict_lr

    measured = {b: v for b, v in best_rates[setting_id].items() if b != batch_size}  # the other cells' trend
    if not measured and batch_size == spec.b_ref:
        others = [v[spec.b_ref] for v in best_rates.values() if spec.b_ref in v]
        if others:
            measured = {spec.b_ref: math.exp(sum(math.log(v) for v in others) / len(others))}
    return predict_lr(spec.search.lrs, measured, batch_size, spec.experimental.lr_prior)


def cell_rates_note(spec: StudySpec, recs: Sequence[TrialRecord], role: str, rates: Sequence[float],
                    predicted: float | None) -> str:
    """Which allowed rates a predicting cell runs, and why (for status pages and reports)."""
    from cbscore.study.lr_predict import allowed_rates, explain_rates

    first = [r for r in recs if not r.trial_id.endswith(RERUN_SUFFIX)]
    return explain_rates(allowed_rates(spec.search.lrs, spec.search.lr_extensions), rates, predicted,
                         _seed_best_rates(first, role) if first and all(r.terminal for r in first) else [])
