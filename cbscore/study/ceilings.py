"""The lab's ceilings on a study: limits the operator sets and only an admin may pass.

A spec's own ``max_trials`` and ``max_total_tokens`` are sanity limits its owner may raise (in the
form, or through an extension). The operator's ceilings are not in the spec: they come from the
environment of the web app, the runner and the CLI (:meth:`Ceilings.from_env`), and a study past
one is refused unless it is forced, which the web app allows admins only (``CBS_ADMINS``) and the
command line allows the operator on the host (``--force``).

:func:`check_ceilings` measures a spec by arithmetic on its lists (how many settings, batch sizes,
rates and seeds) before anything is built per trial or per cell, so a refusal costs milliseconds
whatever the spec asks for: the longest list first, then the trials, then the tokens.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from cbscore.errors import ConfigError

#: Most trials a study may plan (the paper presets plan 225).
DEFAULT_MAX_TRIALS = 5000
#: Most training tokens a study may spend at full budgets (the paper presets: at most 4.7e13).
DEFAULT_MAX_TOTAL_TOKENS = 1e14
#: Longest list in a spec (batch sizes, seeds, rates, models, token counts, settings...).
DEFAULT_MAX_LIST = 64
#: Longest context in tokens (the paper's is 512; attention's memory grows with its square).
DEFAULT_MAX_CONTEXT = 8192


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ceilings:
    """The lab's ceilings on one study."""

    max_trials: int = DEFAULT_MAX_TRIALS
    """Most trials a study may plan (``CBS_MAX_TRIALS``)."""
    max_total_tokens: float = DEFAULT_MAX_TOTAL_TOKENS
    """Most training tokens a study may spend if every trial ran its whole budget (``CBS_MAX_TOTAL_TOKENS``)."""
    max_list: int = DEFAULT_MAX_LIST
    """Most entries of any list in a spec (``CBS_MAX_LIST``)."""
    max_context_tokens: int = DEFAULT_MAX_CONTEXT
    """Longest ``context_tokens`` (``CBS_MAX_CONTEXT``)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Ceilings:
        """The ceilings set in ``env`` (default: this process's environment), else the defaults."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, field, kind in (("CBS_MAX_TRIALS", "max_trials", int), ("CBS_MAX_LIST", "max_list", int),
                                  ("CBS_MAX_TOTAL_TOKENS", "max_total_tokens", float),
                                  ("CBS_MAX_CONTEXT", "max_context_tokens", int)):
            raw = (env.get(name) or "").strip()
            if not raw:
                continue
            try:
                value = kind(float(raw)) if kind is int else kind(raw)
            except ValueError:
                raise ConfigError(name, raw, "must be a positive number") from None
            if not value > 0:
                raise ConfigError(name, raw, "must be a positive number")
            values[field] = value
        return cls(**values)


def _lists(obj: Any, prefix: str = "") -> list[tuple[str, int]]:
    """``(path, length)`` of every list and mapping field of ``obj`` and of its nested specs."""
    out = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, (tuple, list, Mapping)):
            out.append((f"{prefix}{f.name}", len(value)))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.extend(_lists(value, f"{prefix}{f.name}."))
    return out


def check_ceilings(spec, ceilings: Ceilings | None = None) -> None:
    """:class:`ConfigError` naming what passes the lab's ceilings (``ceilings``, default
    :meth:`Ceilings.from_env`): a context longer than ``max_context_tokens``, a list longer than
    ``max_list``, more trials than ``max_trials``, more tokens than ``max_total_tokens``. Nothing is
    built per trial or per cell."""
    from cbscore.study.kinds import grid_tokens, grid_trials

    c = ceilings or Ceilings.from_env()
    if spec.context_tokens > c.max_context_tokens:
        raise ConfigError("context_tokens", spec.context_tokens, f"is longer than the lab's ceiling of "
                          f"{c.max_context_tokens:,} tokens (CBS_MAX_CONTEXT); only an admin may launch past it")
    for path, length in _lists(spec):
        if length > c.max_list:
            raise ConfigError(path, f"{length:,} entries", f"is longer than the lab's ceiling of {c.max_list} "
                              "entries per list (CBS_MAX_LIST); only an admin may launch past it")
    trials = grid_trials(spec)
    if trials > c.max_trials:
        raise ConfigError("trials", f"{trials:,} trials", f"the study plans more than the lab's ceiling of "
                          f"{c.max_trials:,} trials (CBS_MAX_TRIALS; the spec's max_trials does not raise it); "
                          "only an admin may launch past it")
    tokens = grid_tokens(spec)
    if tokens > c.max_total_tokens:
        raise ConfigError("total_tokens", f"{tokens:.3g} tokens", f"the study may spend more than the lab's ceiling of "
                          f"{c.max_total_tokens:.3g} training tokens (CBS_MAX_TOTAL_TOKENS; the spec's "
                          "max_total_tokens does not raise it); only an admin may launch past it")
