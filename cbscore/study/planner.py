"""The study planner: a pure function from (spec, trial records, now) to what happens next.

It never touches MLflow, Celery or Optuna, so it is easy to test and safe to re-run after any
failure (the runner in ``workers`` calls it at launch, after every trial and on a timer).

Order of work within a setting (DESIGN.md §1, "Target loss"):

1. The **reference cell** at ``B_ref`` runs every learning rate to D tokens. The best final
   held-out loss (averaged weights) among them is the setting's target (unless the spec gives
   targets explicitly).
2. The other cells run once the target is known, released in increasing batch size: a cell is
   released once the next smaller cell is *resolved* (a trial reached the target, or every trial
   ended), so its step cap can use what the smaller batch sizes already needed. With ``B_ref`` in
   the middle of the batch sizes this gives two chains that run side by side: upwards from
   ``B_ref``, and upwards from the smallest batch size.

Budgets that cannot bias B* (DESIGN.md §1; :func:`cell_budget_tokens`): with tuned
hyper-parameters, tokens to target ``E(B)`` grow with B and steps to target ``S(B)`` do not
(McCandlish et al. 2018, eqs. 2.11-2.12; Zhang et al. 2025, §2). So a cell below B_ref gets
``(1 + budget_margin)·D`` tokens and a cell above B_ref ``(1 + budget_margin)·min S(B' < B)``
steps, however many tokens that is. A cell censored at that cap is a lower bound, not a gap.

Savings that do not change the answer:

* in a cell, once a trial reached the target at S steps, trials still above it at an evaluation
  past ``S·(1 + prune_margin)`` stop as ``pruned`` (and later trials of the cell start with that
  cap). Only evaluated steps count: a trial may have crossed since its last evaluation;
* a cell is ``skipped`` once a smaller batch size ended with every trial censored after at
  least this cell's token budget: tokens to target ``E(B) = B·T·S(B)`` never fall as B grows
  (McCandlish et al. 2018, eq. 2.12: ``E(B) = E_min·(1 + B/B_noise)``), so the cell could only
  end censored too, and censored points never enter ``S(B)`` or the fits (DESIGN.md §1).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from cbscore.analysis import first_crossing, window_rates
from cbscore.study.spec import Setting, StudySpec
from cbscore.study.trials import TERMINAL, TrialRecord, TrialSpec, lr_tag


@dataclass(frozen=True, kw_only=True)
class AskRequest:
    """Ask the cell's Optuna sampler for ``count`` more trials, then build each with
    :func:`trial_from_ask`."""

    cell_id: str
    """Cell id; also the name of the cell's Optuna study (prefixed by the study name)."""
    setting_id: str
    """Setting id."""
    batch_size: int
    """Batch size in sequences."""
    role: str
    """``reference`` or ``trial``."""
    count: int
    """Trials to ask for now."""
    first_number: int
    """Number of the first new trial (trials of a cell are numbered 0, 1, ...)."""
    max_steps: int | None
    """Step cap for the new trials."""
    target_loss: float | None
    """Target for the new trials (``None`` in the reference cell)."""


@dataclass(frozen=True, kw_only=True)
class CellState:
    """Progress of one cell ``(setting, batch size)``."""

    cell_id: str
    setting_id: str
    batch_size: int
    role: str
    state: str
    """``waiting`` (not released), ``running``, ``resolved`` (S known, trials still ending), ``done``,
    or ``skipped`` (it could not reach the target within its budget: nothing runs)."""
    n_trials: int
    """Trials the cell will run in all."""
    counts: Mapping[str, int]
    """Trials by status."""
    steps_to_target: float | None
    """Best (minimum) steps to target of the cell so far."""
    max_steps: int | None
    """Step cap of the cell's trials."""
    rates_note: str = ""
    """With ``search.predict``: the predicted optimum and which allowed rates the cell runs and why
    (:func:`cbscore.study.lr_predict.explain_rates`)."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What the runner should do now."""

    start: tuple[TrialSpec, ...] = ()
    """Grid trials to enqueue now (not yet in the records)."""
    ask: tuple[AskRequest, ...] = ()
    """Optuna cells that need more trials now."""
    stop: tuple[tuple[str, str], ...] = ()
    """``(trial_id, reason)`` of running trials to stop (reason ``pruned``)."""
    lost: tuple[str, ...] = ()
    """Running trials whose heartbeat went stale: enqueue again (attempt + 1, resume)."""
    fail: tuple[str, ...] = ()
    """Stale trials already at the attempt cap: end them ``failed``."""
    targets: Mapping[str, float] = field(default_factory=dict)
    """Target loss per setting id, where known."""
    cells: tuple[CellState, ...] = ()
    """Every cell's progress, for status pages."""
    errors: tuple[str, ...] = ()
    """Settings that cannot go on, with the reason."""
    done: bool = False
    """Every cell is done (or its setting failed): nothing more will run."""


def cell_id(setting_id: str, batch_size: int) -> str:
    return f"{setting_id}.b{batch_size}"


def _trial_id(spec: StudySpec, setting: Setting, batch_size: int, tag: str, seed: int) -> str:
    return f"{spec.name}.{setting.setting_id}.b{batch_size}.{tag}.s{seed}"


def cell_recipe(spec: StudySpec, setting: Setting, batch_size: int) -> tuple[float, tuple[float, ...]]:
    """``(β2, τ tracked)`` of the trials of one cell: the spec's own ``beta2``/``ewa_taus`` where it
    gives them, else :func:`cbscore.recipe.study_recipe` under the spec's ``recipe`` rule."""
    from cbscore.recipe import spec_recipe

    recipe = spec_recipe(spec, batch_size=batch_size, d_tokens=setting.tokens)
    beta2 = recipe.beta2 if spec.beta2 is None else float(spec.beta2)
    taus = recipe.ewa_taus if spec.ewa_taus is None else tuple(spec.ewa_taus)
    return beta2, taus


def build_train_config(spec: StudySpec, setting: Setting, *, batch_size: int, lr: float, seed: int,
                       max_tokens: int, max_steps: int | None, target_loss: float | None) -> dict:
    """The trainer's config of one trial, as ``TrainConfig.to_dict()`` (validated by the trainer)."""
    from cbscore.train_config import TrainConfig

    beta2, taus = cell_recipe(spec, setting, batch_size)
    local = batch_size // spec.devices_per_trial  # sequences per step on one device
    config = TrainConfig.from_dict({
        "model": setting.model,
        "batch_size": batch_size,
        "devices": spec.devices_per_trial,
        # Gradient accumulation above the micro-batch (the same update, less memory per pass).
        "micro_batch_size": spec.micro_batch_size if spec.micro_batch_size and local > spec.micro_batch_size
        else None,
        # An extra split of the same batch that measures the gradient noise scale (cbscore.gns).
        "gns_micro_batch_size": spec.gns_micro_batch_size if batch_size in spec.gns_batch_sizes() else None,
        # Its averages' half-life: 10% of the setting's D at every batch size, in tokens.
        "gns_half_life_tokens": max(1, round(0.1 * setting.tokens)),
        "context_tokens": spec.context_tokens,
        "lr": lr,
        "max_tokens": max_tokens,
        "max_steps": max_steps,
        # Warm-up fixed in tokens: 25% of the setting's reference budget (paper §3.1).
        "warmup_tokens": int(spec.warmup_fraction * setting.tokens),
        "schedule": spec.schedule,
        "beta1": spec.beta1,
        "beta2": beta2,
        "ewa_taus": list(taus),
        "weight_decay": spec.weight_decay,
        "grad_clip": spec.grad_clip,
        "target_loss": target_loss,
        "seed": seed,
        "data": dict(spec.data),
        "allow_repeat": spec.allow_repeat,
        "eval_windows": spec.eval_windows,
        "max_eval_fraction": spec.max_eval_fraction,
    })
    return config.to_dict()


def cell_budget_tokens(spec: StudySpec, setting: Setting, batch_size: int, role: str,
                       max_steps: int | None) -> int:
    """Token budget of a trial of cell ``(setting, batch_size)`` (DESIGN.md §1, "Budgets that cannot
    bias B*").

    * the reference cell: ``(1 + budget_margin)·D`` when it sets the target (the target is the
      cell's fitted loss at D, and its own runs must be able to cross it after D: S(B_ref) is
      measured like every other cell's, DESIGN.md §1), else D;
    * below B_ref (targets from reference runs): ``(1 + budget_margin)·D``: tokens to target
      ``E(B) = E_min·(1 + B/B_noise)`` grow with B (McCandlish et al. 2018, eq. 2.12), so no
      smaller batch size needs more than B_ref's D;
    * above B_ref: the step cap ``max_steps`` (``(1 + budget_margin)·S`` of the smaller batch
      sizes) *is* the budget: steps to target ``S(B) = S_min·(1 + B_noise/B)`` never grow with B
      (eq. 2.11), however many tokens that is. A fixed multiple of D would cut off exactly the
      large-B points that pin S_min;
    * otherwise (explicit targets, or no smaller S known yet): ``budget_multiple·D``.
    """
    if role == "reference":
        return int((1 + spec.budget_margin) * setting.tokens) if spec.target_losses is None else setting.tokens
    if batch_size > spec.b_ref and max_steps is not None:
        return max_steps * batch_size * spec.context_tokens
    if batch_size < spec.b_ref and spec.target_losses is None:
        return int((1 + spec.budget_margin) * setting.tokens)
    return int(spec.budget_multiple * setting.tokens)


def _make_trial(spec: StudySpec, setting: Setting, *, batch_size: int, role: str, lr: float, seed: int,
                tag: str, max_steps: int | None, target_loss: float | None,
                search_number: int | None = None, budget_factor: float = 1.0) -> TrialSpec:
    max_tokens = cell_budget_tokens(spec, setting, batch_size, role, max_steps)
    if budget_factor != 1.0 and not (batch_size > spec.b_ref and max_steps is not None):
        max_tokens = int(budget_factor * max_tokens)  # a re-run of a censored trial (its step cap grew already)
    return TrialSpec(
        trial_id=_trial_id(spec, setting, batch_size, tag, seed),
        study=spec.name,
        setting_id=setting.setting_id,
        cell_id=cell_id(setting.setting_id, batch_size),
        role=role,
        model=setting.model,
        n_params=setting.n_params,
        setting_tokens=setting.tokens,
        batch_size=batch_size,
        lr=float(lr),
        seed=seed,
        max_tokens=max_tokens,
        max_steps=max_steps,
        target_loss=target_loss,
        search_number=search_number,
        train_config=build_train_config(spec, setting, batch_size=batch_size, lr=lr, seed=seed,
                                        max_tokens=max_tokens, max_steps=max_steps, target_loss=target_loss),
    )


def trial_from_ask(spec: StudySpec, ask: AskRequest, *, lr: float, number: int) -> TrialSpec:
    """Build the TrialSpec of an Optuna-proposed learning rate for ``ask``'s cell."""
    setting = {s.setting_id: s for s in spec.resolve_settings()}[ask.setting_id]
    seed = spec.seeds[number % len(spec.seeds)]
    return _make_trial(spec, setting, batch_size=ask.batch_size, role=ask.role, lr=lr, seed=seed,
                       tag=f"o{number}", max_steps=ask.max_steps, target_loss=ask.target_loss,
                       search_number=number)


def grid_trials(spec: StudySpec) -> int:
    """Number of trials of the study (every cell × hyper-parameter × seed for a grid)."""
    return len(spec.resolve_settings()) * len(spec.batch_sizes) * _cell_size(spec)


def setting_grid_tokens(spec: StudySpec, setting: Setting) -> int:
    """Tokens one setting spends if every trial ran its whole budget (:func:`cell_budget_tokens`),
    before anything is measured: above B_ref the step cap is taken as ``(1 + budget_margin)·S(B_ref)``
    with ``S(B_ref) = D/(B_ref·T)``, the most any cell above B_ref can get when S does not grow."""
    return _cell_size(spec) * sum(planned_budget(spec, setting, b)[2] for b in spec.batch_sizes)


def planned_budget(spec: StudySpec, setting: Setting, batch_size: int) -> tuple[str, int | None, int]:
    """``(role, step cap, tokens)`` of a cell's trials as planned before anything is measured: the
    largest budget :func:`cell_budget_tokens` can give it (above B_ref, a cap of
    ``(1 + budget_margin)·D/(B_ref·T)`` steps, what S(B_ref) is by construction)."""
    role = "reference" if (batch_size == spec.b_ref and spec.target_losses is None) else "trial"
    cap = None
    if batch_size > spec.b_ref and spec.target_losses is None:
        ref_steps = setting.tokens // (spec.b_ref * spec.context_tokens)
        cap = int(math.ceil((1 + spec.budget_margin) * ref_steps))
    return role, cap, cell_budget_tokens(spec, setting, batch_size, role, cap)


def grid_tokens(spec: StudySpec) -> int:
    """Tokens the same study would spend at fixed budgets: every trial runs its whole budget."""
    return sum(setting_grid_tokens(spec, s) for s in spec.resolve_settings())


def spent_tokens(records: Iterable[TrialRecord]) -> int:
    return sum(r.tokens for r in records)


#: Crossings of ended trials read off their evaluations, by (trial, its state, target): the planner
#: asks again at every call, and an ended record never changes.
_CROSSINGS: dict[tuple, float | None] = {}


def _crossing(record: TrialRecord, target: float) -> float | None:
    if record.status == "reached" and record.steps_to_target is not None:
        return record.steps_to_target
    if record.status in ("diverged", "failed") or not record.eval_steps:
        return None
    if not record.terminal:
        return first_crossing(record.eval_steps, record.eval_losses, target)
    key = (record.trial_id, record.status, record.last_step, len(record.eval_steps), record.eval_losses[-1], target)
    if key not in _CROSSINGS:
        if len(_CROSSINGS) >= 100_000:
            _CROSSINGS.clear()
        _CROSSINGS[key] = first_crossing(record.eval_steps, record.eval_losses, target)
    return _CROSSINGS[key]


def _by_cell(records: Iterable[TrialRecord]) -> dict[str, list[TrialRecord]]:
    by_cell: dict[str, list[TrialRecord]] = {}
    for r in records:
        by_cell.setdefault(r.cell_id, []).append(r)
    return by_cell


def setting_targets(spec: StudySpec, records: Sequence[TrialRecord], *,
                    by_cell: Mapping[str, list[TrialRecord]] | None = None) -> tuple[dict[str, float], list[str]]:
    """The target loss of every setting that has one, and why the others have none.

    The spec's explicit losses when it gives them; otherwise, once every reference trial at B_ref
    has ended, :func:`cbscore.analysis.reference_target` of the whole reference cell: each run's
    held-out loss (EWA weights, best τ) at D read off a local fit of its evaluations, the best over
    learning rates per seed from a fit across rates, the mean over seeds (DESIGN.md §1, "Target
    loss"). Not the best run's own final loss (a minimum over noisy numbers, biased low, that pins
    ``S(B_ref)`` to one lucky run): ``S(B_ref)`` is then measured by the crossing rule like any other
    cell's, and the reference runs may cross after D.
    """
    from cbscore.errors import FitError

    targets: dict[str, float] = {}
    errors: list[str] = []
    # A predicting search runs what its cell asks for (plan() holds the target while it may add one).
    n_ref = 1 if (spec.search.kind == "grid" and spec.search.predict) else _cell_size(spec)
    by_cell = _by_cell(records) if by_cell is None else by_cell  # (plan passes the one it built)
    for setting in spec.resolve_settings():
        if spec.target_losses is not None:
            targets[setting.setting_id] = float(spec.target_losses[setting.setting_id])
            continue
        if spec.pinned_targets and setting.setting_id in spec.pinned_targets:  # kept by an extension
            targets[setting.setting_id] = float(spec.pinned_targets[setting.setting_id])
            continue
        # The cell's own runs to (1 + margin)·D; a re-run (a neighbour run on to the target) never
        # moves the target it was run against.
        ref_records = [r for r in by_cell.get(cell_id(setting.setting_id, spec.b_ref), [])
                       if not r.trial_id.endswith("." + RERUN_TAG)]
        if len(ref_records) < n_ref or not all(r.terminal for r in ref_records):
            continue
        ended = tuple(r for r in ref_records if r.status in ("finished", "reached", "censored"))
        try:
            ref_steps = setting.tokens / (spec.b_ref * spec.context_tokens)
            # Ended records never change: the planner asks at every call, the answer is kept.
            key = (tuple((r.trial_id, r.status, r.last_step, r.final_eval_loss, len(r.eval_steps)) for r in ended),
                   ref_steps)
            if key not in _TARGETS:
                histories = tuple(h for h in (reference_history(r) for r in ended) if h)
                if len(_TARGETS) >= 256:
                    _TARGETS.clear()
                _TARGETS[key] = _cached_target(histories, ref_steps)
            targets[setting.setting_id] = _TARGETS[key]
        except FitError as exc:
            errors.append(f"setting {setting.setting_id!r}: no reference run at B_ref={spec.b_ref} "
                          f"gives a loss at D, so there is no target loss ({exc})")
    return targets, errors


_TARGETS: dict[tuple, float] = {}


def _cached_target(histories: tuple, ref_steps: float) -> float:
    """:func:`cbscore.analysis.reference_target` of ended reference runs."""
    from cbscore.analysis import reference_target

    return reference_target(list(histories), ref_steps).value


def reference_history(record: TrialRecord):
    """The :class:`cbscore.analysis.EvalHistory` of a trial record (its evaluations of the best τ;
    a record without them stands on its final loss at its last step); ``None`` if it has neither."""
    from cbscore.analysis import EvalHistory

    steps, losses = record.eval_steps, record.eval_losses
    if not steps:
        if record.final_eval_loss is None or not record.last_step:
            return None
        steps, losses = (float(record.last_step),), (record.final_eval_loss,)
    return EvalHistory(batch_size=record.batch_size, steps=steps, losses=losses, lr=record.lr,
                       seed=record.seed, outcome=record.status, role=record.role)


def cell_rates(spec: StudySpec, recs: Sequence[TrialRecord], role: str,
               predicted: float | None = None) -> tuple[tuple[float, ...], bool]:
    """The learning rates a grid cell runs, and whether it is still deciding on more.

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
    recs = [r for r in recs if not r.trial_id.endswith("." + RERUN_TAG)]  # re-runs add no rate
    if spec.search.kind == "grid" and spec.search.predict:
        return _predicted_cell_rates(spec, recs, role, predicted)
    base = sorted(spec.search.lrs)
    rates = sorted(set(base) | {r.lr for r in recs})
    complete = len(recs) >= len(rates) * len(spec.seeds) and all(r.terminal for r in recs)
    if spec.search.kind != "grid" or spec.search.lr_extensions == 0 or not recs or not complete:
        return tuple(rates), not complete
    below = sum(1 for v in rates if v < base[0])
    above = sum(1 for v in rates if v > base[-1])
    low_ratio = base[1] / base[0] if len(base) > 1 else 2.0
    high_ratio = base[-1] / base[-2] if len(base) > 1 else 2.0
    extra: set[float] = set()
    for best_lr in (_seed_best_rates(recs, role) if len(rates) >= 2 else ()):
        if best_lr == rates[0] and below < spec.search.lr_extensions:
            extra.add(float(f"{rates[0] / low_ratio:.3g}"))
        if best_lr == rates[-1] and above < spec.search.lr_extensions:
            extra.add(float(f"{rates[-1] * high_ratio:.3g}"))
    if extra:
        return tuple(sorted(set(rates) | extra)), True
    return tuple(rates), False


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
    """:func:`cell_rates` of a predicting search (``search.predict``, :mod:`cbscore.study.lr_predict`)."""
    from cbscore.study.lr_predict import allowed_rates, first_rates, predict_lr, rates_to_run

    allowed = allowed_rates(spec.search.lrs, spec.search.lr_extensions)
    if not recs:
        guess = predicted if predicted is not None else predict_lr(spec.search.lrs, {}, spec.b_ref)
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


def setting_best_rates(spec: StudySpec, setting: Setting,
                       by_cell: Mapping[str, Sequence[TrialRecord]]) -> dict[int, float]:
    """``{batch size: best rate}`` of the setting's cells whose trials all ended with a best (the
    geometric mean over seeds): what :func:`cbscore.study.lr_predict.predict_lr` fits."""
    out: dict[int, float] = {}
    for b in spec.batch_sizes:
        recs = [r for r in by_cell.get(cell_id(setting.setting_id, b), [])
                if not r.trial_id.endswith("." + RERUN_TAG)]
        if not recs or not all(r.terminal for r in recs):
            continue
        role = "reference" if (b == spec.b_ref and spec.target_losses is None) else "trial"
        best = _seed_optima(recs, role)
        if best:
            out[b] = math.exp(sum(math.log(v) for v in best) / len(best))
    return out


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


def _seed_best(recs: Iterable[TrialRecord], target: float | None) -> dict[int, float]:
    """Fewest steps to target per seed among ``recs``."""
    out: dict[int, float] = {}
    if target is None:
        return out
    for r in recs:
        c = _crossing(r, target)
        if c is not None:
            out[r.seed] = min(out.get(r.seed, math.inf), c)
    return out


def _best_neighbours(recs: Sequence[TrialRecord], target: float | None,
                     rates: Sequence[float] = ()) -> set[tuple[int, float]]:
    """``(seed, rate)`` of each seed's best rate so far and the rates next to it in the cell: never
    pruned, since ``S(B)`` is read off a fit through them (:func:`cbscore.analysis.measure_points`,
    ``window_rates``), and the full grid would have them."""
    out: set[tuple[int, float]] = set()
    by_seed: dict[int, list[TrialRecord]] = {}
    for r in recs:
        by_seed.setdefault(r.seed, []).append(r)
    for seed, mine in by_seed.items():
        scored = [(c, r.lr) for r in mine if (c := _crossing(r, target)) is not None] if target is not None else []
        if not scored:
            continue
        tried = sorted({r.lr for r in mine} | set(rates))
        at = tried.index(min(scored)[1])
        out |= {(seed, lr) for lr in window_rates(tried, tried[at])}
    return out


#: A cell censored at its step cap or token budget, or a censored neighbour of a cell's best rate,
#: is run once more at this multiple of its cap or token budget.
RERUN_CAP_FACTOR = 2.0
#: Suffix of the trial id of such a second run.
RERUN_TAG = "x2"


@dataclass(frozen=True)
class _CellPlan:
    """What :func:`plan` decides for one cell, and the chain state it hands to the next batch size."""

    cell: CellState
    start: tuple = ()
    ask: tuple = ()
    stop: tuple = ()
    incomplete: bool = False
    skipped: bool = False
    prev_resolved: bool = True
    prev_best: float | None = None
    at_least: float = 0.0


#: Cell plans of one spec by the cell's inputs: a cell whose records, target and chain state did not
#: change since the last call plans the same (the simulator calls ``plan`` at every event with one
#: spec). Kept for the last spec seen only, so a runner that rebuilds its specs holds no more.
_CELL_PLANS: dict[tuple, _CellPlan] = {}
_CELL_PLANS_SPEC: list[StudySpec | None] = [None]


def _record_key(r: TrialRecord, lost_set: frozenset) -> tuple:
    """Everything of a record that :func:`_plan_cell` reads (an ended record's evaluations never change)."""
    return (r.trial_id, r.status, r.attempt, r.steps_to_target, r.last_step, r.tokens, r.max_steps,
            r.final_eval_loss, len(r.eval_steps), r.eval_steps[-1] if r.eval_steps else None,
            r.eval_losses[-1] if r.eval_losses else None, r.trial_id in lost_set)


def _plan_cell(spec: StudySpec, setting: Setting, b: int, recs: Sequence[TrialRecord], target: float | None,
               prev_resolved: bool, prev_best: float | None, at_least: float, setting_failed: bool,
               lost_set: frozenset, predicted: float | None = None) -> _CellPlan:
    """One cell of :func:`plan`: its state, the trials to start, ask for or stop, and the chain state."""
    cid = cell_id(setting.setting_id, b)
    margin = spec.prune_margin
    grid = spec.search.kind == "grid"
    start: list[TrialSpec] = []
    asks: list[AskRequest] = []
    stop: list[tuple[str, str]] = []
    role = "reference" if (b == spec.b_ref and spec.target_losses is None) else "trial"
    cell_target = None if role == "reference" else target
    # Every cell's crossings of the target, the reference cell's too (S(B_ref) is measured
    # like any other, and caps the cell above it).
    seed_best = _seed_best(recs, target)
    best = min(seed_best.values()) if seed_best else None
    if grid:
        rates, pending = cell_rates(spec, recs, role, predicted if spec.search.predict else None)
        n_cell = len(rates) * len(spec.seeds)
    else:
        rates, n_cell = (), _cell_size(spec)
        pending = not (len(recs) >= n_cell and all(r.terminal for r in recs))
    first = [r for r in recs if not r.trial_id.endswith("." + RERUN_TAG)]

    released = (role == "reference") or (target is not None and prev_resolved)
    if setting_failed:
        released = False
    cap = cap_smaller = None
    if role == "trial":
        # Steps to target do not grow with B: a cell never needs more than (1 + margin)·S of
        # the next smaller measured batch size (the prune margin once its own best is known).
        cands = [(1 + spec.budget_margin) * prev_best] if prev_best is not None else []
        if cands:
            cap_smaller = int(math.ceil(min(cands) - 1e-9))
        if best is not None:
            cands.append((1 + margin) * best)
        if cands:
            cap = int(math.ceil(min(cands) - 1e-9))  # 1.1·200 is 220.00000000000003
    if released and role == "trial" and not recs and not setting_failed and at_least > 0:
        budget_tokens = cell_budget_tokens(spec, setting, b, role, cap)
        steps = budget_tokens // (b * spec.context_tokens)  # TrainConfig.total_steps
        trainable = min(steps, cap if cap is not None else steps) * b * spec.context_tokens
        if at_least >= trainable:
            skipped = CellState(cell_id=cid, setting_id=setting.setting_id, batch_size=b, role=role,
                                state="skipped", n_trials=n_cell, counts={}, steps_to_target=None,
                                max_steps=cap)
            # Resolved for the chain; the bound carries over unchanged.
            return _CellPlan(cell=skipped, skipped=True, prev_resolved=prev_resolved, prev_best=prev_best,
                             at_least=at_least)
    # A cell whose every rate ended censored at its cap or budget (none reached) is run once
    # more at twice it before it counts as censored (issue 19: a cap from a noisy smaller
    # cell, or a budget that noise pushed the cell past, can cut the curve).
    # So is a censored or pruned neighbour of a seed's best rate: S(B) is read off a fit through
    # the best rate and its neighbours (cbscore.analysis.measure_points), which a budget or an
    # early prune must not cut.
    rerun: list[TrialRecord] = []
    first_done = len(first) >= n_cell and all(r.terminal for r in first) and not pending
    if grid and role == "trial" and first_done and target is not None:
        # (Trials stopped at equal tokens trailed one of these: their projections need its crossing.)
        ended_short = ("censored", "diverged", "pruned") if spec.prune_at_equal_tokens else ("censored", "diverged")
        if best is None and all(r.status in ended_short for r in first):
            rerun = [r for r in first if r.status == "censored"]
        else:
            # A neighbour pruned before the best settled (a later rate won) is run again too.
            near = _best_neighbours(first, target, rates)
            # (Stopped at equal tokens, a neighbour's steps are projected from its curve: no re-run.)
            again = ("censored",) if spec.prune_at_equal_tokens else ("censored", "pruned")
            rerun = [r for r in first if r.status in again and (r.seed, r.lr) in near]
    elif grid and role == "reference" and first_done and target is not None and best is not None:
        # The reference runs train (1 + margin)·D without a target; a neighbour of the best
        # rate that had not crossed the cell's target by then is run again to twice that,
        # stopping at the target, so that S(B_ref) is read off the same window as any cell's
        # (left out, the window keeps only the lucky neighbours: S(B_ref) 3% low at σ = 0.1).
        near = _best_neighbours(first, target, rates)
        rerun = [r for r in first if r.status in ("finished", "censored") and (r.seed, r.lr) in near
                 and _crossing(r, target) is None]
    n_cell += len(rerun)
    complete = (len(recs) >= n_cell and all(r.terminal for r in recs) and not pending)
    if (best is None and complete and target is not None
            and all(r.status in ("censored", "diverged") for r in recs)):
        # Every learning rate either diverged or trained this many tokens without reaching the
        # target: E(B) is above the fewest over rates of the most each rate trained.
        trained: dict[tuple[float, int], int] = {}
        for r in recs:
            if r.status == "censored" and r.tokens > 0:
                trained[(r.lr, r.seed)] = max(trained.get((r.lr, r.seed), 0), r.tokens)
        if trained:
            at_least = max(at_least, float(min(trained.values())))

    counts: dict[str, int] = {}
    for r in recs:
        counts[r.status] = counts.get(r.status, 0) + 1
    if released:
        present = {r.trial_id for r in recs}
        if grid:
            keep: set[tuple[int, float]] | None = None
            # Nearest the predicted optimum first: trials stopped at equal tokens are compared
            # with the leader, which should be running before them.
            order = (sorted(rates, key=lambda v: abs(math.log(v / predicted))) if predicted is not None
                     else rates)
            for lr in order:
                for seed in spec.seeds:
                    tid = _trial_id(spec, setting, b, lr_tag(lr), seed)
                    if tid not in present:
                        if keep is None:
                            keep = (_best_neighbours(recs, target, rates) if (role == "trial" and seed_best)
                                    else set())
                        # The best rate's neighbours are never cut at the prune margin.
                        own_cap = cap_smaller if (seed, lr) in keep else cap
                        start.append(_make_trial(spec, setting, batch_size=b, role=role, lr=lr, seed=seed,
                                                 tag=lr_tag(lr), max_steps=own_cap, target_loss=cell_target))
            for r in rerun:
                if r.trial_id + "." + RERUN_TAG not in present:
                    larger = None if r.max_steps is None else int(math.ceil(RERUN_CAP_FACTOR * r.max_steps))
                    t = _make_trial(spec, setting, batch_size=b, role=role, lr=r.lr, seed=r.seed,
                                    tag=lr_tag(r.lr), max_steps=larger, target_loss=target,
                                    budget_factor=RERUN_CAP_FACTOR)
                    start.append(dataclasses.replace(t, trial_id=r.trial_id + "." + RERUN_TAG))
        else:
            active = sum(1 for r in recs if not r.terminal)
            count = min(n_cell - len(recs), spec.search.parallel_per_cell - active)
            if count > 0:
                asks.append(AskRequest(cell_id=cid, setting_id=setting.setting_id, batch_size=b, role=role,
                                       count=count, first_number=len(recs), max_steps=cap,
                                       target_loss=cell_target))
        # Prune: trials still above the target at an *evaluation* well past the best crossing
        # of their own seed (seeds are repeats: one seed's luck never stops another's trials).
        # Steps trained since the last evaluation say nothing: the trial may have crossed.
        if role == "trial" and seed_best and any(r.status == "running" for r in recs):
            keep = _best_neighbours(recs, target, rates if grid else ())
            for r in recs:
                own = seed_best.get(r.seed)
                if own is None or (r.seed, r.lr) in keep:
                    continue
                last_eval = r.eval_steps[-1] if r.eval_steps else 0.0
                if r.status == "running" and last_eval > (1 + margin) * own and r.trial_id not in lost_set:
                    stop.append((r.trial_id, "pruned"))
        # Stop at equal tokens: a trial that trails the cell's leader at its own step by more than
        # the margin, before the best has crossed (cbscore.study.equal_tokens); never the fit's
        # window around the best crossing so far.
        if role == "trial" and spec.prune_at_equal_tokens and any(r.status == "running" for r in recs):
            from cbscore.study.equal_tokens import equal_token_stops

            from cbscore.study.equal_tokens import projectable_stops

            keep = _best_neighbours(recs, target, rates if grid else ()) if seed_best else set()
            stopping = {tid for tid, _ in stop}
            for tid in equal_token_stops(recs, margin_nats=spec.equal_token_margin, protected=keep,
                                         skip=lost_set | stopping):
                stop.append((tid, "pruned"))
                stopping.add(tid)
            # The fit's own rates: stopped once their steps to target can be projected.
            expected = best if best is not None else prev_best
            if expected is None:
                steps_budget = cell_budget_tokens(spec, setting, b, role, cap) // (b * spec.context_tokens)
                expected = steps_budget / (1 + spec.budget_margin)
            for tid in projectable_stops(recs, fraction=spec.equal_token_fraction, expected_steps=expected,
                                         skip=lost_set | stopping):
                stop.append((tid, "pruned"))
    resolved = complete or (role == "trial" and best is not None)
    if role == "reference":  # S(B_ref) is known once the first runs ended; re-runs refine the fit
        resolved = (complete or first_done) and target is not None
    state = ("done" if complete else "resolved" if resolved else "running" if released else "waiting")
    cell = CellState(cell_id=cid, setting_id=setting.setting_id, batch_size=b, role=role, state=state,
                     n_trials=n_cell, counts=counts, steps_to_target=best, max_steps=cap,
                     rates_note=_rates_note(spec, recs, role, rates, predicted) if grid and spec.search.predict else "")
    return _CellPlan(cell=cell, start=tuple(start), ask=tuple(asks), stop=tuple(stop),
                     incomplete=not complete and not setting_failed, prev_resolved=resolved,
                     prev_best=best if best is not None else prev_best, at_least=at_least)


def plan(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *,
         stale_after_s: float = 120.0, max_attempts: int = 3) -> Plan:
    """Decide what to run, stop, re-run or fail next. Pure: same inputs, same plan."""
    by_cell = _by_cell(records)
    if _CELL_PLANS_SPEC[0] is not spec:
        _CELL_PLANS.clear()
        _CELL_PLANS_SPEC[0] = spec
    start: list[TrialSpec] = []
    asks: list[AskRequest] = []
    stop: list[tuple[str, str]] = []
    cells: list[CellState] = []
    errors: list[str] = []
    all_done = True
    grid = spec.search.kind == "grid"

    # Stale heartbeats: lost trials run again from their checkpoints, up to the attempt cap.
    lost, fail = [], []
    for r in records:
        if r.status == "running" and r.heartbeat_s is not None and now_s - r.heartbeat_s > stale_after_s:
            (lost if r.attempt < max_attempts else fail).append(r.trial_id)
        elif r.status == "lost":
            (lost if r.attempt < max_attempts else fail).append(r.trial_id)

    lost_set = frozenset(lost)
    targets, target_errors = setting_targets(spec, records, by_cell=by_cell)
    errors.extend(target_errors)
    # Each setting's measured best rates, once per call, where a rule predicts from them.
    best_rates = ({s.setting_id: setting_best_rates(spec, s, by_cell) for s in spec.resolve_settings()}
                  if grid and (spec.search.predict or spec.prune_at_equal_tokens) else None)
    if grid and spec.target_losses is None:
        # A reference cell that may still add a learning rate has no target yet: the target comes
        # from the whole cell (DESIGN.md §1), so every cell is measured against the same one.
        for setting in spec.resolve_settings():
            ref = by_cell.get(cell_id(setting.setting_id, spec.b_ref), [])
            guess = _cell_prediction(spec, setting.setting_id, best_rates, spec.b_ref) if best_rates else None
            if cell_rates(spec, ref, "reference", guess)[1]:
                targets.pop(setting.setting_id, None)
    for setting in spec.resolve_settings():
        target = targets.get(setting.setting_id)

        prev_resolved = True
        # Fewest steps to target of the nearest smaller batch size that has one (its own
        # measurement: a running minimum over many noisy cells is biased low, issue 19).
        prev_best: float | None = None
        # A lower bound on tokens to target from the smaller batch sizes: E(B) > at_least.
        at_least = 0.0
        setting_failed = any(e.startswith(f"setting {setting.setting_id!r}") for e in errors)
        for b in spec.batch_sizes:
            recs = by_cell.get(cell_id(setting.setting_id, b), [])
            predicted = _cell_prediction(spec, setting.setting_id, best_rates, b) if best_rates else None
            key = (setting.setting_id, b, target, prev_resolved, prev_best, at_least, setting_failed, predicted,
                   tuple(_record_key(r, lost_set) for r in recs))
            out = _CELL_PLANS.get(key)
            if out is None:
                out = _plan_cell(spec, setting, b, recs, target, prev_resolved, prev_best, at_least,
                                 setting_failed, lost_set, predicted)
                if len(_CELL_PLANS) >= 20_000:
                    _CELL_PLANS.clear()
                _CELL_PLANS[key] = out
            cells.append(out.cell)
            if out.skipped:
                continue  # resolved for the chain; the bound carries over unchanged
            start.extend(out.start)
            asks.extend(out.ask)
            stop.extend(out.stop)
            if out.incomplete:
                all_done = False
            prev_resolved, prev_best, at_least = out.prev_resolved, out.prev_best, out.at_least

    return Plan(start=tuple(start), ask=tuple(asks), stop=tuple(stop), lost=tuple(lost), fail=tuple(fail),
                targets=targets, cells=tuple(cells), errors=tuple(errors),
                done=all_done and not lost)


def _rates_note(spec: StudySpec, recs: Sequence[TrialRecord], role: str, rates: Sequence[float],
                predicted: float | None) -> str:
    """Which allowed rates a predicting cell runs, and why (for status pages and reports)."""
    from cbscore.study.lr_predict import allowed_rates, explain_rates

    first = [r for r in recs if not r.trial_id.endswith("." + RERUN_TAG)]
    return explain_rates(allowed_rates(spec.search.lrs, spec.search.lr_extensions), rates, predicted,
                         _seed_best_rates(first, role) if first and all(r.terminal for r in first) else [])


def _cell_prediction(spec: StudySpec, setting_id: str, best_rates: Mapping[str, Mapping[int, float]],
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
    return predict_lr(spec.search.lrs, measured, batch_size)


def skipped_trials(p: Plan) -> int:
    """Trials the plan will never run because their cells are ``skipped``."""
    return sum(c.n_trials for c in p.cells if c.state == "skipped")


def skipped_cells(p: Plan) -> dict[str, tuple[int, ...]]:
    """Per setting, the batch sizes of its ``skipped`` cells: the planner will never run them (the
    fit's notes name them; a steps table alone cannot say so)."""
    out: dict[str, list[int]] = {}
    for c in p.cells:
        if c.state == "skipped":
            out.setdefault(c.setting_id, []).append(c.batch_size)
    return {setting: tuple(sizes) for setting, sizes in out.items()}


def status_counts(records: Iterable[TrialRecord], p: Plan) -> dict[str, int]:
    """Trials by status, plus ``skipped``: the trials of skipped cells (they never run, and count
    as ended in every progress figure)."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    skipped = skipped_trials(p)
    if skipped:
        counts["skipped"] = skipped
    return counts


def ended_trials(counts: Mapping[str, int]) -> int:
    """Trials with an outcome in ``counts`` (:func:`status_counts`), skipped ones included."""
    return sum(v for k, v in counts.items() if k in TERMINAL or k == "skipped")


def _cell_size(spec: StudySpec) -> int:
    if spec.search.kind == "grid":
        return len(spec.search.lrs) * len(spec.seeds)
    return spec.search.n_trials
