"""Branches of a local-CBS study: from a base trial's snapshot, ``k·B0`` at ``f(k)·η0`` for ``Δ`` tokens.

Merrill et al. 2025 (arXiv 2505.23971, §3) measure the local critical batch size at a point of a
run by branching from its checkpoint at batch ``k·B0`` with learning rate ``f(k)·η0`` and the
optimizer state carried over, each branch trained for a window of ``Δ`` tokens. The learning-rate
rule ``f`` is the square root for Adam (Malladi et al. 2022, arXiv 2205.10287, the SDE scaling
rule: ``η ∝ √B``) and linear for SGD (Goyal et al. 2017, arXiv 1706.02677: ``η ∝ B``).

:func:`branch_config` turns a base :class:`~cbscore.train.config.TrainConfig` and a
:class:`BranchSpec` into the branch's own ``TrainConfig``: everything the trainer needs to carry
the base on (:mod:`cbscore.train.branch`), with the recipe of the base stated explicitly.

*The weight average a branch is read on* (:data:`AVERAGING`). The base's EWA τ is a
decay per step. Carried into a branch of ``n`` steps unchanged (``carry``, what the lab did
before), it keeps a share ``τ^n`` of its weight on the base's past: at a fixed window ``Δ`` a
``k = 8`` branch takes 8× fewer steps than ``k = 1``, so its averaged loss reads more of the
(higher-loss) past and rises with ``k`` while its training loss falls. Two readings remove that:

- ``branch`` (the default): the average starts at the branch (``TrainConfig.branch.branch_ewa = reset``:
  ``ξ_0 = 0``, bias correction ``1 − Π τ_s`` over the branch's own steps; :mod:`cbscore.train.averaging`)
  and decays per token as the base does (``ewa_batch_size = B0``: ``τ^k`` per step of ``k·B0``), so
  every ``k`` weighs the same tokens of its window alike and nothing of the base's;
- ``tokens``: the base's average carried on at ``τ_k = τ^k`` per step, so after ``Δ`` tokens every
  ``k`` keeps the same share ``τ^(Δ / (B0·T))`` of the base's past (equal horizons in tokens).

The raw weights' held-out loss is reported beside either (``TrialResult.final_raw_loss``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cbscore.config import Config, checked, one_of
from cbscore.errors import ConfigError, positive_finite, positive_int
from cbscore.train.branch_config import BranchConfig
from cbscore.train.checkpoint import snapshot_path
from cbscore.train.config import TrainConfig

LR_RULES = ("sqrt", "linear", "constant")
AVERAGING = ("branch", "tokens", "carry")
"""How a branch's weight average is read (module docstring): from the branch, in tokens
(default); the base's carried at ``τ^k`` per step; the base's carried at ``τ`` per step (before
issue 39: the averaged loss then reads more of the base's past at larger ``k``)."""
DEFAULT_MULTIPLIERS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
"""The issue's default grid of ``k`` (fractions below 1 may be added at early checkpoints)."""


def lr_factor(multiplier: float, rule: str = "sqrt") -> float:
    """``f(k)``: ``√k`` (``sqrt``, Adam: Malladi et al. 2022), ``k`` (``linear``, SGD: Goyal et al.
    2017) or 1 (``constant``)."""
    positive_finite("multiplier", multiplier)
    if rule not in LR_RULES:
        raise ConfigError("lr_rule", rule, f"must be one of {', '.join(LR_RULES)}")
    return {"sqrt": math.sqrt(multiplier), "linear": float(multiplier), "constant": 1.0}[rule]


@dataclass(frozen=True, kw_only=True)
class BranchSpec(Config):
    """One branch of a local-CBS study."""

    checkpoint_tokens: int = checked(positive_int)
    """Stream position of the base snapshot it starts from, tokens (one of the base's
    ``branch.snapshot_tokens``)."""
    multiplier: float = checked(positive_finite)
    """``k``: the branch's batch is ``k · B0`` sequences (a whole number)."""
    window_tokens: int = checked(positive_int)
    """``Δ``: tokens the branch trains; a whole number of the branch's steps (choose a multiple of
    every ``k·B0·T`` of the grid, so that every branch sees the same tokens)."""
    lr_rule: str = checked(one_of(LR_RULES), "sqrt")
    """``f`` of :func:`lr_factor`: ``sqrt`` (Adam), ``linear`` (SGD) or ``constant``."""
    averaging: str = checked(one_of(AVERAGING), "branch")
    """The weight average the branch is read on (:data:`AVERAGING`): ``branch`` (starts at the
    branch, ``τ`` per ``B0·T`` tokens), ``tokens`` (the base's, ``τ^k`` per step) or ``carry`` (the
    base's, ``τ`` per step)."""


def branch_config(base: TrainConfig, spec: BranchSpec, *, snapshot_dir: str,
                  checkpoint_dir: str | None = None) -> TrainConfig:
    """The branch's ``TrainConfig``: ``branch.branch_from = snapshot_path(snapshot_dir, tokens)``, batch
    ``k·B0``, learning rate ``f(k)·η0``, trained from ``checkpoint_tokens`` to
    ``checkpoint_tokens + window_tokens``; the base's β2, τ, warm-up and schedule anchor made
    explicit (so the branch continues them), its averages as ``spec.averaging`` says
    (``branch.branch_ewa``, ``ewa_batch_size``), no target, no snapshots of its own."""
    batch = spec.multiplier * base.batch_size
    if batch != round(batch):
        raise ConfigError("multiplier", spec.multiplier,
                          f"must make a whole batch of the base's batch_size={base.batch_size} sequences")
    batch = int(round(batch))
    plan = base.batch_plan()
    if not plan.is_boundary(spec.checkpoint_tokens):
        raise ConfigError("checkpoint_tokens", spec.checkpoint_tokens,
                          "must be a stream position the base run reaches after a whole step")
    batch_tokens = batch * base.context_tokens
    if spec.window_tokens % batch_tokens:
        raise ConfigError("window_tokens", spec.window_tokens,
                          f"must be a whole number of the branch's steps of {batch_tokens} tokens")
    schedule = base.lr_schedule()

    def divides(micro: int | None) -> int | None:  # a base's micro-batch that no longer splits the batch: chosen anew
        return micro if micro is not None and (batch // base.devices) % micro == 0 else None

    gns_micro = divides(base.gns_micro_batch_size)

    return base.replace(
        batch_size=batch,
        lr=lr_factor(spec.multiplier, spec.lr_rule) * base.lr,
        max_tokens=spec.checkpoint_tokens + spec.window_tokens,
        max_steps=None,
        target_loss=None,
        micro_batch_size=divides(base.micro_batch_size),
        gns_micro_batch_size=gns_micro if gns_micro is not None and gns_micro < batch else None,
        gns_half_life_tokens=base.resolved_gns_half_life_tokens(),
        beta2=base.resolved_beta2(),
        ewa_taus=base.resolved_ewa_taus(),
        # τ per step of the base's batch: τ^k per step of k·B0 (the same decay per token)
        ewa_batch_size=None if spec.averaging == "carry" else base.ewa_batch_size or base.batch_size,
        warmup_tokens=base.resolved_warmup_tokens(),
        schedule_batch_size=schedule.anchor_batch_tokens // base.context_tokens,
        schedule_tokens=schedule.steps.total_steps * schedule.anchor_batch_tokens,
        branch=BranchConfig(
            branch_from=str(snapshot_path(snapshot_dir, spec.checkpoint_tokens)),
            branch_step=plan.steps_before(spec.checkpoint_tokens),
            branch_tokens=spec.checkpoint_tokens,
            branch_ewa="reset" if spec.averaging == "branch" else "carry",
        ),
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_steps=base.checkpoint_every_steps if checkpoint_dir is not None else None,
    )
