"""The trial's checkpointer (:mod:`cbscore.train.trainer`, "Resuming" and "Branches"): which checkpoint a
trial resumes from, when and whether it writes one, and a branch's base. The trial *has* one
(as OLMo-core's trainer has its ``Checkpointer``); what a checkpoint holds is the trial's own
state (``_Trial.state_dict`` / ``_Trial.load_state_dict``), the file format is
:mod:`cbscore.train.checkpoint`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from cbscore.train.branch import carry_over, read_base
from cbscore.train.callbacks import Callback, TrainState
from cbscore.train.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from cbscore.train.config import TrainConfig
from cbscore.train.progress import check_same_trial


class Checkpointer:
    """Saves and loads one trial's checkpoint in ``config.checkpoint_dir`` (none when it is
    ``None``); rank 0 writes, every rank may read."""

    def __init__(self, config: TrainConfig, callbacks: Sequence[Callback] = ()):
        self.config = config
        self.callbacks = tuple(callbacks)
        self.saved_here = False
        """Whether this trial's checkpoint folder exists because of this run (or held this
        trial's checkpoint when it started): the folder is then never made again."""
        self.last_saved_at = time.monotonic()
        """``time.monotonic()`` seconds of the last save (or of the start), for
        ``checkpoint_every_seconds``."""

    @property
    def enabled(self) -> bool:
        return self.config.checkpoint_dir is not None

    def load(self) -> dict | None:
        """This trial's checkpoint, checked to be of the same trial, or ``None`` without one."""
        ckpt = load_checkpoint(self.config.checkpoint_dir) if self.enabled else None
        if ckpt is None:
            return None
        check_same_trial(ckpt["config"], self.config)
        self.saved_here = True  # the folder holds this trial's checkpoint: never make it again
        return ckpt

    def load_at(self, step: int, rank: int) -> dict:
        """Rank > 0: the checkpoint rank 0 resumed from at ``step`` (rank 0 checked it; it writes
        no new one until every rank has taken a step)."""
        ckpt = torch.load(checkpoint_path(self.config.checkpoint_dir), map_location="cpu", weights_only=True)
        if int(ckpt["step"]) != step:
            raise RuntimeError(f"rank {rank}: the checkpoint is at step {ckpt['step']}, rank 0 resumed "
                               f"from step {step}")
        return ckpt

    def branch(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, average=None) -> None:
        """A branch's first attempt: model, AdamW state and (given ``average``) the averages from
        the base checkpoint, read only (:mod:`cbscore.train.branch`); nothing for a trial that is
        no branch. Every rank reads it (the optimizer state is not broadcast)."""
        if self.config.branch is not None and self.config.branch.branch_from is not None:
            carry_over(read_base(self.config), model, optimizer, average)

    def due(self, *, is_ckpt_step: bool, is_log_step: bool) -> bool:
        """Whether to save after this step: every ``checkpoint_every_steps`` steps, or at a log step
        once ``checkpoint_every_seconds`` have passed since the last save."""
        seconds = self.config.checkpoint_every_seconds if self.enabled else None
        return is_ckpt_step or (is_log_step and seconds is not None
                                and time.monotonic() - self.last_saved_at >= seconds)

    def save(self, state: TrainState, payload: Callable[[], dict]) -> None:
        """Write ``payload()`` atomically unless a callback forbids it now (``may_checkpoint``)."""
        if not self.enabled or not all(cb.may_checkpoint(state) for cb in self.callbacks):
            return
        # the folder is made by this trial's first save only: gone later, it was removed under
        # this process (the trial ended or was taken over), and nothing is written
        if save_checkpoint(self.config.checkpoint_dir, payload(), create=not self.saved_here) is None:
            return
        self.saved_here = True
        self.last_saved_at = time.monotonic()
        for cb in self.callbacks:
            cb.post_checkpoint(state)
