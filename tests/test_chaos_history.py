"""The chaos run's history checks (benchmarks/chaos_history.py, issue 22): a whole record passes,
and a missing step, a step logged twice, a missing last evaluation or a value unlike the calm
run's is named."""

from __future__ import annotations

import dataclasses

from benchmarks.chaos_history import TrialHistory, against_calm, budgets_differ, trial_faults

EVALS = [0, 1, 2, 4, 8, 16, 20]
#: every 10th step and each evaluation step, to the end (step 20)
LOG_STEPS = [1, 2, 4, 8, 10, 16, 20]


def whole() -> TrialHistory:
    curve = {k: [(s, 0.5 * s) for s in LOG_STEPS] for k in ("train/loss", "optim/lr", "optim/grad_norm")}
    evals = {k: [(s, 1.0 / (1 + s)) for s in EVALS] for k in ("eval/loss_ewa", "eval/loss_raw")}
    return TrialHistory(trial_id="t", status="FINISHED", outcome="reached", attempt=2, end_step=20, tokens=20 * 64,
                        log_every=10,
                        metrics={**curve, **evals, "heartbeat": [(4, 1.0), (4, 2.0)]})


def with_metric(h: TrialHistory, key: str, points: list) -> TrialHistory:
    return dataclasses.replace(h, metrics={**h.metrics, key: points})


def test_a_whole_history_has_no_fault_and_equals_itself():
    assert trial_faults(whole()) == [] and against_calm(whole(), whole()) == []


def test_a_missing_or_repeated_log_step_is_named():
    h = whole()
    gap = with_metric(h, "train/loss", [p for p in h.metrics["train/loss"] if p[0] != 10])
    assert trial_faults(gap) == ["train/loss: steps 6 of 7 expected; missing [10], unexpected []"]
    twice = with_metric(h, "optim/lr", h.metrics["optim/lr"][:4] + h.metrics["optim/lr"][3:])
    assert "optim/lr: a step logged twice or out of order" in trial_faults(twice)


def test_a_reached_trial_without_its_last_evaluation_is_named():
    h = whole()
    h = with_metric(with_metric(h, "eval/loss_ewa", h.metrics["eval/loss_ewa"][:-1]), "eval/loss_raw",
                    h.metrics["eval/loss_raw"][:-1])
    assert trial_faults(h) == ["reached at step 20 but the last evaluation is at 16"]


def test_a_value_unlike_the_calm_runs_is_named_at_its_first_step():
    h = whole()
    points = list(h.metrics["eval/loss_ewa"])
    points[3] = (4, 0.3)
    assert against_calm(h, with_metric(h, "eval/loss_ewa", points)) == [
        "eval/loss_ewa: values differ from the undisturbed run's from step 4"]


def test_a_pruned_trial_is_compared_up_to_the_shorter_record():
    calm = whole()
    cut = {k: [p for p in v if p[0] <= 10] for k, v in calm.metrics.items()}
    pruned = dataclasses.replace(calm, outcome="pruned", end_step=10, metrics=cut)
    assert trial_faults(pruned) == [] and against_calm(calm, pruned) == []


def test_a_summary_written_twice_is_named():
    h = with_metric(whole(), "summary/steps_to_target", [(20, 17.0), (20, 17.0)])
    assert trial_faults(h) == ["summary/steps_to_target: written 2 times (at steps [20, 20]), once expected"]
    assert trial_faults(with_metric(whole(), "summary/steps_to_target", [(20, 17.0)])) == []


def test_a_train_loss_divergence_is_a_measurement_not_a_fault():
    """A divergence seen in the train loss ends the trial at that log step, unevaluated, with a NaN
    loss in both runs: neither a missing last evaluation nor a value unlike the calm run's."""
    h = whole()
    cut = {k: [p for p in v if p[0] <= 10] for k, v in h.metrics.items()}
    cut["train/loss"] = [*cut["train/loss"][:-1], (10, float("nan"))]
    diverged = dataclasses.replace(h, outcome="diverged", end_step=10, metrics=cut)
    assert trial_faults(diverged) == [] and against_calm(diverged, diverged) == []


def regridded(h: TrialHistory, evals: list[int]) -> TrialHistory:
    """``h`` evaluated at ``evals`` instead (same losses where it has them), logged on the grid they make."""
    log = sorted({*range(h.log_every, h.end_step + 1, h.log_every), *(e for e in evals if e > 0)})
    metrics = {k: [(s, 0.5 * s) for s in log] for k in ("train/loss", "optim/lr", "optim/grad_norm")}
    metrics |= {k: [(s, 1.0 / (1 + s)) for s in evals] for k in ("eval/loss_ewa", "eval/loss_raw")}
    return dataclasses.replace(h, metrics=metrics)


def test_another_evaluation_grid_is_a_fault_under_the_same_budget_only():
    """The full-size run of issue 42: a b32 trial released after another b16 trial had ended got a
    step cap of 1631, not 1653, so it evaluated every 41 steps, not 42. Its histories are compared
    at the steps both logged; under the same budget other evaluation steps stay a fault."""
    calm = dataclasses.replace(whole(), step_budget=(846336, 1653))
    other = regridded(calm, [0, 1, 2, 4, 8, 12, 18, 20])
    assert trial_faults(other) == []
    assert "eval/loss_ewa: steps differ from the undisturbed run's up to step 20" in against_calm(calm, other)
    capped = dataclasses.replace(other, step_budget=(834816, 1631))
    assert against_calm(calm, capped) == []
    assert budgets_differ([calm], [capped]) == {"t": {"calm_max_tokens_steps": [846336, 1653],
                                                      "chaos_max_tokens_steps": [834816, 1631],
                                                      "shared_evaluations": 6}}
    # the values are still compared, to the last digit, at every step both logged
    wrong = with_metric(capped, "train/loss", [(s, v + (s == 10)) for s, v in capped.metrics["train/loss"]])
    assert against_calm(calm, wrong) == ["train/loss: values differ from the undisturbed run's from step 10"]
    wrong = with_metric(capped, "eval/loss_raw", [(s, v + (s == 20)) for s, v in capped.metrics["eval/loss_raw"]])
    assert against_calm(calm, wrong) == ["eval/loss_raw: values differ from the undisturbed run's from step 20"]


def test_a_train_loss_averaged_over_another_window_is_not_compared():
    """A logged train/loss is the mean since the previous log step, and evaluation steps are log
    steps: at step 20 the calm run averaged steps 17-20 (its last log step was 16), the regridded
    one 19-20 (18). The redis-pg full run of issue 42 flagged such points as values that differ."""
    calm = dataclasses.replace(whole(), step_budget=(846336, 1653))
    other = regridded(calm, [0, 1, 2, 4, 8, 12, 18, 20])
    other = dataclasses.replace(with_metric(other, "train/loss", [(s, v + (s == 20)) for s, v in
                                                                   other.metrics["train/loss"]]),
                                step_budget=(834816, 1631))
    assert against_calm(calm, other) == []
