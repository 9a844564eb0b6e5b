"""The typed rows of ``workers.query.api``: the steps table's columns are :class:`StepsRow`'s fields."""

from __future__ import annotations

import dataclasses

from cbscore.analysis import StepsRow
from workers.query import api


def test_the_tables_columns_are_the_rows_fields_in_order():
    """``cbs study export --all-columns`` and ``trials.csv`` write ``TABLE_COLUMNS`` from ``row.to_dict()``:
    a field missing from the columns would never be written, a column missing from the fields blank."""
    assert tuple(f.name for f in dataclasses.fields(StepsRow)) == api.TABLE_COLUMNS
    assert set(api.FIT_COLUMNS) <= set(api.TABLE_COLUMNS)
    assert tuple(StepsRow(setting="s", batch_size=1).to_dict()) == api.TABLE_COLUMNS


def test_the_door_exports_no_parse_helper():
    """The pages read typed rows; nothing in the door re-parses the table's text (issue 43, part 3)."""
    assert not {"as_int", "as_float"} & set(api.__all__)
    assert not hasattr(api, "as_float") and not hasattr(api, "as_int")
