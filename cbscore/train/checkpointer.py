"""The trainer's checkpoints (:mod:`cbscore.train.trainer`, "Resuming" and "Branches"): what a checkpoint
holds, the resume of rank 0 and of the other ranks, and a branch's start from its
base. A mixin of the trainer's trial: these methods read and set the trial's model, optimizer,
averages, state and progress, and nothing else of it."""

from __future__ import annotations

import torch

from cbscore.train.branch import carry_over, read_base
from cbscore.train.checkpoint import checkpoint_path, load_checkpoint, rng_state, set_rng_state
from cbscore.train.progress import CHECKPOINT_FORMAT, Progress, check_same_trial
from cbscore.train.result import EvalPoint, TrialResult


class TrialCheckpoints:
    """Checkpoint methods of :class:`cbscore.train.trainer._Trial` (its ``config``, ``state``, ``model``,
    ``optimizer``, ``average``, ``gns``, ``progress``, ``callbacks``, ``device``, ``group``,
    ``leader``, ``saved_here`` and ``last_checkpoint_at``)."""

    def _payload(self, result: TrialResult | None = None) -> dict:
        p = self.progress
        return {
            "format": CHECKPOINT_FORMAT,
            "config": self.config.to_dict(),
            "step": self.state.step,
            "tokens": self.state.tokens,  # stream position (a branch's base position is checked on it)
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "average": self.average.state_dict(),
            "rng": rng_state(),
            "eval_history": [e.to_dict() for e in self.state.eval_history],
            "progress": p.to_dict(),
            "gns": self.gns.state_dict(),  # noise-scale averages (None without a probe)
            "result": None if result is None else result.to_dict(),
        }

    def _restore(self) -> dict | None:
        """Load the checkpoint of ``checkpoint_dir`` if any; returns it (or ``None``). Without one,
        a branch starts from its base (:meth:`_branch`)."""
        ckpt = None if self.config.checkpoint_dir is None else load_checkpoint(self.config.checkpoint_dir)
        if ckpt is None:
            self._branch()
            return None
        check_same_trial(ckpt["config"], self.config)
        self.saved_here = True  # the folder holds this trial's checkpoint: never make it again
        if ckpt["result"] is not None:
            return ckpt
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.average.load_state_dict(ckpt["average"])
        set_rng_state(ckpt["rng"])
        self.gns.load_state_dict(ckpt.get("gns"))
        self.state.step = int(ckpt["step"])
        self.state.resumed_from_step = self.state.step
        self.state.eval_history = [EvalPoint.from_dict(e) for e in ckpt["eval_history"]]
        self.state.last_eval = self.state.eval_history[-1] if self.state.eval_history else None
        self.progress = Progress.from_dict(ckpt["progress"], self.device)
        if self.progress.train_log:
            self.state.train_loss = self.progress.train_log[-1][1]
        return ckpt

    def _branch(self) -> None:
        """A branch's first attempt: model, AdamW state and (rank 0, ``branch_ewa = carry``)
        averages from the base checkpoint, read only (:mod:`cbscore.train.branch`); every rank reads it
        (the optimizer state is not broadcast), the data and schedule continue at
        ``branch_tokens`` (``self.plan``). With ``branch_ewa = reset`` the averages stay the fresh
        ones: they start at the branch."""
        if self.config.branch_from is None:
            return
        carry = self.leader and self.config.branch_ewa == "carry"
        carry_over(read_base(self.config), self.model, self.optimizer, self.average if carry else None)

    def _restore_follower(self, step: int) -> None:
        """Rank > 0: load what rank 0 resumed from (rank 0 checked it; it writes no new one until
        every rank has taken a step). The partial log interval in a checkpoint is already the
        mean over ranks (see ``_mean_interval``)."""
        ckpt = torch.load(checkpoint_path(self.config.checkpoint_dir), map_location="cpu", weights_only=True)
        if int(ckpt["step"]) != step:
            raise RuntimeError(f"rank {self.group.rank}: the checkpoint is at step {ckpt['step']}, rank 0 resumed "
                               f"from step {step}")
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.state.step = step
        saved = Progress.from_dict(ckpt["progress"], self.device)
        self.progress = Progress(interval_loss=saved.interval_loss, interval_steps=saved.interval_steps)
