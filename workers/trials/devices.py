"""Which devices a worker's trials run on: GPU groups of ``cbs worker --gpus … --devices-per-trial K``.

A worker given G GPUs and K devices per trial runs G/K trials at once (Celery prefork, one child
per trial). Pool child ``i`` (billiard's process index: unique among the live children, and a
child that replaces another takes its index) owns the GPU group ``gpus[i·K : (i+1)·K]``: it sets
``CUDA_VISIBLE_DEVICES`` to that group before anything in it touches CUDA, so rank r of its trial
is ``cuda:r`` (:mod:`cbscore.train.distributed`). ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (set by ``cbs
worker``) makes those indices the ones ``nvidia-smi`` prints.

Never imports torch: this runs in the worker parent and at the start of every child.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from cbscore.errors import ConfigError

#: Set by ``cbs worker`` for its children.
GPUS_ENV = "CBS_WORKER_GPUS"
"""Comma-separated GPU indices of the worker (``nvidia-smi`` order)."""
DEVICES_ENV = "CBS_TRIAL_DEVICES"
"""Devices each trial of this worker runs on (overrides the spec's ``devices_per_trial``)."""


def parse_gpus(text: str) -> tuple[int, ...]:
    """``"0,1,2,3"`` → ``(0, 1, 2, 3)``; a clear error naming ``--gpus`` otherwise."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(not p.isdigit() for p in parts):
        raise ConfigError("--gpus", text, "must list GPU indices separated by commas (e.g. 0,1,2,3)")
    gpus = tuple(int(p) for p in parts)
    if len(set(gpus)) != len(gpus):
        raise ConfigError("--gpus", text, "must not repeat a GPU")
    return gpus


def slot_count(gpus: tuple[int, ...], devices_per_trial: int) -> int:
    """Trials at once: G / K."""
    if isinstance(devices_per_trial, bool) or not isinstance(devices_per_trial, int) or devices_per_trial < 1:
        raise ConfigError("--devices-per-trial", devices_per_trial, "must be a positive integer")
    if len(gpus) % devices_per_trial:
        raise ConfigError("--devices-per-trial", devices_per_trial,
                          f"must divide the number of GPUs ({len(gpus)}: {','.join(map(str, gpus))})")
    return len(gpus) // devices_per_trial


def slot_gpus(gpus: tuple[int, ...], devices_per_trial: int, index: int) -> tuple[int, ...]:
    """The GPU group of pool child ``index``."""
    slots = slot_count(gpus, devices_per_trial)
    if not 0 <= index < slots:
        raise ConfigError("pool index", index, f"must be below the {slots} trial slots of GPUs {gpus}")
    return gpus[index * devices_per_trial:(index + 1) * devices_per_trial]


def pin_child(env: Mapping[str, str] | None = None, index: int | None = None) -> tuple[int, ...] | None:
    """In a pool child of a GPU worker: set ``CUDA_VISIBLE_DEVICES`` to this child's GPU group
    (``index`` defaults to billiard's process index); returns the group, ``None`` on a CPU worker."""
    env = os.environ if env is None else env
    raw = env.get(GPUS_ENV, "")
    if not raw:
        return None
    gpus = parse_gpus(raw)
    k = int(env.get(DEVICES_ENV) or 1)
    if index is None:
        from billiard.process import current_process

        index = int(getattr(current_process(), "index", 0) or 0)
    group = slot_gpus(gpus, k, index)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, group))
    return group


def trial_devices(train_config: Mapping[str, Any], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Operational overrides of a trial's config on this worker: its ``devices`` (the worker's
    ``--devices-per-trial`` wins over the spec's: the same update on other hardware), and a
    micro-batch that no longer divides the per-device batch dropped (chosen again from memory)."""
    env = os.environ if env is None else env
    raw = env.get(DEVICES_ENV, "")
    if not raw:
        return {}
    k = int(raw)
    batch = int(train_config["batch_size"])
    if batch % k:
        raise ConfigError("devices", k, f"of this worker (--devices-per-trial) must divide the trial's batch_size={batch}")
    out: dict[str, Any] = {"devices": k}
    micro = train_config.get("micro_batch_size")
    if micro and (batch // k) % micro:
        out["micro_batch_size"] = None
    return out
