"""Errors that carry a message meant for the user (the CLI prints them without a traceback), what a
message may show of a value (:func:`shown`, :func:`clipped`) and of a credential (:func:`masked`), and
the checks of single config fields that raise :class:`ConfigError` naming the field and the value it got.

Credentials: a broker or database URL carries its password (``redis://:PASSWORD@host:6379/0``,
``postgresql://cbs:PASSWORD@db/cbs_mlflow``). Every message that names one, on a page, in a log or on a
command line, shows it through :func:`masked_url`, and a page shows any text through :func:`masked`,
which masks every such URL in it.
"""

from __future__ import annotations

import math
import re
from typing import Any

#: Longest value (its ``repr``) an error message shows: a message goes to a page and a log, and a
#: value can be a whole pasted text; the rest is cut, so a message never echoes a document.
SHOWN_CHARS = 80


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters (ending in ``…`` and the length it had when cut)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


#: Longest reason an error message shows (a reason may quote a long list the user sent).
REASON_CHARS = 600


def clipped(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` cut to ``limit`` characters (ending in ``…`` when cut)."""
    return text if len(text) <= limit else f"{text[:limit]}…"


#: What stands for a password.
MASK = "***"

# scheme://user:password@ — the password runs to the authority's last "@" (an unescaped "@" in it
# is masked whole), never past a "/" or a space.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*):(?P<password>[^\s/]*)@")


def masked(text: str) -> str:
    """``text`` with the password of every URL in it replaced by :data:`MASK`."""
    return _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@" if m["password"] else m[0], text)


def masked_url(url: str) -> str:
    """``url`` with its password replaced by :data:`MASK` (``redis://:***@host:6379/0``)."""
    return masked(url)


class CbsError(Exception):
    """Base of every error whose message is shown to the user as is."""


class ConfigError(CbsError, ValueError):
    """A setting has a value that cannot be used; the message names the field and the value."""

    def __init__(self, field: str, value: object, reason: str):
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}: {clipped(reason)}, but got {shown(value)}.")


class DataError(CbsError):
    """The data source cannot be read, prepared or served as asked."""


class FitError(CbsError):
    """The data cannot support the requested fit; the message says why."""

# Checks of single config fields (each raises ConfigError naming the field and the value).

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
