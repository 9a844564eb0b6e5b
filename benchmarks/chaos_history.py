"""The chaos run's record checks: each trial's MLflow history has every step it should, once.

Read straight from the tracking server with MLflow's client (no lab cache), for one phase of
``benchmarks/chaos.py`` at a time. A trial logs its training curve at every ``log_every_steps``
step and at each evaluation step (``cbscore.train.trainer``: ``is_log``), and evaluates on a schedule that
is a pure function of its budget and its own losses (``cbscore.train.eval_schedule``), so under the
same budget the undisturbed run's evaluation steps are the planned ones (a cell's step cap depends
on when the planner released it: ``against_calm``); CPU training resumes exactly, so the disturbed run's
values equal the undisturbed run's at every step they share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Logged at every log step; a checkpoint is taken only after they are sent (``MlflowCallback.
#: may_checkpoint``), so a resumed trial has none missing.
CURVE_KEYS = ("train/loss", "optim/lr", "optim/grad_norm")
#: Logged at log steps when defined (a throughput needs a timed interval): never twice, never off the grid.
SPARSE_KEYS = ("perf/tokens_per_s", "perf/tokens_per_s_per_device", "perf/mfu")
#: Outcomes that end at an evaluation (the final step is evaluated). A divergence ends where it is
#: seen: at an evaluation (a non-finite held-out loss) or at a log step (the train loss), which is
#: a measurement of the trial, not a fault of the record (``cbscore.train.trainer``).
EVALUATED_END = ("reached", "censored", "finished")
#: Written once, when the trial ends (a kill in the end-of-trial window must not write them twice).
SUMMARY_PREFIX = "summary/"


@dataclass(frozen=True, kw_only=True)
class TrialHistory:
    """One trial's record: its identity, outcome and every metric's ``[(step, value)]`` in log order."""

    trial_id: str
    """The same trial in both phases (the studies have the same names and specs)."""
    status: str
    """MLflow run status (FINISHED, KILLED, FAILED, RUNNING, SCHEDULED)."""
    outcome: str
    attempt: int
    end_step: int
    """Steps trained (the run's final ``progress/step``)."""
    tokens: int
    """Tokens trained (the run's final ``progress/tokens``; -1 when it never reported its end)."""
    log_every: int
    metrics: dict[str, list[tuple[int, float]]]
    step_budget: tuple = (None, None)
    """The budget the planner gave the trial at its launch, ``(max_tokens, max_steps)`` (its
    ``trial_spec``; ``max_steps`` is ``None`` without a step cap). Its evaluation grid is planned
    from it (``cbscore.train.eval_schedule.default_every_steps``)."""


def read_histories(tracking_uri: str, study: str) -> list[TrialHistory]:
    """Every trial run of ``study`` with the full history of each of its metrics."""
    import json

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(study)
    if exp is None:
        raise RuntimeError(f"no MLflow experiment {study!r} at {tracking_uri}")
    parent = exp.tags.get("cbs.parent_run_id", "")
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'",
                              max_results=5000)
    out = []
    for run in runs:
        tags = run.data.tags
        spec = json.loads(tags.get("trial_spec") or "{}")
        metrics = {}
        for key in run.data.metrics:
            history = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: (m.timestamp, m.step))
            metrics[key] = [(m.step, m.value) for m in history]
        out.append(TrialHistory(
            trial_id=tags.get("trial_id", ""), status=run.info.status, outcome=tags.get("status", ""),
            attempt=int(tags.get("attempt") or 1), end_step=int(run.data.metrics.get("progress/step", -1)),
            tokens=int(run.data.metrics.get("progress/tokens", -1)),
            log_every=int((spec.get("train_config") or {}).get("log_every_steps") or 10), metrics=metrics,
            step_budget=(spec.get("max_tokens"), spec.get("max_steps"))))
    return out


def steps_of(history: list[tuple[int, float]]) -> list[int]:
    return [s for s, _ in history]


def trial_faults(h: TrialHistory) -> list[str]:
    """What is wrong with one trial's own record: a step logged twice or out of order, a step
    missing from the log grid, an evaluation missing at the end; empty when it is whole."""
    faults = []
    evals = steps_of(h.metrics.get("eval/loss_ewa", []))
    for key, points in h.metrics.items():
        steps = steps_of(points)
        if key.startswith(("eval/", *CURVE_KEYS, *SPARSE_KEYS)) and steps != sorted(set(steps)):
            faults.append(f"{key}: a step logged twice or out of order")
        if key.startswith(SUMMARY_PREFIX) and len(points) > 1:
            faults.append(f"{key}: written {len(points)} times (at steps {steps[:8]}), once expected")
    if h.end_step < 0:
        return faults + ["no progress/step: the trial never reported its end"]
    grid = sorted({*range(h.log_every, h.end_step + 1, h.log_every), *(e for e in evals if 0 < e <= h.end_step)})
    for key in CURVE_KEYS:
        got = steps_of(h.metrics.get(key, []))
        if got != grid:
            missing = sorted(set(grid) - set(got))
            extra = sorted(set(got) - set(grid))
            faults.append(f"{key}: steps {len(got)} of {len(grid)} expected; missing {missing[:8]}, "
                          f"unexpected {extra[:8]}")
    for key in SPARSE_KEYS:
        off = sorted(set(steps_of(h.metrics.get(key, []))) - set(grid))
        if off:
            faults.append(f"{key}: steps off the log grid {off[:8]}")
    for key, points in h.metrics.items():  # every evaluation key at the same steps
        if key.startswith("eval/") and steps_of(points) != evals:
            faults.append(f"{key}: evaluated at other steps than eval/loss_ewa")
    if not evals or evals[0] != 0:
        faults.append("no evaluation at step 0")
    if h.outcome in EVALUATED_END and (not evals or evals[-1] != h.end_step):
        faults.append(f"{h.outcome} at step {h.end_step} but the last evaluation is at {evals[-1] if evals else None}")
    return faults


def against_calm(calm: TrialHistory, chaos: TrialHistory) -> list[str]:
    """Where the disturbed trial's record differs from the undisturbed one's: evaluation steps
    (the planned ones) and every value of the shared steps, to the last digit. A trial stopped
    by pruning stops at a step that depends on when the runner's stop reached it, so two records
    are compared up to the shorter one's end."""
    faults = []
    end = min(calm.end_step, chaos.end_step)
    if calm.outcome != "pruned" and chaos.outcome != "pruned" and calm.end_step != chaos.end_step:
        faults.append(f"ended at step {chaos.end_step}, undisturbed at {calm.end_step}")
    # The planner caps a cell above B_ref at (1 + budget_margin)·S of the smaller batch sizes
    # measured when it releases the cell (cbscore/study/cell_plan.py), so which of them had ended
    # by then sets the cap, and the cap sets the evaluation grid (every ceil(total/40) steps). Two
    # phases that released a cell at different moments plan different grids: the steps are compared
    # only under the same budget, the values always, at every step both logged.
    same_grid = calm.step_budget == chaos.step_budget
    for key in ("eval/loss_ewa", "eval/loss_raw", *CURVE_KEYS):
        a = [(s, v) for s, v in calm.metrics.get(key, []) if s <= end]
        b = [(s, v) for s, v in chaos.metrics.get(key, []) if s <= end]
        if same_grid and steps_of(a) != steps_of(b):
            faults.append(f"{key}: steps differ from the undisturbed run's up to step {end}")
            continue
        if not same_grid and key.startswith("eval/"):  # an evaluation is of the weights at its step
            shared_steps = set(steps_of(a)) & set(steps_of(b))
            a, b = [p for p in a if p[0] in shared_steps], [p for p in b if p[0] in shared_steps]
        elif not same_grid:
            # A logged train/loss is the mean since the previous log step (cbscore.train: the
            # interval loss), and every evaluation step is a log step: a point is compared only
            # where both runs logged the step before it too, so both averaged the same steps.
            shared = set(windows(a)) & set(windows(b))
            a = [p for w, p in zip(windows(a), a) if w in shared]
            b = [p for w, p in zip(windows(b), b) if w in shared]
        if not all(same_value(x, y) for (_, x), (_, y) in zip(a, b)):
            first = next(s for (s, x), (_, y) in zip(a, b) if not same_value(x, y))
            faults.append(f"{key}: values differ from the undisturbed run's from step {first}")
    return faults


def windows(history: list[tuple[int, float]]) -> list[tuple[int, int]]:
    """Each point's ``(previous logged step, step)``: the steps a logged mean covers."""
    steps = steps_of(history)
    return list(zip([-1, *steps[:-1]], steps))


def budgets_differ(calm: list[TrialHistory], chaos: list[TrialHistory]) -> dict:
    """The trials whose phases ran under different planned budgets (so on different evaluation
    grids, compared at their shared steps): trial id → the two budgets and the steps compared."""
    by_id = {h.trial_id: h for h in calm}
    out = {}
    for h in chaos:
        c = by_id.get(h.trial_id)
        if c is not None and c.step_budget != h.step_budget:
            end = min(c.end_step, h.end_step)
            shared = ({s for s, _ in c.metrics.get("eval/loss_ewa", []) if s <= end}
                      & {s for s, _ in h.metrics.get("eval/loss_ewa", []) if s <= end})
            out[h.trial_id] = {"calm_max_tokens_steps": list(c.step_budget),
                               "chaos_max_tokens_steps": list(h.step_budget),
                               "shared_evaluations": len(shared)}
    return out


def same_value(x: float, y: float) -> bool:
    """Equal to the last digit; two NaN are the same value (a diverged trial's loss is NaN in both runs)."""
    return x == y or (math.isnan(x) and math.isnan(y))


def compare_histories(calm: list[TrialHistory], chaos: list[TrialHistory]) -> dict:
    """The report's history checks of the disturbed phase (and the undisturbed phase's own)."""
    by_id = {h.trial_id: h for h in calm}
    gaps = {h.trial_id: f for h in chaos + calm if (f := trial_faults(h))}
    unmatched = sorted({h.trial_id for h in chaos} ^ {h.trial_id for h in calm})
    differ = {h.trial_id: f for h in chaos if h.trial_id in by_id and (f := against_calm(by_id[h.trial_id], h))}
    return {"histories_with_gaps_or_duplicates": gaps, "histories_unlike_calm": differ,
            "trials_in_one_phase_only": unmatched, "budgets_differ": budgets_differ(calm, chaos),
            "evaluations_checked": sum(len(h.metrics.get("eval/loss_ewa", [])) for h in chaos),
            "train_points_checked": sum(len(h.metrics.get("train/loss", [])) for h in chaos),
            "summaries_checked": sum(len(p) for h in chaos for k, p in h.metrics.items()
                                     if k.startswith(SUMMARY_PREFIX)),
            "tokens_trained_calm": sum(max(h.tokens, 0) for h in calm),
            "tokens_trained_chaos": sum(max(h.tokens, 0) for h in chaos)}
