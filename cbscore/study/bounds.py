"""The stated range of every number in a study spec.

A spec arrives from a web form, a pasted YAML or a CLI file, and each number in it sizes a job on
a shared machine: ``budget_multiple: 1e300`` is a trial that never ends, ``tokens: 1e30`` a raw
``ValueError`` deep in the recipe, ``prune_margin: true`` a boolean read as 1. Each numeric field
states its range in its metadata (``checked(..., range=Range(1, 100))``, :class:`cbscore.config.Range`),
beside its type, default, check and docstring. :func:`check_numbers` runs last in
``StudySpec.__post_init__``, after the fields' own checks and the rules between them (which name
types and signs in their own words): every number of the spec, of its blocks (``search``,
``experimental``, ``local``, ``decay``) and of its ``settings`` must be a number (never a
boolean), finite, and inside its field's range, or a :class:`~cbscore.errors.ConfigError` names
the field and the value. A field whose range is :data:`FINITE` states none (its check bounds it,
or nothing sensible does): it must still be finite and within ±:data:`ANY_NUMBER`.
:func:`ranges` is the table of every numeric field's range, by its dotted path.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from cbscore.config import Finite, Ranged
from cbscore.errors import ConfigError

#: Largest token count anywhere in a spec (D of a setting): 10¹⁵; the paper's largest D is 2.5·10¹⁰.
MAX_TOKENS = 10**15
#: Largest batch size, micro-batch or noise-scale split, in sequences.
MAX_BATCH = 2**24
#: Bound on a number whose field states no range.
ANY_NUMBER = 1e18
#: The range of a numeric field that states none.
FINITE = Finite(ANY_NUMBER)
#: Longest string value in the ``data`` mapping (a path, a hub name, a column name).
MAX_DATA_TEXT = 1024


def _numeric(annotation: Any) -> bool:
    """Whether a field's annotation (a string under ``from __future__ import annotations``) holds numbers."""
    return re.search(r"\b(int|float)\b", str(annotation)) is not None


def _block(hint: Any) -> tuple[type | None, bool]:
    """``(the dataclass a field holds, whether a tuple of them)``: ``SearchSpec``, ``LocalSpec |
    None``, ``tuple[SettingSpec, ...]``; ``(None, False)`` for any other type."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = rest[0] if len(rest) == 1 else hint
    many = typing.get_origin(hint) is tuple
    if many:
        hint = typing.get_args(hint)[0]
    return (hint, many) if isinstance(hint, type) and dataclasses.is_dataclass(hint) else (None, False)


@functools.cache
def _layout(cls: type) -> tuple[tuple[tuple[str, Ranged | None], ...], tuple[tuple[str, type], ...],
                                tuple[tuple[str, type], ...]]:
    """``cls``'s numeric fields with their ranges (``None``: the field states none), the blocks it
    holds and its lists of blocks, each in field order (worked out once per class)."""
    hints = typing.get_type_hints(cls)
    numbers, blocks, lists = [], [], []
    for f in dataclasses.fields(cls):
        inner, many = _block(hints[f.name])
        if inner is not None:
            (lists if many else blocks).append((f.name, inner))
        elif "range" in f.metadata or _numeric(f.type):
            numbers.append((f.name, f.metadata.get("range")))
    return tuple(numbers), tuple(blocks), tuple(lists)


def ranges(cls: type, prefix: str = "") -> dict[str, Ranged | None]:
    """Every numeric field of ``cls`` and of the blocks it holds, by dotted path (``search.lrs``; a
    list of blocks without an index: ``settings.tokens``), with the range its metadata states
    (``None`` where it states none: checked as :data:`FINITE`)."""
    numbers, blocks, lists = _layout(cls)
    out = {prefix + name: rng for name, rng in numbers}
    for name, inner in (*blocks, *lists):
        out.update(ranges(inner, f"{prefix}{name}."))
    return out


def _check_value(path: str, value: Any, rng: Ranged) -> None:
    """One field's value: a number, each entry of a list, each value of a mapping (named ``path.key``)."""
    if isinstance(value, Mapping):
        items = [(f"{path}.{key}", item) for key, item in value.items()]
    elif isinstance(value, (tuple, list)):
        items = [(path, item) for item in value]
    else:
        items = [(path, value)]
    for name, item in items:
        if item is not None:
            rng.check(name, item)


def _check_fields(obj: Any, prefix: str) -> None:
    """A config's own numbers in field order, then each block's, then each entry of a list of blocks
    (``settings[0].tokens``): the order the first bad number is named in."""
    numbers, blocks, lists = _layout(type(obj))
    for name, rng in numbers:
        _check_value(prefix + name, getattr(obj, name), rng or FINITE)
    for name, _ in blocks:
        value = getattr(obj, name)
        if dataclasses.is_dataclass(value):  # (None where the study's kind has no such block)
            _check_fields(value, f"{prefix}{name}.")
    for name, _ in lists:
        for i, entry in enumerate(getattr(obj, name)):
            if dataclasses.is_dataclass(entry):
                _check_fields(entry, f"{prefix}{name}[{i}].")


def check_numbers(spec: Any) -> None:
    """Every number of ``spec`` (a ``StudySpec``, lists already tuples, blocks read) in its field's
    range, and every value of ``spec.data`` a bounded scalar; the first that is not raises a ConfigError."""
    _check_fields(spec, "")
    # ``data`` is a free-form mapping (its keys are DataConfig's, read at launch), so its values have
    # no field here to state a range on: only finite numbers and texts of a sane length
    for key, value in dict(spec.data).items():
        field = f"data.{key}"
        if isinstance(value, str):
            if len(value) > MAX_DATA_TEXT:
                raise ConfigError(field, f"{len(value):,} characters", f"must be at most {MAX_DATA_TEXT} characters")
        elif value is not None and not isinstance(value, bool):
            FINITE.check(field, value)


__all__ = ["ANY_NUMBER", "FINITE", "MAX_BATCH", "MAX_DATA_TEXT", "MAX_TOKENS", "check_numbers", "ranges"]
