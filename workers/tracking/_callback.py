"""The trainer callback that logs a trial to MLflow, and the metrics and tags of a result."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

from mlflow.entities import Metric, RunTag

from cbscore.train.callbacks import Callback, TrainState
from cbscore.train.result import EvalPoint, TrialResult
from workers.tracking._base import _MAX_TAG, CURVE_PREFIXES, EVAL_CURVE_TAG, GNS_METRICS, _ms, is_transient, retrying
from workers.tracking._tracker import Tracker

_log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- the callback
class LeaseLost(Exception):
    """A fenced write found that its attempt no longer holds the trial (it writes nothing)."""


class LeaseUnknown(ConnectionError):
    """A fenced write could not ask the ledger (an outage: transient, the write waits)."""


class TrackingOutage(ConnectionError):
    """The trial's metric writes have failed for longer than :func:`outage_hold_s`: the trial
    stops holding its worker and gives its attempt back (transient: it costs no attempt)."""


def outage_hold_s() -> float:
    """``CBS_TRACKING_OUTAGE_HOLD_S`` (default 120): how long a trial trains on while its metric
    writes fail with a transient error (its points wait in memory). Past it the next flush raises
    :class:`TrackingOutage`, so a tracking outage holds a worker at most this long, plus one flush
    (one write, bounded by :data:`FLUSH_HTTP_ENV`, and none while a retry is not due)."""
    return float(os.environ.get("CBS_TRACKING_OUTAGE_HOLD_S") or 120.0)


#: The trial process's MLflow HTTP client, set when training starts unless the operator set them:
#: MLflow's defaults (7 retries with a doubling backoff from 2 s, 120 s per request) let one write
#: to a server that is down block the training loop for minutes (a 25-60 s trial took
#: 194 s). The callback's own retry schedule (below) and the give-back take their place.
FLUSH_HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}
#: Seconds between two tries of a failing store during training (doubling up to the last).
RETRY_WAITS_S = (2.0, 4.0, 8.0, 15.0)


def metric(key: str, value: float, step: int, now_s: float | None = None) -> Metric:
    return Metric(key=key, value=float(value), timestamp=_ms(now_s), step=int(step))


def eval_metrics(point: EvalPoint, now_s: float | None = None) -> list[Metric]:
    """The metrics of one evaluation: best-τ, raw and per-τ averaged-weights losses."""
    out = [metric("eval/loss_ewa", point.loss, point.step, now_s),
           metric("eval/loss_raw", point.raw_loss, point.step, now_s)]
    out += [metric(f"eval/loss_ewa_{tau}", loss, point.step, now_s) for tau, loss in point.ewa_losses.items()]
    return out


def result_tags(result: TrialResult) -> dict[str, str]:
    """The tags an ended trial's run carries from its result (the steps table reads ``beta2`` and
    ``target_tau``): set by the holder, and restored by the runner's repair from the checkpoint."""
    tags = {"stop_reason": result.stop_reason or "",
            "steps_to_target": "" if result.steps_to_target is None else repr(result.steps_to_target),
            "beta2": repr(result.beta2), "ewa_taus": json.dumps(list(result.ewa_taus)),
            "target_tau": result.target_tau or ""}
    curve = eval_curve_tag(result)
    if curve is not None:
        tags[EVAL_CURVE_TAG] = curve
    return tags


def eval_curve_tag(result: TrialResult) -> str | None:
    """The ended trial's ``eval/loss_ewa`` history as one tag, ``[[steps], [losses]]`` in JSON
    (floats written exactly), so that reading a study's records needs no metric-history call per
    run (:meth:`Tracker.history`; a page's first read). ``None`` where it does not fit a tag or
    holds a non-finite loss (JSON has no NaN): the history is then read as before."""
    points = {p.step: p.loss for p in result.eval_history}  # one value per step, as the history keeps
    steps = sorted(points)
    return eval_curve_json(steps, [points[s] for s in steps])


def eval_curve_json(steps, losses) -> str | None:
    """``[[steps], [losses]]`` of a curve, or ``None`` when it is empty, holds a non-finite loss, or
    does not fit an MLflow tag (:func:`eval_curve_tag`)."""
    if not len(steps) or not all(math.isfinite(v) for v in losses):
        return None
    text = json.dumps([[int(s) for s in steps], [float(v) for v in losses]], separators=(",", ":"))
    return text if len(text) <= _MAX_TAG else None


def summary_metrics(result: TrialResult, now_s: float | None = None) -> list[Metric]:
    """End-of-trial figures at the trial's last step (only those that are known)."""
    figures = {
        "summary/steps_to_target": result.steps_to_target,
        "summary/tokens_to_target": result.tokens_to_target,
        "summary/final_eval_loss": result.final_eval_loss,
        "summary/best_eval_loss": result.best_eval_loss,
        "summary/final_raw_loss": result.final_raw_loss,
        "summary/steps": result.steps,
        "summary/tokens": result.tokens,
        "summary/total_steps": result.total_steps,
        "summary/tokens_per_s": result.tokens_per_s,
        "summary/mfu": result.mfu,
        "summary/train_seconds": result.train_seconds,
        "summary/eval_seconds": result.eval_seconds,
        "summary/peak_memory_bytes": result.peak_memory_bytes,
        "progress/tokens": result.tokens,
        "progress/step": result.steps,
    }
    return [metric(k, v, result.steps, now_s) for k, v in figures.items() if v is not None]


class MlflowCallback(Callback):
    """Buffers a trial's metrics and sends them with one ``log_batch`` per flush.

    A flush happens every ``flush_s`` seconds (it carries the ``heartbeat`` metric: wall time at
    the trial's step), on every evaluation when ``flush_on_eval`` is set, and at the end. The
    callback does not end the run: the runner knows the outcome (``pruned`` vs ``stopped``).

    Every metric write is fenced by the trial's lease: ``fence()`` (the trial's, when given) is
    asked right before each batch (True: this attempt holds the trial; False: it lost it, e.g. a
    process frozen past the staleness limit and replaced; None: the ledger cannot say). A holder
    that lost the trial writes nothing more (its points are the new holder's to compute) and asks
    the trainer to stop; one that cannot say keeps its points for the next flush, as during a
    tracking outage. (A freeze between the fence and the write itself is not covered: the two
    are in different stores.)
    """

    def __init__(self, tracker: Tracker, run_id: str, *, flush_s: float = 5.0, flush_on_eval: bool = False,
                 fence: Callable[[], bool | None] | None = None):
        self.tracker = tracker
        self.run_id = run_id
        self.fence = fence
        self.fenced_off = False
        self.flush_s = flush_s
        self.flush_on_eval = flush_on_eval
        self.buffer: list[Metric] = []
        self.last_flush = 0.0
        self.flushes = 0
        #: The last step of each curve key in the store or the buffer: a resumed trial recomputes
        #: the steps between its checkpoint and the crash, and each point is logged once. Per key,
        #: not per step: a kill between the chunks of one flush leaves some keys of a step in the
        #: store and others not, and the next attempt sends exactly the missing ones.
        self.through: dict[str, int] = {}
        #: During an outage: when the first write failed, and when the next may be tried (monotonic s).
        self.failing_since: float | None = None
        self.failures = 0
        self.retry_at = 0.0

    #: Metrics kept while the store is unreachable; beyond this the oldest training-curve points
    #: go first (evaluations and summaries are what the study reads, so they are kept).
    max_buffer = 200_000

    def flush(self, state: TrainState, *, must: bool = False) -> None:
        """Send the buffer. A failure mid-training keeps the buffer for the next flush and goes on
        (the store may be restarting); with ``must`` (the end of the trial) it raises, and the
        trial gives its attempt back (:mod:`workers.trials.trial`)."""
        now = time.time()
        if self.fenced_off:
            return
        for key, value in (("heartbeat", now), ("progress/step", state.step), ("progress/tokens", state.tokens)):
            self._add(key, value, state.step)  # once per step (not at step 0 of a trial found ended)
        self.last_flush = now
        clock = time.monotonic()
        if not must and self.failing_since is not None:
            if clock - self.failing_since > outage_hold_s():
                raise TrackingOutage(
                    f"metric writes have failed for {clock - self.failing_since:.0f} s, longer than "
                    f"CBS_TRACKING_OUTAGE_HOLD_S={outage_hold_s():g}: the trial gives its worker back")
            if clock < self.retry_at:  # a retry is not due: train on, the points wait
                self._trim()
                return
        batch, self.buffer = self.buffer, []
        attempts = None if must else 1  # during training one try per flush; the schedule below retries
        try:
            if self.fence is None:
                self.tracker.log_metrics(self.run_id, batch, attempts=attempts)
            else:
                self.tracker.log_metrics(self.run_id, batch, fence=self._fence, attempts=attempts)
        except LeaseLost as exc:  # the new holder computes and writes these points: none from here
            self.buffer, self.fenced_off = [], True
            state.request_stop("superseded")
            _log.warning(f"cbs trial: {exc}: {len(batch)} metrics not written, nothing more will be")
            return
        except Exception as exc:
            self.buffer = batch + self.buffer
            self._trim()
            if must or not is_transient(exc):
                raise
            failures = 0 if self.failing_since is None else self.failures
            self.failing_since = clock if self.failing_since is None else self.failing_since
            self.failures = failures + 1
            self.retry_at = time.monotonic() + RETRY_WAITS_S[min(failures, len(RETRY_WAITS_S) - 1)]
            _log.warning(f"cbs trial: metrics kept for the next flush ({len(self.buffer)} waiting): {exc}")
            return
        self.failing_since, self.failures = None, 0
        self.flushes += 1

    def _fence(self) -> None:
        """Raise :class:`LeaseLost` or :class:`LeaseUnknown` unless this attempt holds the trial."""
        held = self.fence()
        if held is None:
            raise LeaseUnknown("the ledger cannot say whether this attempt still holds the trial")
        if not held:
            raise LeaseLost("this attempt no longer holds the trial")

    def _trim(self) -> None:
        excess = len(self.buffer) - self.max_buffer
        if excess > 0:
            curve = [i for i, m in enumerate(self.buffer) if m.key.startswith(("train/", "optim/", "perf/", "heartbeat",
                                                                                "progress/"))]
            drop = set(curve[:excess])
            self.buffer = [m for i, m in enumerate(self.buffer) if i not in drop]

    def _logged_steps(self) -> dict[str, int]:
        """The last step of every key in the store: of a curve (:data:`CURVE_PREFIXES`) or a
        ``summary/*`` figure (logged once, at the end) from its history; of ``heartbeat`` and
        ``progress/*`` from the latest ``progress/step``, whose value is its step."""
        run = retrying(lambda: self.tracker.client.get_run(self.run_id), what="reading the run")
        out = {}
        for key in run.data.metrics:
            if key.startswith((*CURVE_PREFIXES, "summary/")):
                history = retrying(lambda: self.tracker.client.get_metric_history(self.run_id, key),
                                   what=f"reading the history of {key}")
                out[key] = max((m.step for m in history), default=-1)
        if "progress/step" in run.data.metrics:
            progress = int(run.data.metrics["progress/step"])
            out.update({"heartbeat": progress, "progress/step": progress, "progress/tokens": progress})
        return out

    def _add(self, key: str, value: float, step: int) -> None:
        """Buffer one point unless ``key`` is logged (or buffered) at ``step`` or later already."""
        if step > self.through.get(key, -1):
            self.buffer.append(metric(key, value, step))
            self.through[key] = step

    def pre_train(self, state: TrainState) -> None:
        for key, value in FLUSH_HTTP_ENV.items():  # this trial's process only (see FLUSH_HTTP_ENV)
            os.environ.setdefault(key, value)
        tags = [RunTag("total_steps", str(state.total_steps)), RunTag("warmup_steps", str(state.warmup_steps)),
                RunTag("device", state.device)]
        if state.resumed_from_step is not None:
            tags.append(RunTag("resumed_from_step", str(state.resumed_from_step)))
        # What an earlier attempt logged (also before the "already ended" path, which re-logs
        # from the checkpoint's result what the store lacks: see post_train).
        self.through = self._logged_steps()
        # The checkpoint's own history first: whatever of it the store lacks.
        self._add_history(state.eval_history, ())
        self.flush(state, must=True)
        if not self.fenced_off:
            retrying(lambda: self.tracker.client.log_batch(self.run_id, tags=tags), what="tagging the run")

    def _add_history(self, evals, train_log) -> None:
        """Buffer the evaluations and train losses of a checkpoint or result past what is logged
        (the other training-curve keys of those steps are not kept in a checkpoint; the flush
        before every checkpoint sent them)."""
        for step, loss in train_log:
            self._add("train/loss", loss, step)
        for point in evals:
            for m in eval_metrics(point):
                self._add(m.key, m.value, m.step)

    def post_step(self, state: TrainState, metrics: dict[str, Any] | None) -> None:
        if metrics is not None:
            step = state.step
            self._add("train/loss", metrics["train_loss"], step)
            self._add("optim/lr", metrics["lr"], step)
            for key, name in (("grad_norm", "optim/grad_norm"), ("tokens_per_s", "perf/tokens_per_s"),
                              ("tokens_per_s_per_device", "perf/tokens_per_s_per_device"), ("mfu", "perf/mfu"),
                              *GNS_METRICS.items()):  # None where not measured (GNS: not finite)
                if metrics.get(key) is not None:
                    self._add(name, metrics[key], step)
        if time.time() - self.last_flush >= self.flush_s:
            self.flush(state)

    def post_eval(self, state: TrainState, point: EvalPoint) -> None:
        self._add_history((point,), ())
        if self.flush_on_eval:
            self.flush(state)

    def may_checkpoint(self, state: TrainState) -> bool:
        """History before checkpoint: send every metric up to this step first, and skip the
        checkpoint while the store cannot take them (a checkpoint never runs ahead of the
        history: an attempt that resumes from it recomputes nothing before it)."""
        self.flush(state)
        return not self.buffer and not self.fenced_off

    def post_train(self, state: TrainState, result: TrialResult) -> None:
        # an attempt that found the trial ended (its result in the checkpoint) sends what the
        # store lacks of the result's histories (after a final flush that failed)
        self._add_history(result.eval_history, result.train_log)
        for m in summary_metrics(result):  # once: an attempt that finds the trial ended sends what is missing
            self._add(m.key, m.value, m.step)
        self.flush(state, must=True)

    def on_error(self, state: TrainState, exc: BaseException) -> None:
        try:
            self.flush(state)
        except Exception as flush_exc:  # noqa: BLE001 - the training error is the one to report
            _log.warning(f"cbs trial: could not send the last metrics: {flush_exc}")
