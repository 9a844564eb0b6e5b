"""Checks of a :class:`~cbscore.train.config.TrainConfig`'s branch, batch-schedule and snapshot
fields against the rest of the trial (its context, recipe, budget and devices; called from its
``__post_init__`` with a ``branch``; each raises :class:`~cbscore.errors.ConfigError` naming the
field and the value). The rules between those fields alone are
:class:`~cbscore.train.branch_config.BranchConfig`'s."""

from __future__ import annotations

# ``cfg`` is a cbscore.train.config.TrainConfig with a branch (not imported: that module imports this one)
from cbscore.errors import ConfigError


def check_branch(cfg) -> None:
    """A branch starts on a whole sequence and states the recipe it carries on."""
    branch = cfg.branch
    if branch.branch_from is None:
        return
    if branch.branch_tokens % cfg.context_tokens:
        raise ConfigError("branch_tokens", branch.branch_tokens,
                          f"must be a whole number of sequences of context_tokens={cfg.context_tokens}")
    # a default recipe would be this branch's own (its batch, its budget), not the base's
    for name in ("beta2", "ewa_taus", "warmup_tokens"):
        if getattr(cfg, name) is None:
            raise ConfigError(name, None, "must be given for a branch (the base run's value, so that its "
                                          "warm-up, optimizer and averages carry on)")


def check_batch_schedule(cfg) -> None:
    """Each switch inside the run, its batch splittable like ``batch_size`` is (across devices,
    into micro-batches)."""
    for entry in cfg.branch.batch_schedule:
        tokens_from, size, _ = entry
        if tokens_from >= cfg.max_tokens:
            raise ConfigError("batch_schedule", list(entry), f"tokens_from must be below max_tokens={cfg.max_tokens}")
        if size % cfg.devices:
            raise ConfigError("batch_schedule", list(entry), f"batch_size must be a multiple of devices={cfg.devices}")
        if cfg.micro_batch_size is not None and (size // cfg.devices) % cfg.micro_batch_size:
            raise ConfigError("batch_schedule", list(entry),
                              f"micro_batch_size={cfg.micro_batch_size} must divide the per-device batch")
        gns = cfg.gns_micro_batch_size
        if isinstance(gns, int) and gns > 0 and (size // cfg.devices) % gns:
            raise ConfigError("batch_schedule", list(entry), f"gns_micro_batch_size={gns} must divide the per-device batch")


def check_snapshots(cfg) -> None:
    """Each snapshot position is a step boundary of the run."""
    if not cfg.branch.snapshot_tokens:
        return
    plan = cfg.batch_plan()  # (only where there are snapshots: the simulator builds thousands of configs)
    for tokens in cfg.branch.snapshot_tokens:
        if not plan.is_boundary(tokens):
            raise ConfigError("snapshot_tokens", tokens,
                              f"must be a stream position this run reaches after a whole step (from "
                              f"{plan.start_tokens} to {plan.end_tokens} tokens in steps of the batch)")
