"""Checks of single config fields: each raises :class:`~cbscore.errors.ConfigError` naming the
field and the value it got."""

from __future__ import annotations

import math
from typing import Any

from cbscore.errors import ConfigError


def positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(name, value, "must be a positive integer")


def non_negative_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(name, value, "must be a non-negative integer")


def finite(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(name, value, "must be a finite number")


def positive_finite(name: str, value: Any) -> None:
    finite(name, value)
    if value <= 0:
        raise ConfigError(name, value, "must be a positive finite number")


def in_range(name: str, value: Any, low: float, high: float, *, closed_high: bool = False) -> None:
    finite(name, value)
    if not (low <= value < high or (closed_high and value == high)):
        bracket = "]" if closed_high else ")"
        raise ConfigError(name, value, f"must be in [{low:g}, {high:g}{bracket}")
