"""What a trainer checkpoint carries besides the weights (:mod:`cbscore.train.trainer`): the loop's
bookkeeping, which a resumed trial needs to continue exactly, and the check that a checkpoint
belongs to the trial that finds it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from cbscore.errors import ConfigError
from cbscore.train.branch_config import flat_dict
from cbscore.train.config import LATER_FIELDS, OPERATIONAL_FIELDS, TrainConfig

#: Version of the checkpoint payload written by :mod:`cbscore.train.trainer`.
CHECKPOINT_FORMAT = 1


@dataclass
class Progress:
    """Loop bookkeeping that a checkpoint must carry to resume exactly."""

    next_eval: int = 0
    """Step of the next evaluation (:mod:`cbscore.train.eval_schedule` decided it at the last one)."""
    interval_loss: torch.Tensor | None = None
    """Device sum of the step losses since the last log step (a scalar)."""
    interval_steps: int = 0
    """Steps summed in ``interval_loss``."""
    running_min: float = math.inf
    """Lowest logged train loss so far (the divergence check's reference)."""
    train_log: list[tuple[int, float]] = field(default_factory=list)
    """``(step, mean train loss since the previous log step)`` at each log step."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "next_eval": self.next_eval,
            "interval_loss": self.interval_loss.detach().cpu(),
            "interval_steps": self.interval_steps,
            "running_min": self.running_min,
            "train_log": [list(x) for x in self.train_log],
        }

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any], device: torch.device) -> Progress:
        return cls(
            next_eval=int(saved["next_eval"]),
            interval_loss=saved["interval_loss"].to(device),
            interval_steps=int(saved["interval_steps"]),
            running_min=float(saved["running_min"]),
            train_log=[(int(s), float(v)) for s, v in saved["train_log"]],
        )


def science_fields(config_dict: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a ``TrainConfig.to_dict()`` that decide the trial's numbers (not where it runs
    or how it is checkpointed), in the flat form (:func:`cbscore.train.branch_config.flat_dict`) that
    a checkpoint written before ``branch`` holds. A checkpoint written before a field existed was
    written with its default."""
    return {k: v for k, v in {**LATER_FIELDS, **flat_dict(config_dict)}.items() if k not in OPERATIONAL_FIELDS}


def check_same_trial(saved_config: Mapping[str, Any], config: TrainConfig) -> None:
    """Raise a ConfigError naming the fields that differ when a checkpoint's config is another
    trial's."""
    theirs, ours = science_fields(saved_config), science_fields(config.to_dict())
    if theirs != ours:
        differ = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        raise ConfigError(
            "checkpoint_dir", config.checkpoint_dir,
            f"holds a checkpoint of a different trial (fields that differ: {', '.join(differ)})",
        )
