"""BranchConfig: a trial's place among runs of one token stream, the optional part of a
:class:`~cbscore.train.config.TrainConfig` (``TrainConfig.branch``; ``None`` for a plain run).

A local-CBS or schedule study (:mod:`cbscore.local`, :mod:`cbscore.decay`) runs a base that keeps
snapshots, branches that start from them, and warm-up arms whose batch grows along the stream
(Merrill et al. 2025, arXiv 2505.23971, §3; Hägele et al. 2024, arXiv 2405.18392, §3). Only those
trials carry these fields; the rules here are the ones between them alone, those that also read
the trial's batch, budget or recipe are :mod:`cbscore.train.plan_checks`'.

The wire format before this sub-config held the same fields flat in the trial's dict. Stored
trials (MLflow's ``trial_spec`` tags, the ledger, checkpoints) keep that form:
``TrainConfig.from_dict`` folds it in (:func:`fold_flat`), and :func:`flat_dict` writes a dict
back in it where a key or a comparison was made on it (the reuse key, a checkpoint's trial check).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cbscore.config import Config, checked, folder, one_of
from cbscore.errors import ConfigError, non_negative_int, positive_finite, positive_int

BRANCH_EWA = ("carry", "reset")


@dataclass(frozen=True, kw_only=True)
class BranchConfig(Config):
    """Branch source, snapshots and batch schedule of one trial (module docstring)."""

    # ---------------------------------------------------------------- batch-size schedule
    batch_schedule: tuple[tuple[int, int, float], ...] = ()
    """Batch-size schedule in tokens: ``(tokens_from, batch_size, lr_multiplier)`` entries in
    increasing ``tokens_from`` (stream positions in tokens). From the first step boundary at or
    after ``tokens_from`` steps take ``batch_size`` sequences and the learning rate is
    ``lr_multiplier`` × the schedule's (the multiplier is absolute, not compounded; the run starts
    at ``batch_size`` and 1.0). Merrill et al. 2025's warm-up doubles the batch with ×√2 each time
    (:func:`cbscore.local.plan_warmup`). Empty = one batch size throughout."""

    # ---------------------------------------------------------------- branching
    branch_from: str | None = None
    """Checkpoint folder of another trial (its ``checkpoint.pt``; typically a snapshot,
    :func:`cbscore.train.checkpoint.snapshot_path`) that this trial starts from: model, AdamW moments
    and weight averages carried over, the data stream and the schedule continued at
    ``branch_tokens``. Read only: the branch never writes, moves or removes anything there; its
    own checkpoints go to ``checkpoint_dir``, and a checkpoint there takes precedence (resume).
    Needs ``branch_step``, ``branch_tokens`` and an explicit ``beta2``, ``ewa_taus`` and
    ``warmup_tokens``. ``None`` = start from the initialisation."""
    branch_step: int | None = None
    """The base trial's optimizer step at ``branch_from`` (checked against the checkpoint)."""
    branch_tokens: int | None = None
    """The base trial's stream position in tokens at ``branch_from`` (checked against the
    checkpoint): where this trial's data and learning-rate schedule start."""
    branch_ewa: str = checked(one_of(BRANCH_EWA), "carry")
    """How a branch's weight averages start (with ``branch_from``): ``carry`` = the base's carried
    over and continued (they hold the base's past: after ``n`` branch steps a share ``Π τ_s`` of
    their weight is from before the branch); ``reset`` = afresh at the branch, ``ξ_0 = 0`` and the
    bias correction counted over the branch's own steps only (:mod:`cbscore.train.averaging`), so they
    average the branch's iterates and nothing of the base's. A trial without ``branch_from`` takes
    ``carry`` (it has nothing to reset)."""

    # ---------------------------------------------------------------- snapshots
    snapshot_dir: str | None = checked(folder, None)
    """Folder of read-only snapshots of this trial's state for branches to start from:
    ``snapshot_path(snapshot_dir, tokens)`` for each of ``snapshot_tokens``. Written once each
    (an existing snapshot is never overwritten) and never removed by the trainer."""
    snapshot_tokens: tuple[int, ...] = ()
    """Stream positions in tokens at which a snapshot is kept, increasing; each must be a step
    boundary of this run (:meth:`BatchPlan.is_boundary`, e.g. a multiple of ``batch_tokens``)."""

    # ------------------------------------------------------------------ checks between fields
    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_branch()
        self._check_batch_schedule()
        self._check_snapshots()

    def _check_branch(self) -> None:
        """``branch_from`` comes with the base's step and tokens; ``reset`` only for a branch."""
        fields = {"branch_step": self.branch_step, "branch_tokens": self.branch_tokens}
        if self.branch_from is None:
            for name, value in fields.items():
                if value is not None:
                    raise ConfigError(name, value, "needs branch_from (the base trial's checkpoint folder)")
            if self.branch_ewa != "carry":
                raise ConfigError("branch_ewa", self.branch_ewa, "needs branch_from (only a branch has averages to reset)")
            return
        if not isinstance(self.branch_from, str) or not self.branch_from:
            raise ConfigError("branch_from", self.branch_from, "must be a checkpoint folder path or None")
        for name, value in fields.items():
            if value is None:
                raise ConfigError(name, value, "is required with branch_from (checked against its checkpoint)")
            non_negative_int(name, value)

    def _check_batch_schedule(self) -> None:
        """Entries ``(tokens_from, batch_size, lr_multiplier)``, increasing from the start (the
        rules against the run's budget and devices are :func:`cbscore.train.plan_checks.check_batch_schedule`'s)."""
        if not isinstance(self.batch_schedule, tuple):
            raise ConfigError("batch_schedule", self.batch_schedule, "must list (tokens_from, batch_size, lr_multiplier) entries")
        previous = self.start_tokens
        for entry in self.batch_schedule:
            if not isinstance(entry, tuple) or len(entry) != 3:
                raise ConfigError("batch_schedule", entry, "each entry must be (tokens_from, batch_size, lr_multiplier)")
            tokens_from, size, multiplier = entry
            positive_int("batch_schedule tokens_from", tokens_from)
            positive_int("batch_schedule batch_size", size)
            positive_finite("batch_schedule lr_multiplier", multiplier)
            if tokens_from <= previous:
                raise ConfigError("batch_schedule", list(entry),
                                  f"tokens_from must be above the previous switch (or the start, {previous} tokens)")
            previous = tokens_from

    def _check_snapshots(self) -> None:
        """Snapshot positions: increasing, with a folder to keep them in (that each is a step
        boundary of the run is :func:`cbscore.train.plan_checks.check_snapshots`')."""
        if not isinstance(self.snapshot_tokens, tuple):
            raise ConfigError("snapshot_tokens", self.snapshot_tokens, "must list token counts")
        if self.snapshot_tokens and self.snapshot_dir is None:
            raise ConfigError("snapshot_tokens", list(self.snapshot_tokens), "needs snapshot_dir")
        previous = 0
        for tokens in self.snapshot_tokens:
            positive_int("snapshot_tokens", tokens)
            if tokens <= previous:
                raise ConfigError("snapshot_tokens", list(self.snapshot_tokens), "must increase")
            previous = tokens

    @property
    def start_tokens(self) -> int:
        """Stream position before the first step: ``branch_tokens`` for a branch, else 0."""
        return self.branch_tokens or 0

    def replace(self, **changes: Any) -> BranchConfig:
        """A copy with ``changes`` applied (and checked)."""
        return dataclasses.replace(self, **changes)


#: A trial of its own: no base, no snapshots, one batch (``TrainConfig.branch`` is then ``None``).
NO_BRANCH = BranchConfig()

#: The fields, as the flat wire format named them.
BRANCH_FIELDS = tuple(NO_BRANCH.to_dict())


def as_branch(value: Any) -> BranchConfig | None:
    """``TrainConfig.branch`` of a wire or given value: a dict read as a ``BranchConfig``, and one
    with every field at its default as ``None`` (one form for a run of its own: equal configs,
    equal dicts)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = BranchConfig.from_dict(value)
    elif value is not None and not isinstance(value, BranchConfig):
        raise ConfigError("branch", value, "must be a BranchConfig, a dict of its fields or None")
    return None if value == NO_BRANCH else value


def fold_flat(data: Mapping[str, Any]) -> dict[str, Any]:
    """A ``TrainConfig`` dict of the flat wire format (``branch_from``, ``snapshot_dir``, ... at the
    top) with those fields folded into ``branch`` (``None`` when they all hold their defaults, as a
    plain trial's did); a dict without them comes back as a copy. Raises when a dict gives both."""
    flat = {k: data[k] for k in BRANCH_FIELDS if k in data}
    out = {k: v for k, v in data.items() if k not in flat}
    if not flat:
        return out
    if out.get("branch") is not None:
        first = sorted(flat)[0]
        raise ConfigError(first, flat[first], "must be given in branch, not beside it (the flat form is an older config's)")
    out["branch"] = as_branch(flat)
    return out


def flat_dict(data: Mapping[str, Any]) -> dict[str, Any]:
    """A ``TrainConfig.to_dict()`` in the flat wire format that came before ``branch`` (what the
    reuse key hashes and a checkpoint's trial check compares, so both stay what they were): ``branch``
    replaced by its fields, their defaults where it is ``None``. A dict without ``branch`` is an
    older one, returned as a copy."""
    if "branch" not in data:
        return dict(data)
    out = {k: v for k, v in data.items() if k != "branch"}
    branch = data["branch"]
    if isinstance(branch, BranchConfig):
        branch = branch.to_dict()
    out.update({**NO_BRANCH.to_dict(), **(branch or {})})
    return out


__all__ = ["BRANCH_EWA", "BRANCH_FIELDS", "NO_BRANCH", "BranchConfig", "as_branch", "flat_dict", "fold_flat"]
