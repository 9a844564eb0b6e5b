"""Field docs read from the docstrings under dataclass fields (cbscore.field_docs), the one source
of the Launch form's help and ``cbs study fields``."""

from __future__ import annotations

import dataclasses

import pytest

from cbscore.data.config import DataConfig
from cbscore.field_docs import REQUIRED, attribute_docs, field_doc, field_rows, owner, readable
from cbscore.study.decay_spec import DecaySpec
from cbscore.study.local_spec import LocalSpec
from cbscore.study.spec import StudySpec
from cbscore.study.spec_docs import NESTED, spec_field_doc, spec_fields
from cbscore.study.spec_parts import SearchSpec
from cbscore.train.config import TrainConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Inner:
    """A nested config."""

    width: int = 3
    """Width in cells,
    on two lines."""
    unnamed: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Base:
    """A base with a documented field."""

    seed: int = 0
    """Seed of everything."""
    inner: _Inner | None = None
    """The inner block."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Child(_Base):
    """A subclass that documents one more field and documents ``seed`` again."""

    seed: int = 1
    """Seed, as the child says it."""
    name: str
    """Required name.

    A second paragraph."""


def test_docs_are_read_from_the_string_under_each_field_with_its_lines_joined():
    assert attribute_docs(_Inner) == {"width": "Width in cells, on two lines."}  # unnamed has none


def test_a_subclass_inherits_its_bases_docs_and_its_own_doc_wins():
    docs = attribute_docs(_Child)
    assert docs["inner"] == "The inner block."
    assert docs["seed"] == "Seed, as the child says it."
    assert docs["name"] == "Required name.\n\nA second paragraph."  # paragraphs kept apart


def test_a_dotted_name_follows_the_nested_config_of_an_optional_field():
    assert owner(_Child, "inner.width") == (_Inner, "width")
    assert field_doc(_Child, "inner.width") == "Width in cells, on two lines."


def test_a_missing_field_or_doc_is_named():
    with pytest.raises(KeyError, match=r"'depth' is not a field of _Inner \(known: width, unnamed\)"):
        field_doc(_Child, "inner.depth")
    with pytest.raises(KeyError, match=r"_Inner.unnamed \(inner.unnamed\) has no docstring"):
        field_doc(_Child, "inner.unnamed")
    with pytest.raises(KeyError, match="'seed' of _Child holds no config class"):
        field_doc(_Child, "seed.x")


def test_rows_give_each_field_its_type_as_written_its_default_and_doc():
    rows = {r.name: r for r in field_rows(_Child, nested={"inner": _Inner})}
    assert list(rows) == ["seed", "inner", "inner.width", "inner.unnamed", "name"]
    assert (rows["inner"].type, rows["inner"].default) == ("_Inner | None", None)
    assert (rows["inner.width"].type, rows["inner.width"].default) == ("int", 3)
    assert rows["name"].default == REQUIRED


def test_the_study_specs_known_docstrings():
    assert field_doc(StudySpec, "search.lrs").startswith("Peak learning rates of the grid (``kind='grid'``);")
    assert owner(StudySpec, "search.lrs") == (SearchSpec, "lrs")
    assert field_doc(StudySpec, "decay.horizon_high") == (
        "Longest horizon (the stable runs' length) as a multiple of D; a cell that reaches the target at none "
        "is censored there.")
    assert owner(StudySpec, "decay.horizon_high") == (DecaySpec, "horizon_high")
    assert owner(StudySpec, "local.epsilon") == (LocalSpec, "epsilon")
    assert field_doc(StudySpec, "budget_margin").startswith("Slack of each trial's budget:")
    assert "The paper presets set 0.5" in field_doc(StudySpec, "budget_margin")


def test_a_numbers_range_is_read_from_its_fields_metadata():
    rows = {r.name: r for r in spec_fields()}
    assert rows["decay.horizon_high"].range == "a finite number in [1, 16]"
    assert rows["seeds"].range == "a whole number in [0, 4294967295]"
    assert rows["local.warmup_schedule"].range.startswith("[a whole number in [1, 1e+15], ")
    assert (rows["name"].range, rows["search"].range, rows["data.source"].range) == ("", "", "")


def test_the_specs_data_mapping_is_documented_by_data_config():
    with pytest.raises(KeyError, match="'data' of StudySpec holds no config class"):
        field_doc(StudySpec, "data.source")
    assert NESTED == {"data": DataConfig}
    assert spec_field_doc("data.source").startswith("`builtin` (public-domain English corpus")


def test_readable_turns_roles_and_literals_into_code():
    assert readable("``grid`` or :mod:`cbscore.study.chained`, :class:`~cbscore.study.LocalSpec`") == (
        "`grid` or `cbscore.study.chained`, `LocalSpec`")


def test_every_spec_and_trainer_field_has_a_doc():
    assert [r.name for r in spec_fields() if not r.doc] == []
    assert [r.name for r in field_rows(TrainConfig) if not r.doc] == []
    names = [r.name for r in spec_fields()]
    assert names[:2] == ["name", "kind"] and "search.narrow_rates" in names and "data.store_dir" in names


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Unresolvable:
    """A config whose one annotation names a type absent at run time (imported for type checking only)."""

    later: NotImportedHere | None = None  # noqa: F821
    """Typed by a name that is not there."""
    inner: _Inner | None = None
    """The inner block."""


def test_an_annotation_absent_at_run_time_leaves_the_other_fields_followed():
    assert field_doc(_Unresolvable, "inner.width") == "Width in cells, on two lines."
    assert [r.name for r in field_rows(_Unresolvable)] == ["later", "inner", "inner.width", "inner.unnamed"]
