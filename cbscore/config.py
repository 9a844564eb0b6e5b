"""``Config``: the base of the lab's frozen, keyword-only dataclass configs (in the spirit of
OLMo-core's ``Config``).

A subclass declares its fields as usual, each with its docstring under it, and a single field's
check in the field's metadata (:func:`checked`); ``Config`` gives it:

- **coercion** from the wire format, by the field's type: a list (or another iterable that is not
  a string or a mapping) becomes a tuple for a ``tuple[...]`` field, and its list entries tuples
  where the entries are ``tuple[...]`` too; a mapping becomes the nested ``Config`` of a field of
  that type (its ``from_dict``), anything else there is refused;
- **field checks** from the metadata, in field order, a ``None`` passed by where the type allows
  it; they run first, so a subclass's ``__post_init__`` (which calls ``super().__post_init__()``
  first) keeps only the rules between fields;
- ``to_dict()`` (JSON-safe: tuples become lists, nested configs dicts) and ``from_dict()``
  (refusing a non-mapping, an unknown field and a missing required field with
  :class:`~cbscore.errors.ConfigError`); a block of the study spec sets ``_block`` (``"search"``),
  and its messages name ``search.kind`` and list the known fields, as the spec's always have.

- **a number's range** in the metadata too (``checked(..., range=Range(0, 1))``: :class:`Range`,
  :class:`Entry`, :class:`Finite`), declared beside the field's type, default, check and docstring;
  the base does not apply it (a field's check speaks first, with its own words): the config that
  owns the fields walks them (the study spec: :func:`cbscore.study.bounds.check_numbers`), and
  the field docs print it.

A field whose metadata says ``coerce=False`` is left as given for ``__post_init__`` to read (and
still goes to the wire as lists). A field whose metadata gives a function as ``coerce``
(``checked(..., coerce=f)``) is coerced by it instead of by its type, among the coercions above; it
goes to the wire as a coerced field does (a mapping as a new dict).

The work per class (type hints, checks, coercions) is done once, at its first instance: building
a config costs what the hand-written checks cost (the study simulator builds thousands).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from cbscore.errors import ConfigError, finite

C = TypeVar("C", bound="Config")

#: A check of one field: ``check(name, value)`` raises :class:`ConfigError` on a bad value.
Check = Callable[[str, Any], None]


def checked(check: Check | None, default: Any = dataclasses.MISSING, *,
            default_factory: Any = dataclasses.MISSING, coerce: Callable[[Any], Any] | None = None,
            range: Ranged | None = None) -> Any:
    """A dataclass field whose value ``check(name, value)`` accepts (run by :class:`Config` before
    ``__post_init__``'s own rules; a ``None`` is not checked where the field's type allows it);
    ``coerce``: how a wire value becomes the field's value, in place of the one its type implies
    (it gets every value, ``None`` too, and returns the same object where nothing changes);
    ``range``: the stated range of a number (of each entry of a list, each value of a mapping),
    kept in the metadata for the config that owns the field to apply (module docstring)."""
    metadata: dict[str, Any] = {"check": check}
    if coerce is not None:
        metadata["coerce"] = coerce
    if range is not None:
        metadata["range"] = range
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


# ---------------------------------------------------------------- a number's stated range
def _as_float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int past a float's range
        return math.inf


def _bound_text(x: float) -> str:
    """A range's edge as a message states it: whole numbers below 10¹³ exactly (``16777216``, where
    ``:g`` would print ``1.67772e+07``, which is not the edge), others as ``:g`` (``1e+15``, ``0.5``)."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e13 else f"{x:g}"


@dataclasses.dataclass(frozen=True)
class Range:
    """``lo ≤ x ≤ hi`` (``lo < x`` with ``lo_open``, ``x < hi`` with ``hi_open``), finite; with
    ``integer`` a whole number (an ``int``: ``2.0`` is not one). Never a boolean."""

    lo: float
    hi: float
    integer: bool = False
    lo_open: bool = False
    hi_open: bool = False

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a finite number"
        lo, hi = _bound_text(self.lo), _bound_text(self.hi)
        return f"{kind} in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"

    def holds(self, x: float) -> bool:
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below

    def check(self, name: str, value: Any) -> None:
        """A :class:`ConfigError` ("must be" :meth:`describe`) unless ``value`` is in the range."""
        kinds = int if self.integer else (int, float)
        if (isinstance(value, bool) or not isinstance(value, kinds)
                or not (math.isfinite(x := _as_float(value)) and self.holds(x))):
            raise ConfigError(name, value, f"must be {self.describe()}")


@dataclasses.dataclass(frozen=True)
class Finite:
    """The range of a number whose field states none: finite and within ±``bound``."""

    bound: float

    def describe(self) -> str:
        return f"a finite number within ±{self.bound:g}"

    def check(self, name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(name, value, "must be a number")
        x = _as_float(value)
        if not math.isfinite(x):
            raise ConfigError(name, value, "must be a finite number")
        if abs(x) > self.bound:
            raise ConfigError(name, value, f"must be {self.describe()}")


@dataclasses.dataclass(frozen=True)
class Entry:
    """The ranges of a list field's entries that are tuples of numbers, position by position
    (``Entry(Range(1, 10**15, integer=True), Range(0, 1024, lo_open=True))``)."""

    items: tuple[Range, ...]

    def __init__(self, *items: Range) -> None:
        object.__setattr__(self, "items", items)

    def describe(self) -> str:
        return f"[{', '.join(r.describe() for r in self.items)}]"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, (tuple, list)) or len(value) != len(self.items):
            raise ConfigError(name, value, f"must be {self.describe()}")
        for rng, item in zip(self.items, value):
            rng.check(name, item)


#: What a field's metadata may state as its range.
Ranged = Range | Finite | Entry


# ---------------------------------------------------------------- checks made from a few words
def between(low: float, high: float, *, closed_high: bool = False) -> Check:
    """A finite number in ``[low, high)`` (``[low, high]`` with ``closed_high``)."""
    bracket = "]" if closed_high else ")"
    reason = f"must be in [{low:g}, {high:g}{bracket}"

    def check(name: str, value: Any) -> None:
        finite(name, value)
        if not (low <= value < high or (closed_high and value == high)):
            raise ConfigError(name, value, reason)
    return check


def above(bound: float, reason: str) -> Check:
    """A finite number greater than ``bound`` (else ``reason``)."""
    def check(name: str, value: Any) -> None:
        finite(name, value)
        if value <= bound:
            raise ConfigError(name, value, reason)
    return check


def at_least(bound: float, reason: str) -> Check:
    """A finite number not below ``bound`` (else ``reason``)."""
    def check(name: str, value: Any) -> None:
        finite(name, value)
        if value < bound:
            raise ConfigError(name, value, reason)
    return check


def one_of(choices: Iterable[str]) -> Check:
    """One of ``choices`` (the message lists them)."""
    allowed = tuple(choices)
    reason = f"must be one of {', '.join(allowed)}"

    def check(name: str, value: Any) -> None:
        if value not in allowed:
            raise ConfigError(name, value, reason)
    return check


def boolean(name: str, value: Any) -> None:
    """``True`` or ``False`` (not 0 or 1)."""
    if not isinstance(value, bool):
        raise ConfigError(name, value, "must be true or false")


def folder(name: str, value: Any) -> None:
    """A non-empty path string (``None`` where the type allows it)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(name, value, "must be a folder path or None")


# ---------------------------------------------------------------- the base
class _ClassPlan:
    """What :class:`Config` does for one class, worked out once."""

    __slots__ = ("names", "required", "coercions", "checks", "wire", "run")

    def __init__(self, cls: type) -> None:
        fields = dataclasses.fields(cls)
        prefix = f"{cls._block}." if cls._block else ""
        hints = typing.get_type_hints(cls)
        self.names = frozenset(f.name for f in fields)
        self.required = tuple(sorted(f.name for f in fields if f.default is dataclasses.MISSING
                                     and f.default_factory is dataclasses.MISSING))
        self.coercions: list[tuple[str, Callable[[Any], Any]]] = []
        self.checks: list[tuple[str, str, Check, bool]] = []  # (name in messages, field, check, optional)
        wire: list[tuple[str, Callable[[Any], Any] | None]] = []
        for f in fields:
            hint, optional = _strip_none(hints[f.name])
            coerce = _coercion(f.name, hint)
            given = f.metadata.get("coerce", True)
            if callable(given):  # the field's own, in place of its type's
                coerce = given
            if coerce is not None and given:  # False: __post_init__ reads it as given
                self.coercions.append((f.name, coerce))
            check = f.metadata.get("check")
            if check is not None:
                self.checks.append((prefix + f.name, f.name, check, optional))
            wire.append((f.name, _to_wire if coerce is not None else None))
        self.wire = tuple(wire)
        self.run = self._compiled()

    def _compiled(self) -> Callable[[Any], None]:
        """The coercions and checks as one function of straight-line code, as ``dataclasses`` writes
        ``__init__``, so that a declared check costs what the same check written by hand does."""
        scope: dict[str, Any] = {"_set": object.__setattr__}
        lines = ["def run(self):", "    pass"]
        for i, (name, coerce) in enumerate(self.coercions):
            scope[f"coerce{i}"] = coerce
            lines += [f"    v = self.{name}", f"    n = coerce{i}(v)", f"    if n is not v: _set(self, {name!r}, n)"]
        for i, (shown, name, check, optional) in enumerate(self.checks):
            scope[f"check{i}"] = check
            if optional:
                lines += [f"    v = self.{name}", f"    if v is not None: check{i}({shown!r}, v)"]
            else:
                lines.append(f"    check{i}({shown!r}, self.{name})")
        exec("\n".join(lines), scope)  # noqa: S102 (field names are identifiers; the values stay in scope)
        return scope["run"]


def _strip_none(hint: Any) -> tuple[Any, bool]:
    """``(the type without None, whether None is allowed)``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        rest = tuple(a for a in args if a is not type(None))
        if len(rest) < len(args):
            return (rest[0] if len(rest) == 1 else hint), True  # a union of several: taken as is
    return hint, hint is type(None)


def _coercion(name: str, hint: Any) -> Callable[[Any], Any] | None:
    """How a wire value becomes the field's value (``None``: it is taken as is)."""
    if isinstance(hint, type) and issubclass(hint, Config):
        def nested(value: Any, cls: type[Config] = hint) -> Any:
            if isinstance(value, Mapping):
                value = cls.from_dict(dict(value))
            if not isinstance(value, cls):
                raise ConfigError(name, value, f"must be a {cls.__name__} or a dict of its fields")
            return value
        return nested
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        inner = args[0] if args else None
        inner_tuple = typing.get_origin(_strip_none(inner)[0]) is tuple if inner is not None else False

        def as_tuple(value: Any) -> Any:
            if isinstance(value, tuple) or value is None or isinstance(value, (str, bytes, Mapping)):
                return value
            if not hasattr(value, "__iter__"):
                return value  # the field's check says what is wrong with it
            if inner_tuple:
                return tuple(tuple(e) if isinstance(e, list) else e for e in value)
            return tuple(value)
        return as_tuple
    return None


def _to_wire(value: Any) -> Any:
    """JSON's form of a coerced field: a nested config's dict, a tuple's list (of lists, of nested
    configs' dicts), a mapping's new dict (the caller may change it; the config stays as it is)."""
    if isinstance(value, tuple):
        return [_to_wire(e) if isinstance(e, (tuple, Config)) else e for e in value]
    if isinstance(value, Config):
        return value.to_dict()
    if isinstance(value, Mapping):
        return dict(value)
    return value


class Config:
    """Mixin of a ``@dataclass(frozen=True, kw_only=True)`` config (module docstring)."""

    _plans: ClassVar[dict[type, _ClassPlan]] = {}
    #: The study spec's block these fields are read from (``"search"``: checks and messages name
    #: ``search.kind``, a non-mapping "must be a mapping of fields", an unknown field lists the
    #: known ones); ``None``: a config of its own (``TrainConfig``).
    _block: ClassVar[str | None] = None

    @classmethod
    def _plan(cls) -> _ClassPlan:
        plan = Config._plans.get(cls)
        if plan is None:
            plan = Config._plans[cls] = _ClassPlan(cls)
        return plan

    def __post_init__(self) -> None:
        (Config._plans.get(type(self)) or type(self)._plan()).run(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of every field, in field order; ``type(c).from_dict(c.to_dict()) == c``."""
        plan = Config._plans.get(type(self)) or type(self)._plan()
        return {name: (getattr(self, name) if wire is None else wire(getattr(self, name)))
                for name, wire in plan.wire}

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """The config of a dict of its fields (:meth:`to_dict`'s, or JSON's)."""
        block = cls._block
        if not isinstance(data, Mapping):
            if block:
                raise ConfigError(block, data, "must be a mapping of fields")
            raise ConfigError(_snake(cls.__name__), data, f"must be a dict of {cls.__name__} fields")
        plan = Config._plans.get(cls) or cls._plan()
        unknown = data.keys() - plan.names
        if unknown:
            first = sorted(unknown)[0]
            if block:
                article = "an" if block[0] in "aeiou" else "a"
                raise ConfigError(f"{block}.{first}", data[first],
                                  f"is not {article} {block} field (known: {', '.join(sorted(plan.names))})")
            raise ConfigError(first, data[first], f"is not a {cls.__name__} field")
        for name in plan.required:  # (sorted: the first missing in alphabetical order is named)
            if name not in data:
                raise ConfigError(f"{block}.{name}" if block else name, None, "is required")
        return cls(**dict(data))


def _snake(name: str) -> str:
    """``TrainConfig`` → ``train_config`` (how a message names a whole config)."""
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


__all__ = ["Check", "Config", "Entry", "Finite", "Range", "Ranged", "above", "at_least", "between", "boolean",
           "checked", "folder", "one_of"]
