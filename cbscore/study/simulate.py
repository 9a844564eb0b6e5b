"""The study simulator: the *real* planner run against simulated trials whose truth is known.

Every rule that saves compute (budgets, step caps, pruning, skipped cells) must leave B* where
the full grid puts it (DESIGN.md §1, "Budgets that cannot bias B*"). This module proves it, or
shows where it does not hold, before a GPU-hour is spent: it drives :func:`cbscore.study.plan`
exactly as the runner does, with trials that reach the target at known steps.

Its parts: the simulated trials and their truth, noise and evaluations in
:mod:`cbscore.study.sim_trials` (the truths themselves in :mod:`cbscore.study.sim_truth`), what one
study found per setting (truth, full grid, study) in :mod:`cbscore.study.sim_outcomes`, and the
report over seeds in :mod:`cbscore.study.sim_report`. This module drives the planner.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Callable, Mapping

from cbscore.errors import CbsError, ConfigError
from cbscore.study.budgets import grid_tokens, setting_grid_tokens
from cbscore.study.cell_trials import check_cell_configs
from cbscore.study.costs import pruned_tokens_by_rule
from cbscore.study.equal_tokens import loss_at_step
from cbscore.study.planner import Planner
from cbscore.study.sim_outcomes import setting_outcomes
from cbscore.study.sim_report import SimulationReport, StudyOutcome, format_report
from cbscore.study.sim_trials import LAB_NOISE, SimConfig, SimRun, SimTrials, run_evals, run_record
from cbscore.study.sim_truth import (
    PAPER_CHINCHILLA_LAW,
    PAPER_FIXED_D_LAW,
    PAPER_FIXED_N_EXPONENT,
    KneeShiftTruth,
    PenaltyTruth,
    TableTruth,
    Truth,
    TruthCurve,
    apply_truth_shape,
    paper_truth,
    read_truth,
    write_truth_csv,
)
from cbscore.study.spec import StudySpec
from cbscore.study.trials import TrialRecord, TrialSpec, replaced

# What importers read from here: the entry point, its config and report, and the truths.
__all__ = ["KneeShiftTruth", "LAB_NOISE", "PAPER_CHINCHILLA_LAW", "PAPER_FIXED_D_LAW", "PAPER_FIXED_N_EXPONENT",
           "PenaltyTruth", "SimConfig", "SimulationReport", "TableTruth", "Truth", "TruthCurve", "apply_truth_shape",
           "format_report", "paper_truth", "read_truth", "simulate", "simulate_once", "write_truth_csv"]


#: With ``stop_far_rates`` or ``prune_at_equal_tokens``, the simulated runner looks at a trial every this many of its
#: evaluations (the real one looks every ``CBS_RUNNER_INTERVAL_S``, several evaluations apart).
EQUAL_TOKEN_WAKE = 4


def simulate_once(spec: StudySpec, truth: Mapping[str, Truth], config: SimConfig, seed: int, *,
                  check_configs: bool = True) -> StudyOutcome:
    """Run the planner against simulated trials until the study is done. Its planner builds no trainer
    config (it trains nothing): each cell's is checked once instead, unless the caller did
    (``check_configs=False``: :func:`simulate`, once for all its seeds)."""
    if not spec.search.runs_rates:
        raise ConfigError("search.kind", spec.search.kind, "the simulator runs grid and chained searches only")
    if spec.target_losses is not None:
        raise ConfigError("target_losses", "given", "the simulator sets targets from reference runs")
    if check_configs:
        check_cell_configs(spec)
    sim = SimTrials(spec=spec, truth=truth, config=config, seed=seed)
    sim.settings = {s.setting_id: s for s in spec.resolve_settings()}
    for setting in sim.settings.values():
        if all(sim.multiplier(spec.b_ref, lr) is None for lr in spec.search.lrs):
            raise ConfigError("search.lrs", list(spec.search.lrs),
                              f"every learning rate diverges at B_ref in the simulation of {setting.setting_id!r}")
    records: dict[str, TrialRecord] = {}
    running: dict[str, SimRun] = {}
    queue: deque[TrialSpec] = deque()
    # (time, kind) at which to ask the planner again: kind 0 for trial ends and evaluations past a limit,
    # 1 for a wake to compare trials at equal tokens.
    events: list[tuple[float, int]] = []
    # The events in `events`, each once: a wake is worked out again at every event until it comes, and
    # pushing it again would only make the heap longer (the events at one time are taken together).
    pending: set[tuple[float, int]] = set()
    now, started = 0.0, 0
    # Each (cell, seed)'s fewest steps to target among ended trials: the prune margin's wakes read it.
    best: dict[tuple[str, int], float] = {}
    # Whether the event now is only a wake to compare trials at equal tokens: then the planner can
    # change nothing unless a running trial trails another of its cell and seed by the margin (a wake
    # adds no trial, and the prune margin's stops have wakes of their own), so it is not asked.
    wake_only = stopped_now = False
    # The evaluations (seed, steps, losses) of each cell's ended trials that did not diverge or fail, as
    # they end: what the far-rate wake check compares running trials with.
    ended_evals: dict[str, list[tuple[int, tuple, tuple]]] = {}
    # The study's planner: it reads only the records that changed since its last call. What it is
    # given: every record in the order first made, the running trials' as of now; `ended`: trials
    # whose record changed as they stopped running since the last call.
    planner = Planner(spec, configs=False)
    snapshot: list[TrialRecord] = []
    where: dict[str, int] = {}
    ended: list[str] = []
    # The evaluations (run_evals) of each running trial's record in `snapshot`: a running trial with no
    # evaluation since keeps that record. The new one would differ only in its steps, tokens and
    # heartbeat, which the planner does not read of a running trial (cell_plan.record_key leaves them
    # out; no heartbeat goes stale here), so it plans the same.
    shown: dict[str, int] = {}
    # Each running trial's wakes that do not move with time: (its seed's best in its cell, the prune
    # margin's wake) and (that best, its first evaluation judged at equal tokens).
    prune_at: dict[str, tuple[float, float | None]] = {}
    far_from: dict[str, tuple[float | None, int]] = {}
    woken: dict[str, tuple[float | None, int, float]] = {}
    ends: dict[str, float] = {}  # each started trial's end (SimRun.end), read at every event
    equal_tokens, prune_equal = spec.compares_at_equal_tokens, spec.experimental.prune_at_equal_tokens
    # How often the running trials or the bests moved, and as of which the prune margin's wakes were
    # queued: while neither moves they are the same wakes (each queued or past), so they are not worked out again.
    moved, prune_woken = 0, -1
    queued = TrialRecord(trial_id="", cell_id="", setting_id="", role="trial", batch_size=1, lr=1.0, status="queued")
    for _ in range(100_000):
        if wake_only and not _may_stop_far_rate(spec, running, ended_evals, now):
            stopped_now = False
        else:
            changed = []
            for tid in ended:
                snapshot[where[tid]] = records[tid]
                changed.append(where[tid])
            ended.clear()
            for tid, run in running.items():
                seen = run_evals(run, now)
                if shown.get(tid) != seen:
                    shown[tid] = seen
                    snapshot[where[tid]] = run_record(run, now)
                    changed.append(where[tid])
            p = planner.plan(snapshot, now, stale_after_s=math.inf, changed=changed)
            stopped_now = False
            for tid, reason in p.stop:
                if tid in running:
                    r = records[tid] = run_record(running.pop(tid), now, reason, p.stopped_by.get(tid, ""))
                    if r.status not in ("diverged", "failed"):
                        ended_evals.setdefault(r.cell_id, []).append((r.seed, r.eval_steps, r.eval_losses))
                    ended.append(tid)
                    stopped_now = True
                    moved += 1
            for t in p.start:
                if t.trial_id not in records:
                    # TrialRecord(trial_id=..., status="queued", ...) of the trial: the study's first one with
                    # the trial's own fields replaced (the checks of its __init__ passed on it).
                    records[t.trial_id] = replaced(queued, trial_id=t.trial_id, cell_id=t.cell_id,
                                                   setting_id=t.setting_id, role=t.role, batch_size=t.batch_size,
                                                   lr=t.lr, max_steps=t.max_steps, seed=t.seed)
                    where[t.trial_id] = len(snapshot)
                    snapshot.append(records[t.trial_id])
                    queue.append(t)
            while queue and len(running) < config.workers:
                t = queue.popleft()
                run = sim.start(t, now)
                running[t.trial_id] = run
                ends[t.trial_id] = run.end()
                moved += 1
                # (Its record stays the queued one here: the planner's next call reads it afresh, as it
                # has no evaluation shown yet, and nothing reads a running trial's entry in `records`.)
                started += 1
                if (ev := (run.end(), 0)) not in pending:
                    pending.add(ev)
                    heapq.heappush(events, ev)
            if p.done:
                break
            if not running and not queue:
                if stopped_now:
                    # The planner decided on records from before these stops: asked again, it may
                    # add a rate (an extension past an edge) or a re-run; the runner's next pass would.
                    continue
                break
        # Pruning happens at evaluations: wake up at each running trial's first evaluation past
        # (1 + margin)·best of its seed in its cell, where a best is known (`best`, kept as trials end).
        # (Each trial's wake is worked out once per best: `prune_at`.)
        for tid, run in running.items() if prune_woken != moved else ():
            b = best.get((run.spec.cell_id, run.spec.seed))
            if b is None or run.spec.role != "trial":
                continue
            wake = prune_at.get(tid)
            if wake is None or wake[0] != b:
                limit = (1 + spec.prune_margin) * b
                k = math.floor(limit / run.eval_every) + 1
                wake = prune_at[tid] = (b, run.start + k * run.eval_every * run.batch_tokens
                                        if k * run.eval_every <= run.steps else None)
            if wake[1] is not None and wake[1] > now:
                if (ev := (wake[1], 0)) not in pending:
                    pending.add(ev)
                    heapq.heappush(events, ev)
        prune_woken = moved
        if equal_tokens:
            # Stopping at equal tokens is decided at evaluations: wake at every EQUAL_TOKEN_WAKE-th
            # evaluation of each running trial (each wake re-plans the study: every one is slow).
            # stop_far_rates alone judges a trial only from far_rate_fraction of its cell's expected
            # steps (the best crossing, else its planned steps, as cell_plan reads them): no wake before
            # (its first evaluation then is worked out once per best: `far_from`).
            # (A trial's queued wake is worked out the same while its best and its last EQUAL_TOKEN_WAKE-th
            # evaluation stay: `woken`, by trial, (that best, the next such evaluation, the wake queued).)
            for tid, run in running.items():
                if run.spec.role != "trial":
                    continue
                b = best.get((run.spec.cell_id, run.spec.seed)) if not prune_equal else None
                evaluated = math.floor(min(run.steps, (now - run.start) / run.batch_tokens) / run.eval_every)  # (step_at)
                last = woken.get(tid)
                if last is not None and last[0] == b and evaluated < last[1] and last[2] > now:
                    continue  # (the same k, so the same wake: queued, and still ahead)
                k = k_next = (evaluated // EQUAL_TOKEN_WAKE + 1) * EQUAL_TOKEN_WAKE
                if not prune_equal:
                    first = far_from.get(tid)
                    if first is None or first[0] != b:
                        planned = run.spec.max_tokens // run.batch_tokens
                        if run.spec.max_steps is not None:
                            planned = min(planned, run.spec.max_steps)
                        expected = b if b is not None else planned / (1 + spec.budget_margin)
                        first = far_from[tid] = (b, math.ceil(spec.far_rate_fraction * expected / run.eval_every))
                    k = max(k, first[1])
                at = run.start + k * run.eval_every * run.batch_tokens
                if k * run.eval_every <= run.steps and at > now:
                    woken[tid] = (b, k_next, at)
                    if (ev := (at, 1)) not in pending:
                        pending.add(ev)
                        heapq.heappush(events, ev)
        while events and events[0][0] <= now:
            pending.discard(heapq.heappop(events))
        now, kind = ev = heapq.heappop(events)
        pending.discard(ev)
        while events and events[0][0] <= now:
            ev = heapq.heappop(events)
            pending.discard(ev)
            kind = min(kind, ev[1])
        # (A plan that stopped trials was made on the records from before the stops: the next one may
        # start a re-run, or a rate past an edge, as the runner's next pass would.)
        wake_only = kind == 1 and not prune_equal and not stopped_now
        for tid in [k for k in running if ends[k] <= now + 1e-9]:
            run = running.pop(tid)
            wake_only = False
            moved += 1
            r = records[tid] = run_record(run, run.end(), run.outcome)
            if r.status not in ("diverged", "failed"):
                ended_evals.setdefault(r.cell_id, []).append((r.seed, r.eval_steps, r.eval_losses))
            ended.append(tid)
            if r.status == "reached" and r.steps_to_target is not None and r.role == "trial":
                best[(r.cell_id, r.seed)] = min(best.get((r.cell_id, r.seed), math.inf), r.steps_to_target)
    else:  # pragma: no cover - a planner that never finishes is a bug worth a clear message
        raise CbsError(f"the simulated study {spec.name!r} did not finish in 100,000 events")
    settings, laws = setting_outcomes(spec, sim, records, p)
    return StudyOutcome(seed=seed, settings=tuple(settings), laws=laws,
                        tokens_study=sum(r.tokens for r in records.values()),
                        flops_study=sum(r.tokens * sim.settings[r.setting_id].flops_per_token for r in records.values()),
                        trials=started, max_trial_tokens=max((r.tokens for r in records.values()), default=0),
                        pruned_tokens_by_rule=pruned_tokens_by_rule(list(records.values())))


def _may_stop_far_rate(spec: StudySpec, running: Mapping[str, SimRun],
                       ended_evals: Mapping[str, list[tuple[int, tuple, tuple]]], now: float) -> bool:
    """Whether some running trial's last evaluation trails another trial of its cell and seed by more
    than ``far_rate_margin`` at equal steps: a necessary condition of every stop at equal tokens that
    ``stop_far_rates`` makes (:func:`cbscore.study.equal_tokens.equal_token_stops`, without its other
    conditions), so a wake where it fails would plan nothing new. ``ended_evals``: by cell, the
    ``(seed, steps, losses)`` of each ended trial that did not diverge or fail (its record's
    evaluations); the other trials of a cell are running ones, or queued ones with no evaluation."""
    # How many of each running trial's evaluations its record shows now (run_record: the first ones of
    # its curve), read once per call (each is compared with every other trial of its cell).
    shown: dict[str, int] = {}
    margin = spec.far_rate_margin
    for tid, run in running.items():
        steps = run.curve[0]
        if not steps or run.spec.role != "trial":
            continue
        n = shown.get(tid)
        if n is None:
            n = shown[tid] = bisect.bisect_right(steps, min(run.steps, (now - run.start) / run.batch_tokens))
        if not n:
            continue
        level = run.curve[1][n - 1]
        if not math.isfinite(level):
            continue
        t, level, seed, cell = steps[n - 1], level - margin, run.spec.seed, run.spec.cell_id
        for o_seed, o_steps, o_losses in ended_evals.get(cell, ()):
            # (loss_at_step's own range check first: most pairs are read outside each other's range.)
            if o_seed != seed or not o_steps or t < o_steps[0] or t > o_steps[-1]:
                continue
            got = loss_at_step(o_steps, o_losses, t)
            if got is not None and got < level:
                return True
        for other, o in running.items():
            if other == tid or o.spec.cell_id != cell or o.spec.seed != seed:
                continue
            if o.curve[0]:
                o_steps, o_losses = o.curve
                o_n = shown.get(other)
                if o_n is None:
                    o_n = shown[other] = bisect.bisect_right(o_steps, min(o.steps, (now - o.start) / o.batch_tokens))
            else:  # (a diverging or reference run: its record's evaluations)
                rec = run_record(o, now)
                o_steps, o_losses = rec.eval_steps, rec.eval_losses
                o_n = len(o_steps)
            if not o_n or t < o_steps[0] or t > o_steps[o_n - 1]:
                continue
            got = loss_at_step(o_steps, o_losses, t, o_n)
            if got is not None and got < level:
                return True
    return False


def simulate(spec: StudySpec, truth: Mapping[str, Truth], config: SimConfig | None = None, *,
             seeds: int = 1, first_seed: int = 0,
             progress: Callable[[int, int], None] | None = None) -> SimulationReport:
    """``seeds`` simulated studies of ``spec`` against ``truth``; ``progress(done, total)`` after each."""
    config = config or SimConfig()
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ConfigError("seeds", seeds, "must be a positive integer")
    runs = []
    for i in range(seeds):
        runs.append(simulate_once(spec, truth, config, first_seed + i, check_configs=i == 0))
        if progress is not None:
            progress(i + 1, seeds)
    runs = tuple(runs)
    settings = spec.resolve_settings()
    return SimulationReport(spec_name=spec.name, config=config, seeds=runs, grid_tokens=grid_tokens(spec),
                            truth=", ".join(sorted({c.kind for c in truth.values()})), predict=spec.experimental.predict,
                            search=(spec.search.kind if spec.search.kind != "chained"
                                    else f"chained (reference {spec.search.reference_rates})"),
                            order=spec.search.order, lr_prior=spec.experimental.lr_prior,
                            budget_margin=spec.budget_margin,
                            prune_at_equal_tokens=spec.experimental.prune_at_equal_tokens, stop_far_rates=spec.stop_far_rates,
                            far_rate_margin=spec.far_rate_margin, far_rate_fraction=spec.far_rate_fraction,
                            grid_flops=float(sum(setting_grid_tokens(spec, s) * s.flops_per_token for s in settings)))
