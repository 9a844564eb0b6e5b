"""One cell of :func:`cbscore.study.planner.plan`: whether it is released, its step cap, the
trials to start, ask for, re-run or stop, and the chain state it hands to the next batch size.

Savings that do not change the answer:

* in a cell, once a trial reached the target at S steps, trials still above it at an evaluation
  past ``S·(1 + prune_margin)`` stop as ``pruned`` (and later trials of the cell start with that
  cap). Only evaluated steps count: a trial may have crossed since its last evaluation;
* a cell is ``skipped`` once a smaller batch size ended with every trial censored after at
  least this cell's token budget: tokens to target ``E(B) = B·T·S(B)`` never fall as B grows
  (McCandlish et al. 2018, eq. 2.12: ``E(B) = E_min·(1 + B/B_noise)``), so the cell could only
  end censored too, and censored points never enter ``S(B)`` or the fits (DESIGN.md §1).

A cell whose every rate ended censored, or a censored (or pruned) neighbour of a seed's best rate,
is run once more at :data:`cbscore.study.budgets.RERUN_CAP_FACTOR` times its cap or budget.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from cbscore.study.budgets import RERUN_CAP_FACTOR, RERUN_TAG, cell_budget_tokens, cell_size
from cbscore.study.cell_rates import cell_rates, cell_rates_note
from cbscore.study.cell_trials import cell_id, make_trial, make_trial_id
from cbscore.study.chained import chained_rates
from cbscore.study.crossings import best_neighbours, best_steps_by_seed, record_crossing
from cbscore.study.plan_result import AskRequest, CellState
from cbscore.study.spec import Setting, StudySpec
from cbscore.study.trials import TrialRecord, TrialSpec, lr_tag


@dataclass(frozen=True)
class CellPlan:
    """What :func:`cbscore.study.planner.plan` decides for one cell, and the chain state it hands to the
    next batch size."""

    cell: CellState
    start: tuple = ()
    ask: tuple = ()
    stop: tuple = ()
    stopped_by: tuple = ()
    """``(trial_id, rule)`` for each of ``stop`` (``plan_result.STOP_RULES``)."""
    incomplete: bool = False
    skipped: bool = False
    prev_resolved: bool = True
    prev_best: float | None = None
    at_least: float = 0.0


def record_key(r: TrialRecord, lost_set: frozenset) -> tuple:
    """Everything of a record that :func:`plan_cell` reads (an ended record's evaluations never change).
    A running trial's steps and tokens since its last evaluation are left out: pruning and the
    comparisons at equal tokens read evaluations only, so between two evaluations it plans the same."""
    running = not r.terminal
    return (r.trial_id, r.status, r.attempt, r.steps_to_target, None if running else r.last_step,
            None if running else r.tokens, r.max_steps, r.final_eval_loss, len(r.eval_steps),
            r.eval_steps[-1] if r.eval_steps else None, r.eval_losses[-1] if r.eval_losses else None,
            r.trial_id in lost_set)


def plan_cell(spec: StudySpec, setting: Setting, b: int, recs: Sequence[TrialRecord], target: float | None,
              prev_resolved: bool, prev_best: float | None, at_least: float, setting_failed: bool,
              lost_set: frozenset, predicted: float | None = None) -> CellPlan:
    """One cell of :func:`cbscore.study.planner.plan`: its state, the trials to start, ask for or stop,
    and the chain state."""
    cid = cell_id(setting.setting_id, b)
    margin = spec.prune_margin
    grid = spec.search.runs_rates
    chained = spec.search.kind == "chained"
    start: list[TrialSpec] = []
    asks: list[AskRequest] = []
    stop: list[tuple[str, str]] = []
    rule: dict[str, str] = {}  # which rule asks each stop (plan_result.STOP_RULES)
    role = "reference" if (b == spec.b_ref and spec.target_losses is None) else "trial"
    cell_target = None if role == "reference" else target
    # Every cell's crossings of the target, the reference cell's too (S(B_ref) is measured
    # like any other, and caps the cell above it).
    seed_best = best_steps_by_seed(recs, target)
    best = min(seed_best.values()) if seed_best else None
    if grid:
        if chained and role == "trial":
            # Centred on the neighbour's best rate (cbscore.study.chained); no centre: not released yet.
            rates, pending = (chained_rates(spec, recs, predicted, b) if predicted is not None
                              else ((), True))
        else:
            rates, pending = cell_rates(spec, recs, role, predicted if spec.experimental.predict else None)
        n_cell = len(rates) * len(spec.seeds) if rates else cell_size(spec, b)
    else:
        rates, n_cell = (), cell_size(spec)
        pending = not (len(recs) >= n_cell and all(r.terminal for r in recs))
    first = [r for r in recs if not r.trial_id.endswith("." + RERUN_TAG)]

    released = (role == "reference") or (target is not None and prev_resolved)
    if chained and role == "trial":
        # Outward from B_ref: once the neighbour towards it settled, which gives the centre.
        released = target is not None and predicted is not None
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
            return CellPlan(cell=skipped, skipped=True, prev_resolved=prev_resolved, prev_best=prev_best,
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
        # (Trials stopped at equal tokens trailed one of these: their projections need its
        # crossing, and a far rate's stop says nothing of a cell no rate reached.)
        ended_short = ("censored", "diverged", "pruned") if spec.compares_at_equal_tokens else ("censored", "diverged")
        if best is None and all(r.status in ended_short for r in first):
            rerun = [r for r in first if r.status == "censored"]
        else:
            # A neighbour pruned before the best settled (a later rate won) is run again too. The
            # best is read off every crossing, re-runs' too (a rate past an edge, added once a
            # re-run crossed, is a neighbour of that crossing).
            near = best_neighbours(recs, target, rates)
            # (Stopped at equal tokens, a neighbour's steps are projected from its curve: no re-run.)
            again = ("censored",) if spec.experimental.prune_at_equal_tokens else ("censored", "pruned")
            rerun = [r for r in first if r.status in again and (r.seed, r.lr) in near]
    elif grid and role == "reference" and first_done and target is not None and best is not None:
        # The reference runs train (1 + margin)·D without a target; a neighbour of the best
        # rate that had not crossed the cell's target by then is run again to twice that,
        # stopping at the target, so that S(B_ref) is read off the same window as any cell's
        # (left out, the window keeps only the lucky neighbours: S(B_ref) 3% low at σ = 0.1).
        near = best_neighbours(recs, target, rates)
        rerun = [r for r in first if r.status in ("finished", "censored") and (r.seed, r.lr) in near
                 and record_crossing(r, target) is None]
    n_cell += len(rerun)
    # Complete only once every re-run it asks for exists: counting is not enough (the re-runs of
    # an all-censored cell outnumber the neighbours a later best asks for).
    present = {r.trial_id for r in recs}
    reruns_started = all(r.trial_id + "." + RERUN_TAG in present for r in rerun)
    complete = (len(recs) >= n_cell and all(r.terminal for r in recs) and not pending and reruns_started)
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
        if grid:
            keep: set[tuple[int, float]] | None = None
            # Nearest the predicted optimum first (search.order): the best crosses early, so the
            # far rates, started later, stop at the prune margin past it; and trials stopped at
            # equal tokens are compared with the leader, which should be running before them.
            order = (sorted(rates, key=lambda v: abs(math.log(v / predicted))) if predicted is not None
                     else rates)
            for lr in order:
                for seed in spec.seeds:
                    tid = make_trial_id(spec, setting, b, lr_tag(lr), seed)
                    if tid not in present:
                        if keep is None:
                            keep = (best_neighbours(recs, target, rates) if (role == "trial" and seed_best)
                                    else set())
                        # The best rate's neighbours are never cut at the prune margin.
                        own_cap = cap_smaller if (seed, lr) in keep else cap
                        start.append(make_trial(spec, setting, batch_size=b, role=role, lr=lr, seed=seed,
                                                tag=lr_tag(lr), max_steps=own_cap, target_loss=cell_target))
            for r in rerun:
                if r.trial_id + "." + RERUN_TAG not in present:
                    larger = None if r.max_steps is None else int(math.ceil(RERUN_CAP_FACTOR * r.max_steps))
                    t = make_trial(spec, setting, batch_size=b, role=role, lr=r.lr, seed=r.seed,
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
            keep = best_neighbours(recs, target, rates if grid else ())
            for r in recs:
                own = seed_best.get(r.seed)
                if own is None or (r.seed, r.lr) in keep:
                    continue
                last_eval = r.eval_steps[-1] if r.eval_steps else 0.0
                if r.status == "running" and last_eval > (1 + margin) * own and r.trial_id not in lost_set:
                    stop.append((r.trial_id, "pruned"))
                    rule[r.trial_id] = "prune_margin"
        # Stop at equal tokens: a trial that trails the cell's leader at its own step by more than
        # the margin, before the best has crossed (cbscore.study.equal_tokens); never the fit's
        # window around the best crossing so far. With stop_far_rates alone, a stopped rate that
        # a later best makes its neighbour is run again above (again: "pruned").
        if role == "trial" and spec.compares_at_equal_tokens and any(r.status == "running" for r in recs):
            from cbscore.study.equal_tokens import equal_token_stops, projectable_stops

            keep = best_neighbours(recs, target, rates if grid else ()) if seed_best else set()
            stopping = {tid for tid, _ in stop}
            # The cell's expected steps: its best crossing so far, else the next smaller batch
            # size's S, else its budget's share (what the trials were planned for).
            expected = best if best is not None else prev_best
            if expected is None:
                steps_budget = cell_budget_tokens(spec, setting, b, role, cap) // (b * spec.context_tokens)
                expected = steps_budget / (1 + spec.budget_margin)
            not_judged = lost_set | stopping
            if spec.experimental.prune_at_equal_tokens:
                far_margin, judge_from = spec.equal_token_margin, 0.0
            else:
                # stop_far_rates: only once the curves stopped crossing over (far_rate_fraction),
                # and never a re-run: it is the last attempt, and a stopped re-run that a later
                # best makes its neighbour would leave the fit's window short.
                far_margin, judge_from = spec.far_rate_margin, spec.far_rate_fraction * expected
                not_judged = not_judged | {r.trial_id for r in recs if r.trial_id.endswith("." + RERUN_TAG)}
            for tid in equal_token_stops(recs, margin_nats=far_margin, protected=keep,
                                         skip=not_judged, min_step=judge_from, rates=rates):
                stop.append((tid, "pruned"))
                rule[tid] = "equal_token_margin" if spec.experimental.prune_at_equal_tokens else "stop_far_rates"
                stopping.add(tid)
            if spec.experimental.prune_at_equal_tokens:
                # The fit's own rates: stopped once their steps to target can be projected
                # (with stop_far_rates alone they run to their crossing).
                for tid in projectable_stops(recs, fraction=spec.equal_token_fraction, expected_steps=expected,
                                             skip=lost_set | stopping):
                    stop.append((tid, "pruned"))
                    rule[tid] = "equal_token_fraction"
    resolved = complete or (role == "trial" and best is not None)
    if role == "reference":  # S(B_ref) is known once the first runs ended; re-runs refine the fit
        resolved = (complete or first_done) and target is not None
    state = ("done" if complete else "resolved" if resolved else "running" if released else "waiting")
    cell = CellState(cell_id=cid, setting_id=setting.setting_id, batch_size=b, role=role, state=state,
                     n_trials=n_cell, counts=counts, steps_to_target=best, max_steps=cap,
                     rates_note=(cell_rates_note(spec, recs, role, rates, predicted) if grid and spec.experimental.predict
                                 else _chained_note(rates, predicted) if chained and role == "trial" and predicted
                                 else ""))
    return CellPlan(cell=cell, start=tuple(start), ask=tuple(asks), stop=tuple(stop),
                    stopped_by=tuple((tid, rule[tid]) for tid, _ in stop),
                    incomplete=not complete and not setting_failed, prev_resolved=resolved,
                    prev_best=best if best is not None else prev_best, at_least=at_least)


def _chained_note(rates: Sequence[float], centre: float) -> str:
    """A chained cell's centre and the rates it runs (for status pages and reports)."""
    return (f"centred at {centre:.3g} from its neighbour's best rate; runs "
            + ", ".join(f"{v:g}" for v in sorted(rates)))
