"""Real MLflow studies with known answers, written through :class:`workers.tracking.Tracker`.

A seeded study looks to every reader (``workers.query.api``, the app) like one the runner launched and
the workers ran: an experiment with a parent run holding the spec and the targets, and one child
run per trial with the runner's tags, the worker's metric histories (``eval/loss_ewa`` per τ,
progress, throughput) and its outcome. Only the losses are synthetic: every setting follows
``S(B) = S_min·(1 + B_noise/B)`` exactly, so where every cell reached, the fitted ``B*`` is known in
closed form, ``(1 + r)·B_ref + r·B_noise`` (DESIGN.md §1). A *missed* cell (:data:`MISSED`) ends
censored at its budget, above the seeded curve; it stays in the fit as a lower bound and pulls it
(DESIGN.md §1), so there the known answer is the fit of the seeded values with that bound
(:func:`expected_fit`).

Used by the app's tests and by ``benchmarks/bench_app.py`` (which seeds 1,000 trials).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass

from cbscore.study import StudySpec
from cbscore.study.trials import lr_tag

#: Target loss of every seeded setting (nats per token).
TARGET = 4.0
#: Loss curves fall like ``TARGET·(s/step)^DECAY`` and cross the target at step ``s``.
DECAY = 0.25
#: How much later the non-best learning rates of a cell reach the target.
SLOWER = 1.25
#: Evaluations per trial.
N_EVALS = 16
#: Seconds before ``now_s`` at which the seeded trials that ended did so.
ENDED_AGO_S = 600.0
#: D = this × N for the first four settings (twice as many per parameter for the next four, ...):
#: one Chinchilla-like family per ratio, so the law in N with D ∝ N is defined (DESIGN.md §1).
TOKENS_PER_PARAM = 10
#: The trials of a *missed* cell (the largest batch size of every setting but the last) would need
#: this many times the cell's step cap or token budget, more than the planner's re-run at twice it
#: (``cbscore.study.planner.RERUN_CAP_FACTOR``): the grid's learning rates all miss there, and the
#: cell ends censored, a lower bound on S(B) (DESIGN.md §1).
MISSED = 3.0
#: Relative tolerance between what a page reads off a seeded study (at :func:`spec_for`'s rates)
#: and the seeded values. The fit across learning rates (a parabola in ln η through the three
#: rates, whose ln-spacings 1.20 and 1.10 differ) reads S(B) 0.05% below the middle rate's crossing
#: of TARGET; the setting's target, the vertex over rates of the reference runs' losses at D, is
#: 3.99952 rather than TARGET, so S(B_ref), their crossing of it, is 0.05% later. B_noise and B*
#: move by less than 0.1%.
REL = 1e-3
#: Every trial logs a constant gradient noise scale ``B_simple = B_noise / GNS_RATIO`` (``gns/b_simple``,
#: at its evaluation steps), so the noise-scale forecast is ``B̂ = B_noise / GNS_RATIO``, and a
#: setting's measured ``B_noise / B̂`` is ``GNS_RATIO`` (within :data:`REL`) where no cell was missed,
#: ``expected_fit(setting).b_noise / B̂`` in general.
GNS_RATIO = 3.0


@dataclass(frozen=True, kw_only=True)
class SeededSetting:
    setting_id: str
    b_noise: float
    """B_noise of the setting's S(B), sequences."""
    s_min: float
    """S_min of the setting's S(B), steps."""
    measured: tuple[int, ...] = ()
    """Batch sizes (sequences) where some trial reached the target (the reference cell included)."""
    lower_bounds: tuple[tuple[int, int], ...] = ()
    """``(B, steps)`` of the missed cells: every trial ended censored (or diverged) after ``steps``,
    the budget a page reads as the lower bound ``S(B) > steps``."""

    def steps(self, batch_size: int) -> float:
        return self.s_min * (1.0 + self.b_noise / batch_size)


def spec_for(name: str, *, n_settings: int = 3, batch_sizes=(8, 16, 32, 64, 128, 256), lrs=(0.003, 0.01, 0.03),
             b_ref: int = 32) -> StudySpec:
    """A custom study over the tiny presets with D ∝ N (a Chinchilla-like family): setting ``i`` is
    model ``i mod 4`` at ``TOKENS_PER_PARAM·2^(i div 4)`` tokens per parameter (tiny-0.1M, 0.8M,
    3.1M at 983,040, 7,864,320 and 31,457,280 tokens)."""
    from cbscore.study.models import model_info

    models = ("tiny-0.1M", "tiny-0.8M", "tiny-3.1M", "tiny-6.3M")
    settings = []
    for i in range(n_settings):
        model = models[i % len(models)]
        n_params = model_info(model, 128)[0]
        settings.append({"model": model, "tokens": TOKENS_PER_PARAM * 2 ** (i // len(models)) * n_params})
    return StudySpec.from_dict({
        "name": name, "kind": "custom", "settings": settings, "batch_sizes": list(batch_sizes),
        "context_tokens": 128, "b_ref": b_ref, "search": {"kind": "grid", "lrs": list(lrs)},
        "max_trials": 100_000, "max_total_tokens": 1e15})


def _curve(s: float, last_step: float) -> tuple[list[int], list[float]]:
    """Evaluation steps up to ``last_step`` and losses ``TARGET·(s/step)^DECAY`` (crossing at s)."""
    steps = {max(1, int(round(last_step * (k + 1) / N_EVALS))) for k in range(N_EVALS)}
    if s <= last_step:
        steps.add(int(math.ceil(s)))
    steps = sorted(steps)
    return steps, [TARGET * (s / k) ** DECAY for k in steps]


def seed_study(tracker, spec: StudySpec, *, running: int = 0, b_noise_per_setting=None,
               missed_below_b_ref: int | None = None, now_s: float | None = None,
               gns: bool = True, ledger=None) -> dict[str, SeededSetting]:
    """Write ``spec`` as a finished study (plus ``running`` trials still running) into ``tracker``.

    Per setting ``i``, ``B_noise = b_noise_per_setting[i]`` (default ``64·2^i``) and ``S_min`` is
    chosen so that the reference run at ``B_ref`` reaches the target exactly after D tokens. In
    each cell the middle learning rate reaches the target at ``S(B)``, the others ``SLOWER``
    times later, and the largest diverges at the largest batch size. Budgets are the planner's:
    below B_ref ``(1 + budget_margin)·D`` tokens, above it a step cap of ``(1 + budget_margin)``
    times the fewest steps a smaller batch size needed. The largest batch size of every setting
    but the last is *missed* (:data:`MISSED`): its trials that do not diverge end censored at the
    cap, and so do their re-runs at twice it (as the planner runs them: trial id ``….x2``).
    ``missed_below_b_ref``: a batch size below B_ref missed in every setting, its trials (and their
    re-runs at twice the budget) censored after their whole token budget; the planner then skips the
    batch sizes between it and B_ref (tokens to target never fall as B grows), and they are not
    written. ``gns=False``: no trial logs ``gns/b_simple`` (no noise-scale forecast). With a
    ``ledger`` (:class:`workers.studies.ledger.Ledger`) every trial also gets the lease the runner and
    its worker leave (done, or running on another host) and each ended one its row of the pages'
    read model (:func:`workers.studies.read_model.keep_ended`, as a trial that ends keeps it). The first
    ``running`` non-reference cells get one more trial (seed 1) that is still running. Returns
    the settings.
    """
    from mlflow.entities import Param

    from cbscore.study.planner import RERUN_CAP_FACTOR, RERUN_TAG, _make_trial, cell_budget_tokens
    from workers.tracking import EVAL_CURVE_TAG, RUN_STATUS, eval_curve_json, metric, trial_params

    now_s = time.time() if now_s is None else now_s
    settings = spec.resolve_settings()
    b_noises = b_noise_per_setting or [64.0 * 2 ** i for i in range(len(settings))]
    params = {k: v for k, v in spec.to_dict().items() if not isinstance(v, (dict, list)) and v is not None}
    exp_id, parent_id = tracker.create_study(
        spec.name, spec_dict=spec.to_dict(), spec_yaml=spec.to_yaml(), params=params,
        tags={"kind": spec.kind, "b_ref": str(spec.b_ref), "overhead": str(spec.overhead)})
    tracker.set_tags(parent_id, {f"target/{s.setting_id}": f"{TARGET:.6g}" for s in settings})
    lrs = spec.search.lrs
    best_lr = lrs[len(lrs) // 2]
    out: dict[str, SeededSetting] = {}
    counts: dict[str, int] = {}
    tokens_spent = 0
    left_running = running
    for index, (setting, b_noise) in enumerate(zip(settings, b_noises)):
        ref_steps = round(setting.tokens / (spec.b_ref * spec.context_tokens))  # D tokens at B_ref
        seeded = SeededSetting(setting_id=setting.setting_id, b_noise=float(b_noise),
                               s_min=ref_steps / (1.0 + b_noise / spec.b_ref))
        fewest = math.inf  # the fewest steps to target of the batch sizes seeded so far
        measured, bounds = [], []
        for b in spec.batch_sizes:
            if missed_below_b_ref is not None and missed_below_b_ref < b < spec.b_ref:
                continue  # skipped by the planner: never run
            role = "reference" if b == spec.b_ref else "trial"
            cap = None
            if b > spec.b_ref:  # S(B) never grows with B: the planner's step cap is the budget
                cap = int(math.ceil((1 + spec.budget_margin) * fewest - 1e-9))
            budget_tokens = cell_budget_tokens(spec, setting, b, role, cap)
            budget_steps = budget_tokens // (b * spec.context_tokens)
            missed = role == "trial" and (b == missed_below_b_ref
                                          or (b == spec.batch_sizes[-1] and index < len(settings) - 1))
            if not missed:
                fewest = min(fewest, seeded.steps(b))
                measured.append(b)
            else:
                bounds.append((b, 0))  # the most steps a censored rate trained: its re-run's (below)
            diverges = lrs[-1] if (b == spec.batch_sizes[-1] and role == "trial") else None
            trials = [(lr, 0, False) for lr in lrs]
            if missed:  # the planner re-runs each censored rate of a cell where none reached, at twice its budget
                trials += [(lr, 0, True) for lr in lrs if lr != diverges]
            if left_running and role == "trial":
                left_running -= 1
                trials.append((best_lr, 1, False))  # one more seed, still running
            for lr, seed, rerun in trials:
                own_cap = None if cap is None else int(math.ceil((RERUN_CAP_FACTOR if rerun else 1.0) * cap))
                ts = _make_trial(spec, setting, batch_size=b, role=role, lr=lr, seed=seed, tag=lr_tag(lr),
                                 max_steps=own_cap, target_loss=None if role == "reference" else TARGET,
                                 budget_factor=RERUN_CAP_FACTOR if rerun else 1.0)
                own_steps = ts.max_tokens // (b * spec.context_tokens)
                s = seeded.steps(b) * (1.0 if lr == best_lr else SLOWER)
                if missed:
                    s = max(s, MISSED * budget_steps)
                is_running = seed == 1
                diverged = lr == diverges
                if is_running:
                    last, outcome = max(2, int(s * 0.6)), "running"  # still above the target
                elif role == "reference":
                    # The planner's reference budget, (1 + budget_margin)·D: past D, where it crosses.
                    last, outcome = own_steps, "finished"
                elif diverged:
                    last, outcome = max(2, int(s / 3)), "diverged"
                elif s <= own_steps:
                    last, outcome = int(math.ceil(s)), "reached"
                else:
                    last, outcome = own_steps, "censored"
                    bounds[-1] = (b, max(bounds[-1][1], own_steps))
                steps, losses = _curve(s, last)
                if diverged:
                    losses[-1] = float("nan")
                metrics = [metric("eval/loss_ewa", v, k, now_s) for k, v in zip(steps, losses)]
                metrics += [metric("eval/loss_ewa_0.999", v, k, now_s) for k, v in zip(steps, losses)]
                if gns:
                    metrics += [metric("gns/b_simple", b_noise / GNS_RATIO, k, now_s) for k in steps]
                figures = {"progress/step": last, "progress/tokens": last * b * spec.context_tokens,
                           "perf/tokens_per_s": 25_000.0, "heartbeat": now_s}
                if not is_running:
                    figures["summary/final_eval_loss"] = losses[-1]
                if outcome == "reached":
                    figures["summary/steps_to_target"] = s
                metrics += [metric(k, v, last, now_s) for k, v in figures.items() if math.isfinite(v)]
                trial_id = ts.trial_id + (f".{RERUN_TAG}" if rerun else "")
                tags = {"mlflow.parentRunId": parent_id, "trial_id": trial_id, "attempt": "1", "study": spec.name,
                        "setting": setting.setting_id, "cell": f"{setting.setting_id}.b{b}", "model": setting.model,
                        "batch_size": str(b), "lr": repr(lr), "seed": str(seed), "role": role,
                        "max_tokens": str(ts.max_tokens), "max_steps": "" if own_cap is None else str(own_cap),
                        "search_number": "",
                        "target_loss": "" if role == "reference" else repr(TARGET),
                        "n_params": str(setting.n_params), "setting_tokens": str(setting.tokens),
                        "context_tokens": str(spec.context_tokens), "queue": "cpu",
                        "beta2": repr(0.999 if b < 256 else 0.995), "ewa_taus": json.dumps([0.999]),
                        "status": outcome, "outcome": "" if is_running else outcome, "worker": "seed@localhost"}
                # The runner's params (workers.tracking.trial_params) and TrialSpec tag, so a
                # seeded run weighs what a real one does in every read.
                tags["trial_spec"] = json.dumps(dataclasses.replace(ts, trial_id=trial_id).to_dict(), sort_keys=True)
                params = [Param(k, v) for k, v in trial_params(ts.train_config).items()]
                if not is_running:  # the whole eval curve, as an ended trial's result tags hold it
                    curve = eval_curve_json(steps, losses)
                    if curve is not None:
                        tags[EVAL_CURVE_TAG] = curve
                # A few calls per trial (the runner and a worker make more; the result is the same).
                run = tracker.client.create_run(exp_id, run_name=trial_id, tags=tags)
                for i in range(0, len(params), 100):
                    tracker.client.log_batch(run.info.run_id, params=params[i:i + 100])
                tracker.client.log_batch(run.info.run_id, metrics=metrics)
                if is_running:
                    tracker.client.update_run(run.info.run_id, status=RUN_STATUS["running"])
                else:  # ended a while ago, as in a study that has been running for some time
                    tracker.client.set_terminated(run.info.run_id, status=RUN_STATUS[outcome],
                                                  end_time=int((now_s - ENDED_AGO_S) * 1000))
                if ledger is not None:
                    _lease(ledger, tracker, spec.name, trial_id, run.info.run_id, None if is_running else outcome,
                           now_s - (0 if is_running else ENDED_AGO_S))
                counts[outcome] = counts.get(outcome, 0) + 1
                tokens_spent += last * b * spec.context_tokens
        out[setting.setting_id] = dataclasses.replace(seeded, measured=tuple(measured), lower_bounds=tuple(bounds))
    # The runner's summary of its last pass over the study (the studies list reads it).
    tracker.set_tags(parent_id, {"counts": json.dumps(counts, sort_keys=True), "tokens_spent": str(tokens_spent),
                                 "advanced_s": f"{now_s:.3f}"})
    if not running:
        tracker.set_study_status(parent_id, "done", end="FINISHED")
    return out


def _lease(ledger, tracker, study: str, trial_id: str, run_id: str, outcome: str | None, now_s: float) -> None:
    """The lease a trial leaves in the ledger: created and queued by the runner, claimed by a worker
    of another host (never judged dead here), done with ``outcome`` and kept in the read model."""
    from workers.studies.read_model import keep_ended

    assert ledger.create(trial_id, study, "cpu", owner="seed", now_s=now_s, stale_after_s=60.0)
    assert ledger.mark_queued(trial_id, run_id=run_id, owner="seed", now_s=now_s)
    assert ledger.claim(trial_id, 1, owner="seed-worker@elsewhere:1", worker="seed@elsewhere", now_s=now_s)
    if outcome is not None:
        assert ledger.finish(trial_id, 1, owner=None, outcome=outcome, now_s=now_s)
        assert keep_ended(ledger, tracker, trial_id)


def expected_cbs(seeded: SeededSetting, b_ref: float, overhead: float = 0.2) -> float:
    """The closed form ``B* = (1 + r)·B_ref + r·B_noise`` (DESIGN.md §1)."""
    return (1.0 + overhead) * b_ref + overhead * seeded.b_noise


def expected_fit(seeded: SeededSetting):
    """The known ``S(B)`` fit of a seeded setting: :func:`cbscore.analysis.fit_steps` of the seeded
    ``S(B)`` at its measured batch sizes, with its missed cells as lower bounds (DESIGN.md §1).

    Without a missed cell it is the seeded curve (``B_noise``, ``S_min`` and :func:`expected_cbs`
    exactly). A missed cell's bound lies above the seeded curve (above B_ref a step cap is
    ``1 + budget_margin`` times the steps of a smaller batch size; below it the tokens ``S(B)·B·T``
    of the curve grow with B and stay under ``(1 + budget_margin)·D``), so the censored likelihood
    moves the curve towards it. A page reads the same fit off the study's trials, within
    :data:`REL`.
    """
    from cbscore.analysis import fit_steps

    return fit_steps(seeded.measured, [seeded.steps(b) for b in seeded.measured], lower_bounds=seeded.lower_bounds)


def expected_calibration(settings: dict[str, SeededSetting]) -> float:
    """The known calibration factor ``c`` of a seeded study: the geometric mean over its settings of
    the fitted ``B_noise`` (:func:`expected_fit`) over the forecast ``B̂ = B_noise / GNS_RATIO``.
    ``GNS_RATIO`` where no cell was missed."""
    logs = [math.log(expected_fit(s).b_noise / (s.b_noise / GNS_RATIO)) for s in settings.values()]
    return math.exp(sum(logs) / len(logs))
