"""A steps table is read in time linear in its size, with byte, row and column limits that name
themselves (issue 21, finding 4: the header check was quadratic, 20k columns took 2.5 s)."""

from __future__ import annotations

import io
import time

import pytest

from cbscore.analysis import read_steps_csv
from cbscore.analysis._csv import MAX_CSV_BYTES, MAX_CSV_COLUMNS, MAX_CSV_ROWS
from cbscore.errors import DataError


def refused_within_a_second(text: str) -> str:
    start = time.perf_counter()
    handle = io.StringIO(text)
    handle.name = "upload.csv"
    with pytest.raises(DataError) as err:
        read_steps_csv(handle)
    assert time.perf_counter() - start < 1.0
    return str(err.value)


def test_a_million_column_header_is_refused_in_milliseconds():
    header = ",".join(f"c{i}" for i in range(1_000_000))
    message = refused_within_a_second(header + "\n1,2,3\n")
    assert "1,000,000 columns" in message and "MAX_CSV_COLUMNS" in message


def test_duplicate_columns_are_found_in_linear_time():
    header = ",".join(["setting", "batch_size", "steps"] + [f"c{i}" for i in range(MAX_CSV_COLUMNS - 4)] + ["steps"])
    assert "'steps' appears more than once" in refused_within_a_second(header + "\n")


def test_too_many_rows_are_refused_naming_the_limit(monkeypatch):
    monkeypatch.setattr("cbscore.analysis._csv.MAX_CSV_ROWS", 3)
    rows = "".join(f"s,{b},{1000 // b}\n" for b in (1, 2, 4, 8))
    assert "more than 3 data rows" in refused_within_a_second("setting,batch_size,steps\n" + rows)
    assert MAX_CSV_ROWS == 1_000_000


def test_text_over_the_byte_limit_is_refused(monkeypatch):
    monkeypatch.setattr("cbscore.analysis._csv.MAX_CSV_BYTES", 100)
    assert "MAX_CSV_BYTES" in refused_within_a_second("setting,batch_size,steps\n" + "s,8,100\n" * 20)
    assert MAX_CSV_BYTES == 64 * 2**20
