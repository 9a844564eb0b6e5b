"""The chained bracket (``search.kind: chained``): each cell brackets its optimal learning
rate from its neighbour's instead of running the whole grid.

The reference cell at ``B_ref`` runs the spec's ``lrs`` (extended past an edge as a grid cell is):
the target comes from the whole cell (DESIGN.md §1). The other cells are measured outward from
``B_ref`` in both directions. A cell at ``B`` whose neighbour towards ``B_ref`` (``B_prev``) has
settled is centred at

    c = η_best(B_prev) · (B / B_prev)^γ,    γ = ``search.chain_exponent`` (0.5)

(Adam's optimum moves as ``√B``, Malladi et al. 2022, arXiv 2205.10287), where ``η_best`` is the
geometric mean over seeds of each seed's best rate among the neighbour's first attempts (fewest
steps to target; lowest final held-out loss in the reference cell); a neighbour with no best hands
on its own centre the same way. The cell runs ``c/ρ, c, c·ρ`` (``ρ`` = ``search.bracket_ratio``),
each to its own crossing; once they ended, it adds the next rate past an edge (by the same ratio)
only where the edge's steps to target beat its inner neighbour's by more than
``search.extension_gain`` (mean of ln S over seeds), up to ``search.max_extensions`` in all. No far
rates are run, and ``S(B)`` is read off the cell's trials by the same estimator as a grid cell's.

A cell's rates are read off its own first attempts, never its re-runs, so a neighbour's best
never moves once a cell was centred on it.

Narrow cells (off by default): a cell below ``search.bracket_min_batch_size``
(the reference cell excepted) starts with ``search.narrow_rates`` rates instead of three: two,
``c/√ρ`` and ``c·√ρ`` (the fit across rates reads its optimum between them with the curvature the
setting's three-rate cells share, :func:`cbscore.analysis.fit_across_rates`), or the centre alone.
Such a cell is extended by the same gate; one that added no rate hands on its own centre (its
rates sit either side of it, so neither is a better guess of the optimum), one that did its best
rate as a bracketed cell does.

Centring from what the neighbours measured (both off by default):

* ``search.chain_centre: vertex``: a settled cell hands on its *continuous* optimum instead of its
  best discrete rate: per seed, the vertex of the parabola in ``ln η`` that the estimator fits
  across rates (:func:`cbscore.analysis._points.fit_across_rates`, its curvature shared by the
  cells of the chain from ``B_ref`` out to this one, the optimum kept within the rates tried),
  geometric mean over seeds; the reference cell's is the vertex of the parabola through the final
  held-out losses of its best rate and that rate's two neighbours (what picks its best today). A
  cell the fit does not read (one rate in its window, no positive curvature) hands on its best
  rate as before (a narrow one its centre).
* ``search.local_exponent: true``: once the two cells before it in the chain (``B_ref`` counts)
  both handed on an optimum, a cell is centred with the slope of ``ln η_opt`` against ``ln B``
  between them, clamped to :data:`LOCAL_EXPONENT_RANGE`, instead of ``chain_exponent`` (which
  the first cell past ``B_ref`` still uses): it follows an optimum whose law turns (``peak``).

Only cells at or nearer ``B_ref`` on a cell's own side feed its centre, and only their first
attempts, which have all ended: a released cell's centre never moves.

Replicates (off by default): a cell of ``search.replicate_batch_sizes`` that settled with a best rate
runs ``search.replicates`` more trials at that rate, each with a new training seed
(:func:`replicate_seeds`), to its own crossing under the cap its best rate's neighbours get. A new
seed is not a repeat of the cell: the lab's seeds each shift ``ln S`` at every batch size (DESIGN.md
§1, "Intervals"), so the estimator reads a replicate through the two-way fit of ``ln S`` on batch
size and seed (:func:`cbscore.analysis.measure_points`), and its one rate through the curvature the
setting's cells share, at their optimum. Replicates never feed the chain (no centre, cap or
extension reads them), so they change nothing the cell's spec seeds run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from cbscore.analysis._points import fit_across_rates
from cbscore.analysis._trial import TrialSteps
from cbscore.study.budgets import RERUN_TAG
from cbscore.study.cell_rates import _seed_best_rates, cell_rates
from cbscore.study.spec import StudySpec
from cbscore.study.trials import TrialRecord

#: The slope a local exponent is clamped to (``search.local_exponent``): from an optimal rate that
#: falls as ``B^-0.5`` to one that grows linearly with ``B`` (SGD's rule, Goyal et al. 2017).
LOCAL_EXPONENT_RANGE = (-0.5, 1.0)


def replicate_seeds(spec: StudySpec) -> tuple[int, ...]:
    """The training seeds of a replicated cell's replicates (``search.replicates`` of them): the next
    integers after the spec's ``seeds``, so no replicate shares a spec seed's shift."""
    top = max(spec.seeds)
    return tuple(range(top + 1, top + 1 + spec.search.replicates))


def split_replicates(spec: StudySpec, recs: Sequence[TrialRecord]) -> tuple[list[TrialRecord], list[TrialRecord]]:
    """``(the cell's records of the spec's seeds, its replicates')``: a replicate is a record whose
    seed is not one of the spec's ``seeds``."""
    seeds = set(spec.seeds)
    main, reps = [], []
    for r in recs:
        (main if r.seed in seeds else reps).append(r)
    return main, reps


def _round(lr: float) -> float:
    """Three significant digits, as a grid cell's extensions are (``cell_rates``)."""
    return float(f"{lr:.3g}")


def first_attempts(recs: Sequence[TrialRecord]) -> list[TrialRecord]:
    """A cell's records without its re-runs."""
    return [r for r in recs if not r.trial_id.endswith("." + RERUN_TAG)]


def bracket(spec: StudySpec, centre: float) -> tuple[float, float, float]:
    """The three first rates of a chained cell centred at ``centre``."""
    rho = spec.search.bracket_ratio
    return _round(centre / rho), _round(centre), _round(centre * rho)


def is_narrow(spec: StudySpec, batch_size: int | None) -> bool:
    """Whether a chained cell at ``batch_size`` starts with ``search.narrow_rates`` rates instead of
    the three-rate bracket (below ``search.bracket_min_batch_size``; never the reference cell)."""
    floor = spec.bracket_floor
    return (floor is not None and batch_size is not None and batch_size < floor
            and spec.search.narrow_rates < 3 and batch_size != spec.b_ref)


def first_rates(spec: StudySpec, centre: float, batch_size: int | None = None) -> tuple[float, ...]:
    """The rates a chained cell at ``batch_size`` centred at ``centre`` starts with (ascending): the
    bracket, or in a narrow cell ``c/√ρ, c·√ρ`` (two rates, a factor ρ apart) or ``c`` alone."""
    if not is_narrow(spec, batch_size):
        return bracket(spec, centre)
    if spec.search.narrow_rates == 1:
        return (_round(centre),)
    half = math.sqrt(spec.search.bracket_ratio)
    return _round(centre / half), _round(centre * half)


def _log_steps(recs: Sequence[TrialRecord]) -> dict[float, float]:
    """Mean over seeds of ln S per rate, among the seeds whose trial of that rate reached the target."""
    by_rate: dict[float, list[float]] = {}
    for r in recs:
        if r.status == "reached" and r.steps_to_target:
            by_rate.setdefault(r.lr, []).append(math.log(r.steps_to_target))
    return {lr: sum(v) / len(v) for lr, v in by_rate.items()}


def chained_rates(spec: StudySpec, recs: Sequence[TrialRecord], centre: float,
                  batch_size: int | None = None) -> tuple[tuple[float, ...], bool]:
    """A chained cell's rates (ascending) and whether it may still add one (module docstring):
    ``(rates, pending)``; ``pending`` while any first attempt runs or an extension was just added.
    ``batch_size``: the cell's, which says whether it is narrow (``None``: a bracketed cell)."""
    first = first_attempts(recs)
    base = first_rates(spec, centre, batch_size)
    rates = sorted(set(base) | {r.lr for r in first})
    complete = len(first) >= len(rates) * len(spec.seeds) and all(r.terminal for r in first)
    if not complete:
        return tuple(rates), True
    extended = sum(1 for v in rates if v not in base)
    if extended >= spec.search.max_extensions or len(rates) < 2:
        return tuple(rates), False
    score = _log_steps(first)
    margin = math.log1p(spec.search.extension_gain)
    rho = spec.search.bracket_ratio
    extra: list[float] = []
    for edge, inner, nxt in ((rates[0], rates[1], rates[0] / rho), (rates[-1], rates[-2], rates[-1] * rho)):
        if edge not in score:
            continue  # diverged or censored: it brackets the optimum
        if inner not in score or score[edge] + margin < score[inner]:
            extra.append(_round(nxt))
    extra = extra[:spec.search.max_extensions - extended]
    if extra:
        return tuple(sorted(set(rates) | set(extra))), True
    return tuple(rates), False


def settled_best(spec: StudySpec, recs: Sequence[TrialRecord], role: str,
                 centre: float | None, batch_size: int | None = None) -> tuple[bool, float | None]:
    """``(settled, best rate)`` of a cell: settled once its first attempts ended and it adds no rate;
    the best rate is the geometric mean over seeds of each seed's best among those first attempts
    (``None`` where no seed has one); a narrow cell that added no rate hands on its centre."""
    first = first_attempts(recs)
    if not first:
        return False, None
    if role == "reference":
        pending = cell_rates(spec, recs, "reference")[1]
    else:
        rates, pending = chained_rates(spec, recs, centre, batch_size)
        if (not pending and all(r.terminal for r in first) and is_narrow(spec, batch_size)
                and set(rates) == set(first_rates(spec, centre, batch_size))):
            return True, centre
    if pending or not all(r.terminal for r in first):
        return False, None
    best = _seed_best_rates(first, role)
    if not best:
        return True, None
    return True, _round(math.exp(sum(math.log(v) for v in best) / len(best)))


def _geo(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def loss_vertex(recs: Sequence[TrialRecord]) -> float | None:
    """A reference cell's continuous optimum (``search.chain_centre: vertex``): per seed, the vertex
    in ``ln η`` of the parabola through the final held-out losses of its best rate and that rate's
    two neighbours, kept between them; geometric mean over seeds. ``None`` where no seed has a best
    rate with a neighbour on each side and a positive curvature there."""
    out = []
    for seed in sorted({r.seed for r in recs}):
        scored = sorted((r.lr, r.final_eval_loss) for r in recs
                        if r.seed == seed and r.status in ("finished", "reached", "censored")
                        and r.final_eval_loss is not None and math.isfinite(r.final_eval_loss))
        if len(scored) < 3:
            continue
        at = min(range(len(scored)), key=lambda i: (scored[i][1], scored[i][0]))
        if at in (0, len(scored) - 1):
            continue
        (l0, y0), (l1, y1), (l2, y2) = scored[at - 1:at + 2]
        u0, u2 = math.log(l0 / l1), math.log(l2 / l1)
        # y = y1 + b·u + a·u² through the three points (u = ln η − ln η_best).
        a = ((y0 - y1) / u0 - (y2 - y1) / u2) / (u0 - u2)
        b = (y0 - y1) / u0 - a * u0
        if not a > 0:
            continue
        out.append(l1 * math.exp(min(max(-b / (2 * a), u0), u2)))
    return _round(_geo(out)) if out else None


def steps_vertex(chain: Mapping[int, Sequence[TrialRecord]], batch_size: int) -> float | None:
    """The continuous optimum of the settled cell ``batch_size`` (``search.chain_centre: vertex``):
    per seed, the vertex the estimator's fit across rates reads (its curvature shared by the cells
    of ``chain``, ``{batch size: first attempts}``), geometric mean over seeds; ``None`` where the
    fit does not read the cell (it keeps the best discrete rate there)."""
    cells: dict[tuple[int, int | None], list[TrialSteps]] = {}
    tried: dict[tuple[int, int | None], list[float]] = {}
    for b, recs in chain.items():
        for r in recs:
            tried.setdefault((b, r.seed), []).append(r.lr)
            if r.status == "reached" and r.steps_to_target:
                cells.setdefault((b, r.seed), []).append(
                    TrialSteps(batch_size=b, outcome="reached", steps=r.steps_to_target, seed=r.seed, lr=r.lr))
    fits = fit_across_rates(cells, tried)
    lrs = [f.lr for (b, _), f in fits.items() if b == batch_size and f.fitted and f.lr]
    return _round(_geo(lrs)) if lrs else None


def local_exponent(spec: StudySpec, history: Sequence[tuple[int, float | None]]) -> float:
    """The exponent that centres the next cell of a chain from ``history`` (its cells so far,
    ``(batch size, optimum handed on)``, from ``B_ref`` outward): with ``search.local_exponent`` and
    the last two cells' optima known, the slope of ``ln η`` against ``ln B`` between them, clamped
    to :data:`LOCAL_EXPONENT_RANGE`; else ``search.chain_exponent``."""
    if not spec.search.local_exponent or len(history) < 2:
        return spec.search.chain_exponent
    (b2, e2), (b1, e1) = history[-2:]
    if e1 is None or e2 is None or b1 == b2:
        return spec.search.chain_exponent
    lo, hi = LOCAL_EXPONENT_RANGE
    return min(max(math.log(e1 / e2) / math.log(b1 / b2), lo), hi)


def chain_centres(spec: StudySpec, recs_by_batch: Mapping[int, Sequence[TrialRecord]]) -> dict[int, float]:
    """The centre of every cell of one setting whose neighbour towards ``B_ref`` has settled
    (``{batch size: centre}``; the reference cell has none), from ``{batch size: the cell's records}``."""
    role_ref = "reference" if spec.target_losses is None else "trial"
    if spec.replicated_batch_sizes:  # replicates never feed the chain
        recs_by_batch = {b: split_replicates(spec, recs)[0] for b, recs in recs_by_batch.items()}
    sizes = list(spec.batch_sizes)
    at = sizes.index(spec.b_ref)
    out: dict[int, float] = {}
    middle = math.exp(sum(math.log(v) for v in spec.search.lrs) / len(spec.search.lrs))
    vertex = spec.search.chain_centre == "vertex"
    if role_ref == "trial":
        # Explicit targets: no reference runs; B_ref is centred on the grid's geometric middle.
        out[spec.b_ref] = _round(middle)
    for chain in (sizes[at + 1:], sizes[:at][::-1]):  # upwards, then downwards from B_ref
        prev_b, prev_centre = spec.b_ref, out.get(spec.b_ref)
        ref_recs = recs_by_batch.get(spec.b_ref, ())
        settled, best = settled_best(spec, ref_recs, role_ref, prev_centre)
        seen: dict[int, Sequence[TrialRecord]] = {}  # the chain's settled trial cells (vertex)
        if settled and vertex:
            if role_ref == "reference":
                best = loss_vertex(first_attempts(ref_recs)) or best
            else:
                seen[spec.b_ref] = first_attempts(ref_recs)
                best = steps_vertex(seen, spec.b_ref) or best
        history = [(spec.b_ref, best)]
        for b in chain:
            if not settled:
                break
            anchor = best if best is not None else prev_centre if prev_centre is not None else middle
            centre = out[b] = _round(anchor * (b / prev_b) ** local_exponent(spec, history))
            recs = recs_by_batch.get(b, ())
            settled, best = settled_best(spec, recs, "trial", centre, b)
            if settled and vertex:
                seen[b] = first_attempts(recs)
                best = steps_vertex(seen, b) or best
            history.append((b, best))
            prev_b, prev_centre = b, centre
    return out


def describe_chained(spec: StudySpec) -> list[str]:
    """The dry run's lines for a chained search: what the reference cell runs, how the other cells
    are centred and extended, and the trials that makes before any extension."""
    s = spec.search
    lrs = ", ".join(f"{v:g}" for v in sorted(s.lrs))
    above = [b for b in spec.batch_sizes if b > spec.b_ref]
    below = [b for b in spec.batch_sizes if b < spec.b_ref]
    order = []
    if above:
        order.append(f"up {spec.b_ref} → {' → '.join(str(b) for b in above)}")
    if below:
        order.append(f"down {spec.b_ref} → {' → '.join(str(b) for b in below[::-1])}")
    if spec.target_losses is not None:
        ref = f"B={spec.b_ref} is centred at the grid's geometric middle"
    elif s.reference_rates == "bracket":
        from cbscore.study.cell_rates import reference_base

        ref = (f"the reference cell B={spec.b_ref} runs {', '.join(f'{v:g}' for v in reference_base(spec))} "
               f"(around the middle of {lrs}; up to {s.lr_extensions} more past each edge)")
    else:
        ref = f"the reference cell B={spec.b_ref} runs the grid ({lrs}, up to {s.lr_extensions} more past each edge)"
    narrow = [b for b in spec.batch_sizes if is_narrow(spec, b)]
    lines_narrow = ([f"  narrow cells (B < {spec.bracket_floor}: {', '.join(str(b) for b in narrow)}) start with "
                     + ("2 rates c/√ratio, c·√ratio" if s.narrow_rates == 2 else "the centre alone")
                     + " instead (the trial count above counts 3)"] if narrow else [])
    anchor = "its neighbour's fitted optimum" if s.chain_centre == "vertex" else "its neighbour's best rate"
    lo, hi = LOCAL_EXPONENT_RANGE
    power = (f"(the slope of the last two cells, in [{lo:g}, {hi:g}]; {s.chain_exponent:g} for the first)"
             if s.local_exponent else f"{s.chain_exponent:g}")
    replicated = list(spec.replicated_batch_sizes)
    lines_replicates = ([f"  replicates: B = {', '.join(str(b) for b in replicated)} each run {s.replicates} more "
                         f"trial(s) at the cell's best rate once it settled, new training seed(s) "
                         f"{', '.join(str(v) for v in replicate_seeds(spec))} (counted above), read through the "
                         "two-way fit of ln S on batch size and seed"] if replicated else [])
    return [
        f"chained search: {ref}; every other cell runs 3 rates c/{s.bracket_ratio:g}, c, c·{s.bracket_ratio:g} "
        f"centred at c = ({anchor})·(B/B_neighbour)^{power}, each to its own crossing",
        f"  cells released outward from B_ref once the neighbour settled: {'; '.join(order) or 'none'}",
        f"  a rate past an edge only where the edge beats its inner neighbour by more than "
        f"{s.extension_gain:.0%} in steps to target, at most {s.max_extensions} per cell (the trial count above has none of them)",
        *lines_narrow,
        *lines_replicates,
    ]
