"""The trainer configs of a horizon-bound schedule's runs (:mod:`cbscore.decay`).

All three start from one *base* ``TrainConfig`` of the cell (model, batch, peak rate, warm-up in
tokens, β2, τ, seed and data stated explicitly, as the study planner builds it) and change only
what the schedule needs.
"""

from __future__ import annotations

from cbscore.decay._horizons import DecayPoint
from cbscore.errors import ConfigError
from cbscore.train.branch_config import BranchConfig
from cbscore.train.checkpoint import snapshot_path
from cbscore.train.config import TrainConfig


def _explicit(base: TrainConfig) -> TrainConfig:
    """The base with its recipe and warm-up stated (a run of another length would derive others)."""
    return base.replace(beta2=base.resolved_beta2(), ewa_taus=base.resolved_ewa_taus(),
                        warmup_tokens=base.resolved_warmup_tokens(),
                        gns_half_life_tokens=base.resolved_gns_half_life_tokens())


def stable_config(base: TrainConfig, points: tuple[DecayPoint, ...], *, snapshot_dir: str) -> TrainConfig:
    """The stable run: ``constant`` after the warm-up (the rates of every ``wsd`` run before its
    decay) to the last horizon, a read-only snapshot at each branch point, no target (its EWA
    history is the ``constant_ewa`` reading)."""
    if not points:
        raise ConfigError("decay.points", [], "must list one branch point at least")
    if base.branch is not None and (base.branch.batch_schedule or base.branch.branch_from is not None):
        raise ConfigError("batch_schedule", list(base.branch.batch_schedule), "a stable run has one batch and no base of its own")
    end = max(p.horizon_steps for p in points) * base.batch_tokens
    snapshots = BranchConfig(snapshot_dir=snapshot_dir,
                             snapshot_tokens=tuple(sorted({p.branch_step * base.batch_tokens for p in points})))
    return _explicit(base).replace(
        schedule="constant", schedule_tokens=None, max_tokens=end, max_steps=None, target_loss=None, branch=snapshots)


def decay_branch_config(stable: TrainConfig, point: DecayPoint, *, decay_fraction: float, min_lr_ratio: float,
                        checkpoint_dir: str | None = None) -> TrainConfig:
    """The decay branch from the stable run's snapshot at ``point.branch_step``: ``wsd`` with decay
    fraction ``decay_fraction`` to the floor ``min_lr_ratio·lr`` at ``point.horizon_steps``, the
    weights, AdamW moments and averages carried over (``branch.branch_ewa: carry``), so that it is step
    for step the run trained straight on that schedule (:func:`cbscore.train.branch.same_rates_before`)."""
    snapshots = stable.branch
    if snapshots is None or snapshots.snapshot_dir is None:
        raise ConfigError("snapshot_dir", None, "the stable run keeps no snapshots to branch from")
    branch_tokens, horizon_tokens = point.tokens(stable.batch_tokens)
    if branch_tokens not in snapshots.snapshot_tokens:
        raise ConfigError("branch_step", point.branch_step,
                          f"is not a snapshot of the stable run (snapshots at {list(snapshots.snapshot_tokens)} tokens)")
    config = stable.replace(
        schedule="wsd", decay_fraction=decay_fraction, min_lr_ratio=min_lr_ratio,
        schedule_batch_size=stable.batch_size, schedule_tokens=horizon_tokens,
        max_tokens=horizon_tokens, max_steps=None, target_loss=None,
        branch=BranchConfig(branch_from=str(snapshot_path(snapshots.snapshot_dir, branch_tokens)),
                            branch_step=point.branch_step, branch_tokens=branch_tokens, branch_ewa="carry"),
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_steps=stable.checkpoint_every_steps if checkpoint_dir is not None else None)
    start = config.lr_schedule().steps
    if start.warmup_steps > point.branch_step:
        raise ConfigError("branch_step", point.branch_step, f"is inside the warm-up ({start.warmup_steps} steps)")
    return config


def cosine_config(base: TrainConfig, horizon_steps: int, *, min_lr_ratio: float) -> TrainConfig:
    """One run of a cosine family: from scratch to ``horizon_steps``, the rate decayed to
    ``min_lr_ratio·lr`` at its own end (Loshchilov & Hutter 2017), no target, no snapshots."""
    return _explicit(base).replace(
        schedule="cosine", min_lr_ratio=min_lr_ratio, schedule_tokens=None,
        max_tokens=horizon_steps * base.batch_tokens, max_steps=None, target_loss=None,
        branch=None if base.branch is None else base.branch.replace(snapshot_dir=None, snapshot_tokens=()))
