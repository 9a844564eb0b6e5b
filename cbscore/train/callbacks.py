"""Callbacks: how anything outside the trainer watches or steers a trial (OLMo-core style).

The trainer knows nothing about MLflow, Celery or Optuna. It calls these no-op hooks:

- ``pre_train(state)``: once, after the model, data and any checkpoint are loaded;
- ``post_step(state, metrics)``: after every optimizer step; ``metrics`` is a dict only on log
  steps (``None`` otherwise, so an every-step hook stays cheap: use it as a heartbeat);
- ``post_eval(state, point)``: after every evaluation (an :class:`EvalPoint`);
- ``post_train(state, result)``: once, with the :class:`TrialResult`, whatever the outcome;
- ``on_error(state, exc)``: when training raises; the exception is re-raised afterwards.

Any hook may call ``state.request_stop(reason)``; the trainer stops after the current step,
writes a checkpoint (when it has a ``checkpoint_dir``) and ends with status ``stopped``.

Metrics dict on log steps: ``step``, ``tokens``, ``train_loss`` (mean since the previous log
step, nats), ``lr``, ``grad_norm`` (before clipping), ``tokens_per_s`` (all devices together),
``tokens_per_s_per_device``, ``mfu`` (per device, against one device's peak); where the step
accumulates ≥ 2 micro-batches in one process (so on every evaluation step, a log step too), also
the gradient noise scale (:class:`cbscore.train.gns.GnsProbe`): ``gns_g2`` (smoothed ``|G|²``),
``gns_trace_sigma`` (smoothed ``tr Σ``, per sequence) and ``gns_b_simple`` (their ratio, in
sequences), each ``None`` where not finite.

In a multi-device trial (``devices > 1``) the hooks run in rank 0's process only, and a stop
asked in ``post_step`` takes effect at the same step on every rank.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from cbscore.train.result import EvalPoint, TrialResult

if TYPE_CHECKING:
    from torch import nn

    from cbscore.train.batch_plan import BatchPlan
    from cbscore.train.config import TrainConfig


@dataclass(kw_only=True, eq=False)
class TrainState:
    """Live view of a running trial, handed to every hook (mutable; read it, don't write it)."""

    config: TrainConfig
    total_steps: int
    """Budget in optimizer steps."""
    warmup_steps: int
    batch_tokens: int
    """Tokens per optimizer step (``batch_size · context_tokens``; the current segment's under a
    batch-size schedule)."""
    n_params: int
    flops_per_token: float
    device: str
    beta2: float | None = None
    """AdamW β2 in use (``TrainConfig.default_recipe`` when the config left it ``None``)."""
    ewa_taus: tuple[float, ...] = ()
    """EWA decay rates tracked."""
    model: nn.Module | None = None
    """The raw (not averaged) model being trained."""
    step: int = 0
    """Optimizer steps done."""
    lr: float = 0.0
    """Learning rate of the last step."""
    train_loss: float | None = None
    """Mean train loss over the last log interval, nats (updated on log steps)."""
    tokens_per_s: float | None = None
    """Training throughput over the last log interval, all devices together (tokens/s)."""
    tokens_per_s_per_device: float | None = None
    """``tokens_per_s / devices``."""
    mfu: float | None = None
    """Model-FLOPs utilisation of each device (:func:`cbscore.train.throughput.mfu`)."""
    devices: int = 1
    """Processes (devices) training the trial (DDP ranks)."""
    micro_batch_size: int | None = None
    """Sequences per forward pass on one device (after any out-of-memory halving)."""
    last_eval: EvalPoint | None = None
    eval_history: list[EvalPoint] = field(default_factory=list)
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    resumed_from_step: int | None = None
    started_at: float = field(default_factory=time.time)
    """Wall clock (epoch seconds) when this process started the trial."""
    last_step_at: float = field(default_factory=time.time)
    """Wall clock of the last completed step (a heartbeat)."""
    stop_reason: str | None = None

    plan: BatchPlan | None = None
    """Which sequences each step takes (:mod:`cbscore.train.batch_plan`); ``None`` = ``batch_tokens``
    a step from position 0."""

    @property
    def tokens(self) -> int:
        """Stream position: training tokens the model has seen since its initialisation (a
        branch counts its base's tokens too; a batch-size schedule its segments')."""
        return self.step * self.batch_tokens if self.plan is None else self.plan.tokens_at(self.step)

    @property
    def stop_requested(self) -> bool:
        return self.stop_reason is not None

    def request_stop(self, reason: str) -> None:
        """Ask the trainer to stop after the current step (first reason wins)."""
        if self.stop_reason is None:
            self.stop_reason = str(reason)


class Callback:
    """Base class with no-op hooks; override the ones you need."""

    def pre_train(self, state: TrainState) -> None:
        pass

    def post_step(self, state: TrainState, metrics: dict[str, Any] | None) -> None:
        pass

    def post_eval(self, state: TrainState, point: EvalPoint) -> None:
        pass

    def post_train(self, state: TrainState, result: TrialResult) -> None:
        pass

    def may_checkpoint(self, state: TrainState) -> bool:
        """Asked before every checkpoint write; any callback answering False skips it (a holder
        that lost its trial to a newer attempt must not write one; a tracker that cannot send
        the metrics up to this step yet: a checkpoint never runs ahead of the history)."""
        return True

    def post_checkpoint(self, state: TrainState) -> None:
        """A checkpoint at ``state.step`` was written (durable progress: a worker's ledger counts a
        lost attempt that saved none as a strike against the attempt cap)."""

    def on_error(self, state: TrainState, exc: BaseException) -> None:
        pass


class ProgressBar(Callback):
    """A tqdm bar over the token budget: tokens, train and eval loss, tokens/s and ETA."""

    def __init__(self, file: TextIO | None = None, disable: bool = False):
        self.file = file if file is not None else sys.stderr
        self.disable = disable
        self.bar = None

    def pre_train(self, state: TrainState) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(
            total=state.total_steps * state.batch_tokens,
            initial=state.tokens,
            unit="tok",
            unit_scale=True,
            file=self.file,
            disable=self.disable,
            dynamic_ncols=True,
        )

    def _postfix(self, state: TrainState) -> None:
        fields = {}
        if state.train_loss is not None:
            fields["loss"] = f"{state.train_loss:.3f}"
        if state.last_eval is not None:
            fields["eval"] = f"{state.last_eval.loss:.3f}"
        if state.tokens_per_s:
            fields["tok/s"] = f"{state.tokens_per_s:,.0f}"
        self.bar.set_postfix(fields, refresh=False)

    def post_step(self, state: TrainState, metrics: dict[str, Any] | None) -> None:
        if metrics is None or self.bar is None:
            return
        self.bar.update(state.tokens - self.bar.n)
        self._postfix(state)

    def post_eval(self, state: TrainState, point: EvalPoint) -> None:
        if self.bar is not None:
            self._postfix(state)
            self.bar.refresh()

    def post_train(self, state: TrainState, result: TrialResult) -> None:
        if self.bar is not None:
            self.bar.update(state.tokens - self.bar.n)
            self._postfix(state)
            self.bar.close()
            self.bar = None

    def on_error(self, state: TrainState, exc: BaseException) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
