"""Trials as the planner sees them: what to run (:class:`TrialSpec`) and what happened
(:class:`TrialRecord`).

Both are frozen and JSON-safe (``to_dict``/``from_dict``): a ``TrialSpec`` travels to a worker as
the Celery task's only argument, and a ``TrialRecord`` is rebuilt from MLflow by the runner.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Outcomes of a trial (DESIGN.md §2). ``finished`` is a reference run that spent its budget
#: with no target to reach; ``lost`` is a trial whose heartbeat went stale (it is run again).
TERMINAL = frozenset({"reached", "censored", "finished", "diverged", "pruned", "stopped", "failed"})
ACTIVE = frozenset({"queued", "running"})
STATUSES = TERMINAL | ACTIVE | {"lost"}


@dataclass(frozen=True, kw_only=True)
class TrialSpec:
    """One trial to run: a setting, a batch size and one set of hyper-parameters."""

    trial_id: str
    """Stable id: ``{study}.{setting_id}.b{B}.{lr|o<n>}.s{seed}``; Celery task id = id + attempt."""
    study: str
    """Study name."""
    setting_id: str
    """Setting ``(N, D)`` id."""
    cell_id: str
    """Cell ``(setting, batch size)`` id: ``{setting_id}.b{B}``."""
    role: str
    """``reference`` (runs to D tokens, sets the target) or ``trial`` (stops at the target)."""
    model: str
    """Model preset."""
    n_params: int
    """Non-embedding parameters N of the model."""
    setting_tokens: int
    """D of the setting, in tokens."""
    batch_size: int
    """Batch size in sequences."""
    lr: float
    """Peak learning rate."""
    seed: int
    """Training seed."""
    max_tokens: int
    """Token budget of this trial."""
    max_steps: int | None
    """Step cap from pruning (``None``: only ``max_tokens`` bounds the trial)."""
    target_loss: float | None
    """Held-out loss at which the trial stops (``None`` for reference runs)."""
    search_number: int | None = None
    """Optuna trial number within the cell's Optuna study (``None`` for grid trials)."""
    train_config: Mapping[str, Any]
    """``cbscore.train.config.TrainConfig.to_dict()`` of the trial."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["train_config"] = dict(self.train_config)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialSpec:
        return cls(**dict(data))


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """What is known about a trial: rebuilt from MLflow by the runner."""

    trial_id: str
    """Id of the :class:`TrialSpec`."""
    cell_id: str
    """Cell id."""
    setting_id: str
    """Setting id."""
    role: str
    """``reference`` or ``trial``."""
    batch_size: int
    """Batch size in sequences."""
    lr: float
    """Peak learning rate."""
    status: str
    """``queued``, ``running``, ``lost`` or one of :data:`TERMINAL`."""
    attempt: int = 1
    """Attempt number (a re-enqueued lost trial is attempt 2, ...)."""
    charged_attempts: int | None = None
    """The attempts that count against the cap (``CBS_MAX_ATTEMPTS``) if the trial is lost now: each
    earlier lost attempt that saved no checkpoint past the furthest one before it, plus the current
    attempt unless it has saved one (``workers.studies.ledger.Lease.charged_if_lost``). A kill from
    outside (a node gone, a chaos kill) after progress costs nothing; a trial that kills its own
    worker (out of memory, a crash at one step) makes no progress and is failed at the cap.
    ``None``: :attr:`attempt` (a record without a lease)."""
    steps_to_target: float | None = None
    """Interpolated optimizer step of the target crossing (reached trials)."""
    final_eval_loss: float | None = None
    """Last held-out loss of the averaged weights (best τ)."""
    final_raw_loss: float | None = None
    """Last held-out loss of the raw (not averaged) weights, nats per token (``summary/final_raw_loss``)."""
    last_step: int = 0
    """Last optimizer step reported."""
    tokens: int = 0
    """Training tokens spent so far."""
    heartbeat_s: float | None = None
    """Unix time of the last heartbeat (running trials)."""
    run_id: str | None = None
    """MLflow run id."""
    eval_steps: tuple[float, ...] = ()
    """Optimizer steps of the held-out evaluations."""
    eval_losses: tuple[float, ...] = ()
    """Held-out losses of the averaged weights (best τ) at ``eval_steps``."""
    max_steps: int | None = None
    """Step cap the trial was started with."""
    seed: int = 0
    """Training seed."""
    search_number: int | None = None
    """Optuna trial number (``None`` for grid trials)."""
    note: str = ""
    """Why the trial is where it is, for people: its stop reason once ended, or why its attempt
    went back to the queue (a store down, a disk full) while it waits."""
    stopped_by: str = ""
    """The rule that stopped a ``pruned`` trial (``cbscore.study.plan_result.STOP_RULES``: the plan
    that asked the stop names it, the runner tags the run); ``""`` for any other trial, and for
    trials pruned before the tag existed."""
    reused_from: str = ""
    """``study/run id`` of the finished trial this one's result was copied from (the same trainer
    config on the same store: ``workers.studies.reuse``); ``""`` = trained in this study."""

    @property
    def attempts_spent(self) -> int:
        """What the attempt cap compares: :attr:`charged_attempts`, else :attr:`attempt`."""
        return self.attempt if self.charged_attempts is None else self.charged_attempts

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"TrialRecord.status must be one of {sorted(STATUSES)}, but got {self.status!r}.")
        object.__setattr__(self, "eval_steps", tuple(self.eval_steps))
        object.__setattr__(self, "eval_losses", tuple(self.eval_losses))

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["eval_steps"] = list(self.eval_steps)
        d["eval_losses"] = list(self.eval_losses)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialRecord:
        return cls(**dict(data))


@functools.cache
def _field_names(cls) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def built(cls, /, **fields):
    """``cls(**fields)`` of a dataclass with no ``__post_init__`` and every field given, in the order it
    declares them: the same object, without ``__init__`` setting each field (a frozen one's through
    ``object.__setattr__``): the planner builds a ``Plan`` per call, a ``CellState`` per cell it plans
    and a ``TrialSpec`` per trial, thousands in a simulated study. A missing or unknown field is a
    ``TypeError``, as ``__init__`` would raise."""
    if fields.keys() != _field_names(cls):
        raise TypeError(f"built({cls.__name__}): fields {sorted(fields.keys() ^ _field_names(cls))} missing or unknown")
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


def replaced(obj, /, **changes):
    """``dataclasses.replace(obj, **changes)`` of a dataclass instance with no ``__post_init__`` whose
    checks the new values need not pass again (the caller's values are of the kinds ``obj`` holds): the
    same copy, without ``__init__``, for the records and plans a simulated study copies thousands of
    times. An unknown field is a ``TypeError``."""
    if not changes.keys() <= _field_names(type(obj)):
        raise TypeError(f"replaced({type(obj).__name__}): unknown fields "
                        f"{sorted(changes.keys() - _field_names(type(obj)))}")
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__, **changes)
    return new


@functools.lru_cache(maxsize=4096)
def lr_tag(lr: float) -> str:
    """Learning rate as it appears in a trial id, three significant digits: 0.00316 -> 'lr3.16e-3'."""
    mantissa, exponent = f"{lr:.2e}".split("e")
    return f"lr{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
