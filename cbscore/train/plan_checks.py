"""Checks of a :class:`~cbscore.train.config.TrainConfig`'s branch, batch-schedule and snapshot
fields (called from its ``__post_init__``; each raises :class:`~cbscore.errors.ConfigError`
naming the field and the value)."""

from __future__ import annotations

import math

from cbscore.errors import ConfigError, non_negative_int, positive_finite, positive_int

# ``cfg`` is a cbscore.train.config.TrainConfig (not imported: that module imports this one)


def check_branch(cfg) -> None:
    """``branch_from`` comes with the base's step and tokens and with the recipe stated."""
    fields = {"branch_step": cfg.branch_step, "branch_tokens": cfg.branch_tokens}
    if cfg.branch_from is None:
        for name, value in fields.items():
            if value is not None:
                raise ConfigError(name, value, "needs branch_from (the base trial's checkpoint folder)")
        return
    if not isinstance(cfg.branch_from, str) or not cfg.branch_from:
        raise ConfigError("branch_from", cfg.branch_from, "must be a checkpoint folder path or None")
    for name, value in fields.items():
        if value is None:
            raise ConfigError(name, value, "is required with branch_from (checked against its checkpoint)")
        non_negative_int(name, value)
    if cfg.branch_tokens % cfg.context_tokens:
        raise ConfigError("branch_tokens", cfg.branch_tokens,
                          f"must be a whole number of sequences of context_tokens={cfg.context_tokens}")
    # a default recipe would be this branch's own (its batch, its budget), not the base's
    for name in ("beta2", "ewa_taus", "warmup_tokens"):
        if getattr(cfg, name) is None:
            raise ConfigError(name, None, "must be given for a branch (the base run's value, so that its "
                                          "warm-up, optimizer and averages carry on)")


def check_batch_schedule(cfg) -> None:
    """Entries ``(tokens_from, batch_size, lr_multiplier)``, increasing, inside the run, each batch
    splittable like ``batch_size`` is (across devices, into micro-batches)."""
    if not isinstance(cfg.batch_schedule, tuple):
        raise ConfigError("batch_schedule", cfg.batch_schedule, "must list (tokens_from, batch_size, lr_multiplier) entries")
    previous = cfg.start_tokens
    for entry in cfg.batch_schedule:
        if not isinstance(entry, tuple) or len(entry) != 3:
            raise ConfigError("batch_schedule", entry, "each entry must be (tokens_from, batch_size, lr_multiplier)")
        tokens_from, size, multiplier = entry
        positive_int("batch_schedule tokens_from", tokens_from)
        positive_int("batch_schedule batch_size", size)
        positive_finite("batch_schedule lr_multiplier", multiplier)
        if tokens_from <= previous:
            raise ConfigError("batch_schedule", list(entry),
                              f"tokens_from must be above the previous switch (or the start, {previous} tokens)")
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
        previous = tokens_from


def check_snapshots(cfg) -> None:
    """Snapshot positions: increasing step boundaries of the run, with a folder to keep them in
    (``snapshot_dir``'s own check is the field's)."""
    if not isinstance(cfg.snapshot_tokens, tuple):
        raise ConfigError("snapshot_tokens", cfg.snapshot_tokens, "must list token counts")
    if cfg.snapshot_tokens and cfg.snapshot_dir is None:
        raise ConfigError("snapshot_tokens", list(cfg.snapshot_tokens), "needs snapshot_dir")
    if not cfg.snapshot_tokens:
        return
    plan = cfg.batch_plan()  # (only where there are snapshots: the simulator builds thousands of configs)
    previous = -math.inf
    for tokens in cfg.snapshot_tokens:
        positive_int("snapshot_tokens", tokens)
        if tokens <= previous:
            raise ConfigError("snapshot_tokens", list(cfg.snapshot_tokens), "must increase")
        if not plan.is_boundary(tokens):
            raise ConfigError("snapshot_tokens", tokens,
                              f"must be a stream position this run reaches after a whole step (from "
                              f"{plan.start_tokens} to {plan.end_tokens} tokens in steps of the batch)")
        previous = tokens
