"""What one training trial reports: its evaluations and its outcome (DESIGN.md §1, §2).

Outcomes (``TrialResult.status``):

- ``reached``: an averaged-weights evaluation was at or below ``target_loss``; the trial stopped
  there and ``steps_to_target`` is interpolated between the two evaluations that straddle it;
- ``censored``: a target was given and the budget was spent above it (``S > budget``);
- ``finished``: no target was given and the budget was spent (a reference run: its final
  averaged loss is what later sets the target);
- ``diverged``: a non-finite loss, or a logged train loss above ``divergence_factor`` × its
  running minimum after warm-up; a measurement, not a crash;
- ``stopped``: a callback asked the trainer to stop (pruning, cancel); ``stop_reason`` says why.
  The workers map a stop reason of ``"pruned"`` to their ``pruned`` outcome.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("reached", "censored", "finished", "diverged", "stopped")


@dataclass(frozen=True, kw_only=True)
class EvalPoint:
    """One evaluation on the held-out split."""

    step: int
    """Optimizer steps done when evaluated (0 = the initial weights)."""
    tokens: int
    """Training tokens seen by then (``step · batch_size · context_tokens``)."""
    loss: float
    """Best (lowest) averaged-weights loss over the tracked τ, nats per token: decides the target."""
    raw_loss: float
    """Loss of the raw (not averaged) weights, nats per token."""
    ewa_losses: dict[str, float] = field(default_factory=dict)
    """Averaged-weights loss per τ, keyed by ``f"{tau:g}"`` (e.g. ``"0.9995"``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict: a non-finite loss (a diverged evaluation) becomes ``None``."""
        return {
            "step": self.step,
            "tokens": self.tokens,
            "loss": _json_float(self.loss),
            "raw_loss": _json_float(self.raw_loss),
            "ewa_losses": {k: _json_float(v) for k, v in self.ewa_losses.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalPoint:
        return cls(
            step=int(d["step"]),
            tokens=int(d["tokens"]),
            loss=_float(d["loss"]),
            raw_loss=_float(d["raw_loss"]),
            ewa_losses={str(k): _float(v) for k, v in d.get("ewa_losses", {}).items()},
        )


@dataclass(frozen=True, kw_only=True)
class TrialResult:
    """Outcome and measurements of one call to :func:`cbscore.train.trainer.train`."""

    status: str
    """One of :data:`STATUSES` (module docstring)."""
    stop_reason: str | None
    """Why a ``stopped`` or ``diverged`` trial ended (free text), else ``None``."""
    target_loss: float | None
    """The target it was run against, nats per token (``None``: none given)."""
    steps_to_target: float | None
    """Interpolated optimizer steps to reach the target (``reached`` only)."""
    tokens_to_target: float | None
    """``steps_to_target · batch_size · context_tokens`` (``reached`` only)."""
    final_eval_loss: float | None
    """Best averaged-weights loss at the last evaluation, nats per token (``None`` if not finite)."""
    best_eval_loss: float | None
    """Lowest averaged-weights loss over all evaluations, nats per token."""
    final_raw_loss: float | None
    """Raw-weights loss at the last evaluation, nats per token (``None`` if not finite)."""
    steps: int
    """Optimizer steps done."""
    tokens: int
    """Training tokens seen (``steps · batch_size · context_tokens``)."""
    total_steps: int
    """The budget in steps (``min(max_tokens // batch_tokens, max_steps)``)."""
    warmup_steps: int
    """Warm-up length in steps (``ceil(warmup_tokens / batch_tokens)``)."""
    beta2: float
    """AdamW β2 actually used (``TrainConfig.default_recipe`` when the config left it ``None``)."""
    ewa_taus: tuple[float, ...]
    """EWA decay rates actually tracked."""
    tokens_per_s: float | None
    """Training throughput of all devices together (evaluation, checkpoints and the first step
    excluded), tokens/s."""
    mfu: float | None
    """Model-FLOPs utilisation of each device against its bf16 peak; ``None`` on CPU."""
    n_params: int
    """Non-embedding parameters N = 12·L·d²."""
    flops_per_token: float
    """Training FLOPs per token, 6N + 12·L·d·T."""
    train_seconds: float
    """Wall time of the training steps (this process), seconds."""
    eval_seconds: float
    """Wall time spent evaluating (this process), seconds."""
    peak_memory_bytes: int
    """CUDA max_memory_allocated, or the process's peak RSS on CPU."""
    device: str
    """``cpu`` or ``cuda:N`` (with the GPU name)."""
    resumed_from_step: int | None
    """Step of the checkpoint this run resumed from, ``None`` if it started fresh."""
    devices: int = 1
    """Processes (devices) that trained the trial; tokens/s per device is ``tokens_per_s / devices``."""
    micro_batch_size: int | None = None
    """Sequences per forward pass on one device at the end (after any out-of-memory halving)."""
    target_tau: str | None = None
    """The τ (``f"{tau:g}"``) whose averaged loss made the target crossing (``reached`` only): of
    the τ tracked at once, the one with the lowest loss at the first evaluation at or below the
    target."""
    eval_history: tuple[EvalPoint, ...] = ()
    """Every evaluation, in step order."""
    train_log: tuple[tuple[int, float], ...] = ()
    """``(step, mean train loss since the previous log step)`` at each log step."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict: tuples become lists, non-finite numbers (a diverged trial's loss) ``None``."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d = {k: _json_float(v) if isinstance(v, float) else v for k, v in d.items()}
        d["ewa_taus"] = list(self.ewa_taus)
        d["eval_history"] = [p.to_dict() for p in self.eval_history]
        d["train_log"] = [[s, _json_float(v)] for s, v in self.train_log]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialResult:
        d = dict(d)
        d["ewa_taus"] = tuple(d["ewa_taus"])
        d["eval_history"] = tuple(EvalPoint.from_dict(p) for p in d.get("eval_history", ()))
        d["train_log"] = tuple((int(s), _float(v)) for s, v in d.get("train_log", ()))
        return cls(**d)


def _json_float(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def _float(value: float | None) -> float:
    return math.nan if value is None else float(value)


def crossing_tau(history: Sequence[EvalPoint], target: float) -> str | None:
    """The τ key whose averaged loss is lowest at the first evaluation at or below ``target``."""
    for point in history:
        if math.isfinite(point.loss) and point.loss <= target:
            finite = {k: v for k, v in point.ewa_losses.items() if math.isfinite(v)}
            return min(finite, key=finite.get) if finite else None
    return None
