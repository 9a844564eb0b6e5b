"""Starting a trial from another trial's checkpoint (a *branch*; ``TrainConfig.branch.branch_from``).

Merrill et al. 2025 (arXiv 2505.23971, §3) measure the local critical batch size by branching
from checkpoints of one run: each branch continues with a new batch size ``k·B0`` and learning
rate ``f(k)·η0``, its optimizer state carried over, for a window of ``Δ`` tokens. Here a branch
takes from its base checkpoint the model, the AdamW moments (and their step counts, so Adam's
bias correction carries on) and, with ``branch_ewa = carry``, the weight averages (with
``reset`` its averages start at the branch: they hold none of the base's past); its own
hyper-parameters (learning rate, β2, ε, weight decay) are its config's, not the base's. The data stream and the learning-rate
schedule continue at the base's stream position ``branch_tokens`` (:mod:`cbscore.train.batch_plan`,
:class:`cbscore.train.schedules.TokenLrSchedule`: no re-warm-up). Its evaluation history, log and
noise-scale averages start afresh (they describe the branch).

A *decay branch* (:mod:`cbscore.decay`; Hägele et al. 2024, arXiv 2405.18392, §3) continues a
run at a constant rate with a schedule of another shape, e.g. a ``wsd`` decay to its own horizon
from a ``constant`` base's snapshot. Its ``schedule``, ``min_lr_ratio``, ``decay_fraction`` and
``schedule_tokens`` may differ from the base's as long as the two schedules give the same learning
rate at every step the base took before the branch (:func:`same_rates_before`): the branch is
then, step for step, a run trained straight on its own schedule.

The base checkpoint is read only (:func:`cbscore.train.checkpoint.read_checkpoint`); a mismatch between
it and the branch's config is a :class:`~cbscore.errors.ConfigError` naming the field.
"""

from __future__ import annotations

from typing import Any

import torch

from cbscore.errors import ConfigError
from cbscore.train.branch_config import NO_BRANCH, flat_dict
from cbscore.train.checkpoint import read_checkpoint
from cbscore.train.config import LATER_FIELDS, TrainConfig

# What the branch must share with its base for the carried state to mean what it meant there:
# the same network, the same data order (the seed orders the windows), the same schedule shape.
SHARED_FIELDS = ("model", "context_tokens", "data", "seed", "allow_repeat", "schedule", "min_lr_ratio",
                 "decay_fraction")
# What a decay branch may change (its rates before the branch checked equal instead).
SCHEDULE_SHAPE_FIELDS = ("schedule", "min_lr_ratio", "decay_fraction")


def read_base(config: TrainConfig) -> dict:
    """The checkpoint at ``config.branch.branch_from``, checked against the branch's config."""
    branch = config.branch
    try:
        ckpt = read_checkpoint(branch.branch_from)
    except FileNotFoundError:
        raise ConfigError("branch_from", branch.branch_from, "holds no checkpoint.pt (the base trial's snapshot)") from None
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError, EOFError, UnpicklingError, ...
        raise ConfigError("branch_from", branch.branch_from,
                          f"holds a checkpoint that cannot be read ({type(exc).__name__}: {exc})") from exc
    base = TrainConfig.from_dict({**LATER_FIELDS, **flat_dict(ckpt["config"])})  # (a base of any age)
    step = int(ckpt["step"])
    if step != branch.branch_step:
        raise ConfigError("branch_step", branch.branch_step, f"does not match the checkpoint at branch_from (step {step})")
    tokens = int(ckpt["tokens"]) if "tokens" in ckpt else base.batch_plan().tokens_at(step)
    if tokens != branch.branch_tokens:
        raise ConfigError("branch_tokens", branch.branch_tokens,
                          f"does not match the checkpoint at branch_from ({tokens} tokens)")
    _check_compatible(config, base)
    return ckpt


def same_rates_before(config: TrainConfig, base: TrainConfig) -> bool:
    """Whether ``config``'s learning-rate schedule gives exactly the base's rate at every step the
    base took before ``config.branch.branch_tokens`` (same peak rate, warm-up and rates after it): a
    branch with another schedule shape is then a run trained straight on its own."""
    branch_tokens = None if config.branch is None else config.branch.branch_tokens
    if (branch_tokens is None or config.lr != base.lr
            or config.branch.batch_schedule != (base.branch or NO_BRANCH).batch_schedule):
        return False
    ours, theirs, plan = config.lr_schedule(), base.lr_schedule(), base.batch_plan()
    for step in range(plan.steps_before(branch_tokens)):
        tokens = plan.tokens_at(step)
        if ours.lr_at_tokens(tokens) != theirs.lr_at_tokens(tokens):
            return False
    return True


def _check_compatible(config: TrainConfig, base: TrainConfig) -> None:
    ours, theirs = config.to_dict(), base.to_dict()
    reshaped = any(ours[name] != theirs[name] for name in SCHEDULE_SHAPE_FIELDS) and same_rates_before(config, base)
    for name in SHARED_FIELDS:
        if reshaped and name in SCHEDULE_SHAPE_FIELDS:
            continue  # a decay branch: its rates before the branch are the base's (same_rates_before)
        if ours[name] != theirs[name]:
            raise ConfigError(name, ours[name], f"must be the base trial's ({theirs[name]!r}) for a branch")
    resolved: dict[str, tuple[Any, Any]] = {
        "warmup_tokens": (config.resolved_warmup_tokens(), base.resolved_warmup_tokens()),
        "ewa_taus": (config.resolved_ewa_taus(), base.resolved_ewa_taus()),
        "schedule_batch_size": (config.lr_schedule().anchor_batch_tokens // config.context_tokens,
                                base.lr_schedule().anchor_batch_tokens // base.context_tokens),
    }
    if config.schedule != "constant" and not reshaped:  # only a decaying schedule has an end that matters
        resolved["schedule_tokens"] = (config.lr_schedule().steps.total_steps, base.lr_schedule().steps.total_steps)
    for name, (mine, base_value) in resolved.items():
        if mine != base_value:
            raise ConfigError(name, getattr(config, name),
                              f"must give the base trial's schedule and averages (it resolves to {base_value!r} "
                              f"there, {mine!r} here; set it to the base's)")


def carry_over(ckpt: dict, model: torch.nn.Module, optimizer: torch.optim.Optimizer, average=None) -> None:
    """Load the base's weights, AdamW state and (on rank 0) averages into a fresh trial.

    ``optimizer.load_state_dict`` would also bring back the base's hyper-parameters (β2, ε,
    weight decay, even ``fused``): the branch's own are put back over them, so only the state
    (``exp_avg``, ``exp_avg_sq``, ``step`` of every parameter) is carried over."""
    model.load_state_dict(ckpt["model"])
    own = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    optimizer.load_state_dict(ckpt["optimizer"])
    for group, hyper in zip(optimizer.param_groups, own):
        group.update(hyper)
    if average is not None:
        average.load_state_dict(ckpt["average"])
