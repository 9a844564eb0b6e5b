"""The ``schedule`` study kind's own fields: which schedules, the decay, and the horizons read.

A ``schedule`` study measures the CBS of one setting under several learning-rate schedules from
the same runs (:mod:`cbscore.decay`):

- ``constant_ewa``: the paper's constant rate with the EWA read-out (Zhang et al. 2025, §3.1),
  read off the *stable runs*' evaluation histories;
- ``wsd``: warmup-stable-decay (Hu et al. 2024, arXiv 2404.06395), read off *decay branches* from
  the stable runs' snapshots: the loss at horizon ``H`` after a linear decay over the last
  ``decay_fraction·H`` steps to ``min_lr_ratio·lr`` (Hägele et al. 2024, arXiv 2405.18392, §3);
- ``cosine``: half a cosine to ``min_lr_ratio·lr`` at the run's end (Loshchilov & Hutter 2017,
  arXiv 1608.03983), read off a *family* of runs, one per horizon (a cosine shares no steps across
  horizons, so it costs a run per horizon).

Each cell ``(B, lr, seed)`` gets one stable run to the largest horizon; horizons are a geometric
grid in tokens, ``D·horizon_low`` to ``D·horizon_high``, ``wsd_ratio`` apart for the decay branches
and ``cosine_ratio`` apart for the cosine family, both holding D (the target's horizon). The
study's own fields give the rest: its one model and token budget D, ``batch_sizes``, ``b_ref``,
the grid of ``search.lrs`` (scaled per B by ``lr_exponent``), ``seeds``, warm-up and recipe.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cbscore.config import Config, Range, checked
from cbscore.errors import ConfigError

SCHEDULE_NAMES = ("constant_ewa", "cosine", "wsd")
MAX_HORIZONS = 48
"""Most horizons per grid (each is a run per cell)."""


def _in(lo: float, hi: float) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (lo < value <= hi):
            raise ConfigError(name, value, f"must be a number in ({lo:g}, {hi:g}]")
    return check


def _schedules(name: str, value: Any) -> None:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError(name, value, "must be a list")
    if not value:
        raise ConfigError(name, [], f"must list one schedule at least ({', '.join(SCHEDULE_NAMES)})")
    for schedule in value:
        if schedule not in SCHEDULE_NAMES:
            raise ConfigError(name, schedule, f"must be one of {', '.join(SCHEDULE_NAMES)}")
    if len(set(value)) != len(tuple(value)):
        raise ConfigError(name, list(value), "must not repeat a schedule")


def _min_lr_ratio(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ConfigError(name, value, "must be a number in [0, 1)")


def _exponent(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1 <= value <= 1:
        raise ConfigError(name, value, "must be a number in [-1, 1]")


def _horizon_high(name: str, value: Any) -> None:
    _in(0, 16)(name, value)
    if value < 1:
        raise ConfigError(name, value, "must be at least 1 (D is a horizon)")


@dataclass(frozen=True, kw_only=True)
class DecaySpec(Config):
    """Schedules and horizons of a ``schedule`` study (the study's ``decay:`` mapping)."""

    _block = "decay"

    schedules: tuple[str, ...] = checked(_schedules, SCHEDULE_NAMES)
    """Schedules measured, from ``constant_ewa``, ``cosine`` and ``wsd``."""
    decay_fraction: float = checked(_in(0, 0.5), 0.2, range=Range(0, 0.5, lo_open=True))
    """``wsd``: share of a horizon's steps spent in the final linear decay (Hägele et al. 2024 found
    10-20% enough to match cosine)."""
    min_lr_ratio: float = checked(_min_lr_ratio, 0.1, range=Range(0, 1, hi_open=True))
    """The floor of ``wsd`` and ``cosine``, a fraction of the peak rate."""
    horizon_low: float = checked(_in(0, 1), 0.5, range=Range(0, 1, lo_open=True))
    """Shortest horizon as a multiple of D (a decay must start after the warm-up)."""
    horizon_high: float = checked(_horizon_high, 3.0, range=Range(1, 16))
    """Longest horizon (the stable runs' length) as a multiple of D; a cell that reaches the target
    at none is censored there."""
    wsd_ratio: float = checked(_in(1, 4), math.sqrt(2), range=Range(1, 4, lo_open=True))
    """Ratio between consecutive decay-branch horizons (finer: a closer bracket, more branches)."""
    cosine_ratio: float = checked(_in(1, 4), 2.0, range=Range(1, 4, lo_open=True))
    """Ratio between consecutive cosine runs' horizons (each a whole run)."""
    cosine_high: float | None = checked(_horizon_high, None, range=Range(1, 16))
    """Longest cosine horizon as a multiple of D (``None``: ``horizon_high``). A cosine costs a
    whole run per horizon, so its family can stop below the stable runs' length where the
    largest batch sizes need the longer horizons only under ``wsd`` and ``constant_ewa``."""
    lr_exponent: float = checked(_exponent, 0.0, range=Range(-1, 1))
    """The learning rates at batch size B are ``search.lrs × (B / b_ref)^lr_exponent``, three
    significant digits (a trial id's precision). 0 runs the same rates at every B; 0.5 follows
    the square-root rule for Adam (Malladi et al. 2022, arXiv 2205.10287, §4), so three rates √2
    apart bracket each B's optimum where one grid for all B would need seven."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "schedules", tuple(self.schedules))  # (a mapping's keys, as before)
        if self.cosine_high is not None and self.cosine_high > self.horizon_high:
            raise ConfigError("decay.cosine_high", self.cosine_high,
                              f"must be at most decay.horizon_high ({self.horizon_high:g})")
        for name in ("wsd_ratio", "cosine_ratio"):  # a sane number of runs per cell, refused by arithmetic
            count = math.floor(math.log(self.horizon_high / self.horizon_low) / math.log(getattr(self, name))) + 1
            if count > MAX_HORIZONS:
                raise ConfigError(f"decay.{name}", getattr(self, name),
                                  f"gives {count} horizons from D×{self.horizon_low:g} to D×{self.horizon_high:g}; "
                                  f"at most {MAX_HORIZONS} (a larger ratio or a narrower range)")

    @property
    def needs_stable_runs(self) -> bool:
        """``constant_ewa`` and ``wsd`` read the stable runs."""
        return "constant_ewa" in self.schedules or "wsd" in self.schedules


def apply_decay(spec) -> None:
    """A ``schedule`` study's checks and defaults (called from ``StudySpec.__post_init__``)."""
    decay = spec.decay
    if decay is None:
        decay = DecaySpec()
    elif isinstance(decay, Mapping):
        decay = DecaySpec.from_dict(decay)
    elif not isinstance(decay, DecaySpec):
        raise ConfigError("decay", decay, "must be a mapping of fields")
    object.__setattr__(spec, "decay", decay)
    if len(tuple(spec.models)) != 1:
        raise ConfigError("models", list(spec.models), "a schedule study takes exactly one model")
    if len(tuple(spec.tokens)) != 1:
        raise ConfigError("tokens", list(spec.tokens), "a schedule study takes exactly one token budget D")
    if spec.schedule not in ("constant", "constant_ewa"):
        raise ConfigError("schedule", spec.schedule, "must be constant in a schedule study (decay.schedules names "
                                                     "the schedules measured; the stable runs are constant)")
    if spec.search.kind != "grid":
        raise ConfigError("search.kind", spec.search.kind, "must be grid in a schedule study (every rate is run "
                                                           "under every schedule)")
