"""A trial's :class:`~cbscore.train.result.TrialResult`, built from the trainer's state when its
loop ends (:mod:`cbscore.train.trainer`): the crossing read off the evaluations, the throughput with the
off-clock steps left out, and the losses a report shows."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from cbscore.analysis import first_crossing
from cbscore.train.batch_plan import BatchPlan
from cbscore.train.callbacks import TrainState
from cbscore.train.throughput import mfu, peak_memory_bytes
from cbscore.train.device import finite_or_none
from cbscore.train.config import TrainConfig
from cbscore.train.result import TrialResult


def trial_result(cfg: TrainConfig, state: TrainState, plan: BatchPlan, *, status: str, reason: str | None,
                 off_clock: tuple[float, int], start_step: int, beta2: float, taus: tuple[float, ...],
                 peak: float | None, device: torch.device, micro: int,
                 train_log: Sequence[tuple[int, float]]) -> TrialResult:
    """The result of a loop that ended with ``status``: ``off_clock`` is the ``(seconds, tokens)``
    of the steps kept off the throughput clock, ``start_step`` where this process started (a
    resumed trial's throughput counts its own steps only)."""
    history = state.eval_history
    steps_to_target = target_tau = None
    if status == "reached":
        steps_to_target = first_crossing([e.step for e in history], [e.loss for e in history], cfg.target_loss)
        target_tau = crossing_tau(history, cfg.target_loss)
    trained_tokens = plan.tokens_at(state.step) - plan.tokens_at(start_step)
    tokens_per_s = None
    if trained_tokens > 0 and state.train_seconds > 0:
        tokens_per_s = trained_tokens / state.train_seconds
        if trained_tokens > off_clock[1] and state.train_seconds > off_clock[0]:
            tokens_per_s = (trained_tokens - off_clock[1]) / (state.train_seconds - off_clock[0])
    finite = [e.loss for e in history if math.isfinite(e.loss)]
    return TrialResult(
        status=status,
        stop_reason=reason,
        target_loss=cfg.target_loss,
        steps_to_target=steps_to_target,
        # tokens this run trained up to the crossing (a branch's base tokens not counted)
        tokens_to_target=None if steps_to_target is None else plan.tokens_at(steps_to_target) - plan.start_tokens,
        final_eval_loss=finite_or_none(history[-1].loss) if history else None,
        best_eval_loss=min(finite) if finite else None,
        final_raw_loss=finite_or_none(history[-1].raw_loss) if history else None,
        steps=state.step,
        tokens=state.tokens,
        total_steps=state.total_steps,
        warmup_steps=state.warmup_steps,
        beta2=beta2,
        ewa_taus=taus,
        tokens_per_s=tokens_per_s,
        mfu=mfu(None if tokens_per_s is None else tokens_per_s / cfg.devices, state.flops_per_token, peak),
        n_params=state.n_params,
        flops_per_token=state.flops_per_token,
        train_seconds=state.train_seconds,
        eval_seconds=state.eval_seconds,
        peak_memory_bytes=peak_memory_bytes(device),
        device=state.device,
        resumed_from_step=state.resumed_from_step,
        devices=cfg.devices,
        micro_batch_size=micro,
        target_tau=target_tau,
        eval_history=tuple(history),
        train_log=tuple(train_log),
    )


def crossing_tau(history, target: float) -> str | None:
    """The τ key whose averaged loss is lowest at the first evaluation at or below ``target``."""
    for point in history:
        if math.isfinite(point.loss) and point.loss <= target:
            finite = {k: v for k, v in point.ewa_losses.items() if math.isfinite(v)}
            return min(finite, key=finite.get) if finite else None
    return None
