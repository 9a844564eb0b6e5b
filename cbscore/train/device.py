"""Where and with how many threads a trial trains (:mod:`cbscore.train.trainer`): the device a config names,
torch's CPU threads for the duration of a trial, and the label a result reports."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

import torch

from cbscore.errors import ConfigError
from cbscore.train.config import TrainConfig


def trial_threads(config: TrainConfig) -> int | None:
    """Torch threads of each process: the config's; or for several ranks on one CPU a share of
    the cores each (torch's default, every core per process, would oversubscribe them k times)."""
    if config.threads is not None or config.devices == 1 or resolve_device(config.device).type == "cuda":
        return config.threads
    return max(1, (os.cpu_count() or 1) // config.devices)


def resolve_device(name: str) -> torch.device:
    """The torch device of a config's ``device`` (``auto``: CUDA when there is one); a ConfigError
    when CUDA is asked for and missing."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", name, "CUDA is not available on this machine")
    return torch.device(name)


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Torch's intra-op threads set to ``threads`` (``None``: left as they are) for the block, then
    restored (a worker process trains many trials)."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def device_label(device: torch.device) -> str:
    """``cuda:N (name)`` or ``cpu (K threads)``, as a result reports it."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    threads = torch.get_num_threads()
    return f"cpu ({threads} thread{'' if threads == 1 else 's'})"


def finite_or_none(value: float) -> float | None:
    """``value``, or ``None`` for a NaN or an infinity (JSON has neither)."""
    return value if math.isfinite(value) else None
