"""The study spec's field docs, as the Launch form's help and ``cbs study fields`` show them: both
read them here, from the docstrings under the fields (:mod:`cbscore.field_docs`), so their words
cannot drift apart."""

from __future__ import annotations

import functools

from cbscore.data.config import DataConfig
from cbscore.field_docs import FieldDoc, field_doc, field_rows, readable
from cbscore.study.spec import StudySpec

#: Spec fields typed as a plain mapping, by the config whose fields their keys are.
NESTED = {"data": DataConfig}


def spec_field_doc(name: str) -> str:
    """The doc of a dotted spec field (``search.lrs``, ``data.source``) as a reader sees it
    (:func:`~cbscore.field_docs.readable`); a :class:`KeyError` names a field that is not there."""
    return readable(field_doc(StudySpec, name, NESTED))


def spec_field_range(name: str) -> str:
    """The range a dotted spec field's metadata states (``a finite number in [0, 10]``; for a list,
    each entry's); empty when it states none."""
    return _ranges().get(name, "")


@functools.cache
def _ranges() -> dict[str, str]:
    """Each dotted spec field's stated range, read once (every Launch widget's help asks)."""
    return {row.name: row.range for row in spec_fields()}


def spec_fields() -> list[FieldDoc]:
    """Every spec field in declaration order, each block's fields after its row (``search``,
    ``search.kind``, ...), with the docs as written."""
    return field_rows(StudySpec, NESTED)


__all__ = ["NESTED", "spec_field_doc", "spec_field_range", "spec_fields"]
