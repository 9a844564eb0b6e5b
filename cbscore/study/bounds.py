"""The stated range of every number in a study spec.

A spec arrives from a web form, a pasted YAML or a CLI file, and each number in it sizes a job on
a shared machine: ``budget_multiple: 1e300`` is a trial that never ends, ``tokens: 1e30`` a raw
``ValueError`` deep in the recipe, ``prune_margin: true`` a boolean read as 1. :func:`check_numbers`
runs first in ``StudySpec.__post_init__``: every numeric field must be a number (never a
boolean), finite, and inside the range :data:`RANGES` states for it, or a
:class:`~cbscore.errors.ConfigError` names the field and the value. A numeric field without an
entry here (a field added later) still must be finite and within ±:data:`ANY_NUMBER`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from cbscore.errors import ConfigError

#: Largest token count anywhere in a spec (D of a setting): 10¹⁵; the paper's largest D is 2.5·10¹⁰.
MAX_TOKENS = 10**15
#: Largest batch size, micro-batch or noise-scale split, in sequences.
MAX_BATCH = 2**24
#: Bound on a numeric field this table does not name.
ANY_NUMBER = 1e18
#: Longest string value in the ``data`` mapping (a path, a hub name, a column name).
MAX_DATA_TEXT = 1024


class Range(NamedTuple):
    """``lo ≤ x ≤ hi`` (``lo < x`` when ``lo_open``, ``x < hi`` when ``hi_open``); ``integer``: a whole number."""

    lo: float
    hi: float
    integer: bool = False
    lo_open: bool = False
    hi_open: bool = False

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a finite number"
        return f"{kind} in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"

    def holds(self, x: float) -> bool:
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below


#: Ranges of the numeric fields (for lists: of each element). Keys are spec paths.
RANGES: dict[str, Range] = {
    "tokens": Range(1, MAX_TOKENS, integer=True),
    "settings.tokens": Range(1, MAX_TOKENS, integer=True),
    "tokens_per_param": Range(0, 1e4, lo_open=True),
    "batch_sizes": Range(1, MAX_BATCH, integer=True),
    "context_tokens": Range(1, 2**20, integer=True),
    "b_ref": Range(1, MAX_BATCH, integer=True),
    "overhead": Range(0, 10, lo_open=True),
    "target_losses": Range(0, 100),
    "budget_multiple": Range(1, 100),
    "budget_margin": Range(0, 10),
    "prune_margin": Range(0, 10),
    "equal_token_margin": Range(0, 10),
    "far_rate_margin": Range(0, 10),
    "far_rate_fraction": Range(0, 1),
    "warmup_fraction": Range(0, 1, hi_open=True),
    "beta1": Range(0, 1, hi_open=True),
    "beta2": Range(0, 1, hi_open=True),
    "ewa_taus": Range(0, 1, lo_open=True, hi_open=True),
    "weight_decay": Range(0, 10),
    "grad_clip": Range(0, 1e6, lo_open=True),
    "micro_batch_size": Range(1, MAX_BATCH, integer=True),
    "devices_per_trial": Range(1, 1024, integer=True),
    "gns_micro_batch_size": Range(1, MAX_BATCH, integer=True),
    "eval_windows": Range(1, 10**6, integer=True),
    "max_eval_fraction": Range(0, 10, lo_open=True),
    "seeds": Range(0, 2**32 - 1, integer=True),
    "max_trials": Range(1, 10**7, integer=True),
    "max_total_tokens": Range(0, 1e18, lo_open=True),
    "search.lrs": Range(0, 10, lo_open=True),
    "search.lr_min": Range(0, 10, lo_open=True),
    "search.lr_max": Range(0, 10, lo_open=True),
    "search.n_trials": Range(1, 10_000, integer=True),
    "search.parallel_per_cell": Range(1, 1024, integer=True),
    "search.lr_extensions": Range(0, 8, integer=True),
    "experimental.lr_prior": Range(0, 10, lo_open=True),
}


def _numeric(annotation: Any) -> bool:
    """Whether a field's annotation (a string under ``from __future__ import annotations``) holds numbers."""
    return re.search(r"\b(int|float)\b", str(annotation)) is not None


def check_number(field: str, value: Any, rng: Range | None = None) -> None:
    """``value`` is a number (not a boolean), finite, and in ``rng`` (else within ±ANY_NUMBER)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(field, value, f"must be {rng.describe() if rng else 'a number'}")
    if rng is not None and rng.integer and not isinstance(value, int):
        raise ConfigError(field, value, f"must be {rng.describe()}")
    try:
        x = float(value)
    except OverflowError:  # an int past a float's range
        x = math.inf
    if not math.isfinite(x):
        raise ConfigError(field, value, f"must be {rng.describe() if rng else 'a finite number'}")
    if rng is None:
        if abs(x) > ANY_NUMBER:
            raise ConfigError(field, value, f"must be a finite number within ±{ANY_NUMBER:g}")
    elif not rng.holds(x):
        raise ConfigError(field, value, f"must be {rng.describe()}")


def _check_fields(obj: Any, prefix: str) -> None:
    for f in dataclasses.fields(obj):
        if not _numeric(f.type):
            continue
        path = f"{prefix}{f.name}"
        value = getattr(obj, f.name)
        rng = RANGES.get(path)
        if isinstance(value, Mapping):
            for key, item in value.items():
                check_number(f"{path}.{key}", item, rng)
        elif isinstance(value, (tuple, list)):
            for item in value:
                check_number(path, item, rng)
        elif not dataclasses.is_dataclass(value):
            check_number(path, value, rng)


def check_numbers(spec: Any) -> None:
    """Every number of ``spec`` (a ``StudySpec``, lists already tuples) in its stated range, and
    every value of ``spec.data`` a scalar; the first one that is not raises a ConfigError."""
    _check_fields(spec, "")
    if dataclasses.is_dataclass(spec.search):
        _check_fields(spec.search, "search.")
    if dataclasses.is_dataclass(getattr(spec, "experimental", None)):
        _check_fields(spec.experimental, "experimental.")
    for i, setting in enumerate(spec.settings):
        check_number(f"settings[{i}].tokens", setting.tokens, RANGES["settings.tokens"])
    for key, value in dict(spec.data).items():
        field = f"data.{key}"
        if isinstance(value, str):
            if len(value) > MAX_DATA_TEXT:
                raise ConfigError(field, f"{len(value):,} characters", f"must be at most {MAX_DATA_TEXT} characters")
        elif value is not None and not isinstance(value, bool):
            check_number(field, value)
