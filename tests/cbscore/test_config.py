"""Config: the base of the frozen configs (wire format, coercion by type, field checks first)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from cbscore.config import Config, Entry, Finite, Range, above, at_least, between, boolean, checked, folder, one_of
from cbscore.errors import ConfigError, positive_int

CALLS: list[str] = []


@dataclass(frozen=True, kw_only=True)
class Inner(Config):
    size: int = checked(positive_int, 1)
    """A positive count."""


@dataclass(frozen=True, kw_only=True)
class Outer(Config):
    name: str = checked(one_of(("a", "b")))
    """Required, one of two."""
    rate: float = checked(between(0.0, 1.0), 0.5)
    steps: int | None = checked(positive_int, None)
    """``None`` passes the check by."""
    taus: tuple[float, ...] | None = None
    table: tuple[tuple[int, int], ...] = ()
    inner: Inner = field(default_factory=Inner)
    limit: float = checked(above(1, "must be greater than 1"), 2.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        CALLS.append("post_init")
        if self.steps is not None and self.steps > self.inner.size:
            raise ConfigError("steps", self.steps, f"must not exceed inner.size={self.inner.size}")


def test_round_trip_through_json_with_nested_and_tuple_fields():
    c = Outer(name="a", steps=2, taus=[0.9, 0.99], table=[[1, 2], [3, 4]], inner={"size": 3})
    assert c.taus == (0.9, 0.99) and c.table == ((1, 2), (3, 4)) and c.inner == Inner(size=3)
    wire = c.to_dict()
    assert wire == {"name": "a", "rate": 0.5, "steps": 2, "taus": [0.9, 0.99], "table": [[1, 2], [3, 4]],
                    "inner": {"size": 3}, "limit": 2.0}
    assert list(wire) == ["name", "rate", "steps", "taus", "table", "inner", "limit"]  # field order
    assert Outer.from_dict(json.loads(json.dumps(wire))) == c
    assert Outer(name="b").to_dict()["taus"] is None


def test_from_dict_refuses_unknown_and_missing_fields_and_non_mappings():
    with pytest.raises(ConfigError, match=r"^colour: is not a Outer field, but got 'red'\.$"):
        Outer.from_dict({"name": "a", "colour": "red"})
    with pytest.raises(ConfigError, match=r"^name: is required, but got None\.$"):
        Outer.from_dict({"rate": 0.1})
    with pytest.raises(ConfigError, match=r"^outer: must be a dict of Outer fields, but got \[1\]\.$"):
        Outer.from_dict([1])
    with pytest.raises(ConfigError, match=r"^size0: is not a Inner field"):
        Outer(name="a", inner={"size0": 1})
    with pytest.raises(ConfigError, match=r"^inner: must be a Inner or a dict of its fields, but got 3\.$"):
        Outer(name="a", inner=3)


def test_field_checks_run_first_in_field_order_then_post_init():
    CALLS.clear()
    with pytest.raises(ConfigError) as err:  # both fields bad: the first field's check speaks
        Outer(name="c", rate=2.0)
    assert (err.value.field, err.value.reason) == ("name", "must be one of a, b") and CALLS == []
    with pytest.raises(ConfigError, match=r"^rate: must be in \[0, 1\), but got 2\.0\.$"):
        Outer(name="a", rate=2.0)
    with pytest.raises(ConfigError, match=r"^steps: must be a positive integer, but got 0\.$"):
        Outer(name="a", steps=0)  # the field check, not the cross-field rule
    assert CALLS == []
    with pytest.raises(ConfigError, match=r"^steps: must not exceed inner\.size=1"):
        Outer(name="a", steps=2)
    assert CALLS == ["post_init"]


def test_checks_made_from_a_few_words():
    for check, good, bad, reason in [
        (between(0.0, 1.0, closed_high=True), 1.0, 1.5, "must be in [0, 1]"),
        (above(1, "must be greater than 1"), 1.5, 1, "must be greater than 1"),
        (at_least(0, "must be non-negative"), 0, -1, "must be non-negative"),
        (one_of(("x", "y")), "y", "z", "must be one of x, y"),
        (boolean, False, 0, "must be true or false"),
        (folder, "a/b", "", "must be a folder path or None"),
    ]:
        check("f", good)
        with pytest.raises(ConfigError) as err:
            check("f", bad)
        assert (err.value.field, err.value.value, err.value.reason) == ("f", bad, reason)
    with pytest.raises(ConfigError, match="must be a finite number"):
        above(0, "must be positive")("f", float("nan"))


def test_replace_checks_again_and_configs_stay_frozen():
    import dataclasses

    c = Outer(name="a")
    with pytest.raises(ConfigError, match="^rate: "):
        dataclasses.replace(c, rate=-1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.rate = 0.1  # type: ignore[misc]


@dataclass(frozen=True, kw_only=True)
class Block(Config):
    """A spec block (``_block``): its messages name ``extra.field`` as the study spec's do."""

    _block = "extra"

    size: int = checked(positive_int, 1)
    table: tuple[tuple[int, int], ...] = field(default=(), metadata={"coerce": False})


def test_a_spec_block_names_its_fields_and_lists_the_known_ones():
    with pytest.raises(ConfigError) as err:
        Block.from_dict({"size": 0})
    assert str(err.value) == "extra.size: must be a positive integer, but got 0."
    with pytest.raises(ConfigError) as err:
        Block.from_dict({"sise": 2})
    assert str(err.value) == "extra.sise: is not an extra field (known: size, table), but got 2."
    with pytest.raises(ConfigError) as err:
        Block.from_dict([1])
    assert str(err.value) == "extra: must be a mapping of fields, but got [1]."


def test_a_field_left_uncoerced_keeps_its_value_and_still_goes_to_the_wire_as_lists():
    block = Block(table=[[1, 2]])
    assert block.table == [[1, 2]]  # __post_init__ reads it as given (a message quotes it as given)
    assert Block(table=((1, 2),)).to_dict() == {"size": 1, "table": [[1, 2]]}


def _halves(value):
    return tuple(v / 2 for v in value) if isinstance(value, list) else value


@dataclass(frozen=True, kw_only=True)
class Owned(Config):
    """Fields coerced by their own function (``checked(..., coerce=f)``), a mapping, a list of configs."""

    halves: tuple[float, ...] = checked(None, (), coerce=_halves)
    labels: dict[str, int] | None = checked(None, None, coerce=lambda v: None if v is None else dict(v))
    inners: tuple[Inner, ...] = checked(None, (), coerce=lambda v: tuple(Inner.from_dict(e) if isinstance(e, dict)
                                                                         else e for e in v))


def test_a_field_coerced_by_its_own_function_and_its_wire_form():
    c = Owned(halves=[1.0, 3.0], labels={"a": 1}, inners=[{"size": 2}, Inner(size=3)])
    assert c.halves == (0.5, 1.5)  # the field's function, not the type's list -> tuple
    assert c.inners == (Inner(size=2), Inner(size=3))
    wire = c.to_dict()
    assert wire == {"halves": [0.5, 1.5], "labels": {"a": 1}, "inners": [{"size": 2}, {"size": 3}]}
    wire["labels"]["a"] = 9  # the wire's mapping is a new dict: the frozen config keeps its own
    assert c.labels == {"a": 1}
    assert Owned(halves=(1.0,)).halves == (1.0,)  # a tuple is taken as given by this function
    assert Owned().to_dict()["labels"] is None


@dataclass(frozen=True, kw_only=True)
class _Ranged(Config):
    share: float = checked(None, 0.5, range=Range(0, 1, hi_open=True))
    """Stated, not applied by the base."""


@pytest.mark.parametrize("rng, value, message", [
    (Range(0, 1, hi_open=True), 1, "x: must be a finite number in [0, 1), but got 1."),
    (Range(0, 10, lo_open=True), True, "x: must be a finite number in (0, 10], but got True."),
    (Range(1, 2**24, integer=True), 2.0, "x: must be a whole number in [1, 16777216], but got 2.0."),
    (Range(1, 100), 101, "x: must be a finite number in [1, 100], but got 101."),
    (Range(1, 100), float("inf"), "x: must be a finite number in [1, 100], but got inf."),
    (Finite(1e18), "1", "x: must be a number, but got '1'."),
    (Finite(1e18), float("nan"), "x: must be a finite number, but got nan."),
    (Finite(1e18), -1e19, "x: must be a finite number within ±1e+18, but got -1e+19."),
    (Entry(Range(1, 9, integer=True), Range(0, 1)), (3, 2.5), "x: must be a finite number in [0, 1], but got 2.5."),
    (Entry(Range(1, 9, integer=True), Range(0, 1)), (3,), "x: must be [a whole number in [1, 9], a finite number "
                                                          "in [0, 1]], but got (3,)."),
])
def test_a_stated_range_refuses_with_its_own_words(rng, value, message):
    with pytest.raises(ConfigError) as err:
        rng.check("x", value)
    assert str(err.value) == message


def test_a_range_is_kept_in_the_fields_metadata_and_not_applied_by_the_base():
    from dataclasses import fields

    assert fields(_Ranged)[0].metadata["range"] == Range(0, 1, hi_open=True)
    assert _Ranged(share=3).share == 3  # the config that owns the field applies it (cbscore.study.bounds)
    Range(0, 1, hi_open=True).check("x", 0.0)
    with pytest.raises(ConfigError, match=r"must be a whole number in \[1, 1e\+15\]"):
        Range(1, 10**15, integer=True).check("x", 10**400)  # past a float's range: no OverflowError
    Entry(Range(1, 9, integer=True), Range(0, 1)).check("x", (9, 1))
