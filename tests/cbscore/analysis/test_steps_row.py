"""``StepsRow``: a steps table's trial, typed, that writes the same CSV and fits the same as the
dicts it replaces."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from cbscore.analysis import StepsRow, analyze_table, normalize_row, read_steps_csv, steps_csv_text
from cbscore.errors import DataError

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"


def test_a_row_writes_the_csv_line_of_the_dict_it_replaces():
    """The dict ``study_table`` built before (``""`` for a blank cell, numbers as they came) and the
    typed row give the same CSV text: an integer stays one, a float keeps its digits."""
    old = {"setting": "s", "batch_size": 64, "steps": "", "n_params": 84934656, "tokens": 1741000000,
           "context": 128, "outcome": "censored", "trial_id": "t1", "role": "trial", "lr": 0.1 + 0.2,
           "beta2": None, "tau": 12.5, "seed": 0, "run_id": "abc", "budget_steps": 1200, "steps_projected": "",
           "stopped_by": ""}
    new = StepsRow(setting="s", batch_size=64, n_params=84934656, tokens=1741000000, context=128,
                   outcome="censored", trial_id="t1", role="trial", lr=0.1 + 0.2, tau=12.5, seed=0, run_id="abc",
                   budget_steps=1200)
    columns = tuple(old)
    assert steps_csv_text([new.to_dict()], columns) == steps_csv_text([old], columns)
    assert "s,64,,84934656,1741000000,128,censored,t1,trial,0.30000000000000004,,12.5,0,abc,1200,," in \
        steps_csv_text([new.to_dict()], columns)


def test_from_mapping_reads_text_cells_and_keeps_numbers_as_given():
    row = StepsRow.from_mapping({"setting": " s ", "batch_size": "256", "steps": "1200.5", "n_params": 7,
                                 "outcome": "", "seed": "1", "beta2": "0.95", "tau": "nan", "lr": "",
                                 "run_id": None, "extra": "ignored"})
    assert row == StepsRow(setting="s", batch_size=256, steps=1200.5, n_params=7, outcome="reached", seed=1,
                           beta2=0.95)
    assert type(row.n_params) is int and type(row.batch_size) is int
    # the rows read_steps_csv gives (typed already) come through unchanged
    [read] = read_steps_csv(io.StringIO("setting,batch_size,steps,outcome\na,64,,censored\n"))
    assert StepsRow.from_mapping(read) == StepsRow(setting="a", batch_size=64, outcome="censored")


@pytest.mark.parametrize(("row", "message"), [
    ({"setting": "", "batch_size": 64}, "column 'setting': must be given, but got ''."),
    ({"setting": "s", "batch_size": "6.5"}, "column 'batch_size': must be an integer, but got '6.5'."),
    ({"setting": "s", "batch_size": 64, "steps": "many"}, "column 'steps': must be a number, but got 'many'."),
])
def test_from_mapping_names_the_column_and_the_value_it_cannot_use(row, message):
    with pytest.raises(DataError) as exc:
        StepsRow.from_mapping(row, "upload.csv row 3")
    assert str(exc.value) == f"upload.csv row 3, {message}"


def test_normalize_row_reads_a_typed_row_as_its_mapping():
    row = StepsRow(setting="s", batch_size=64, outcome="censored", budget_steps=300, lr=0.01)
    assert normalize_row(row, "row 1") == normalize_row(row.to_dict(), "row 1")
    assert normalize_row(row, "row 1")["budget_steps"] == 300.0


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in RESULTS.glob("*/steps.csv")))
def test_typed_rows_of_a_committed_table_fit_exactly_as_itssteps_csv_text(folder):
    """The Import page fits the typed rows of what read_steps_csv read: the same fit, number for number."""
    refit = json.loads((RESULTS / folder / "summary.json").read_text())["refit"].split()
    b_ref, overhead = int(refit[refit.index("--b-ref") + 1]), float(refit[refit.index("--overhead") + 1])
    read = read_steps_csv(RESULTS / folder / "steps.csv")
    typed = [StepsRow.from_mapping(r) for r in read]
    fit = lambda rows: analyze_table(rows, b_ref=b_ref, overhead=overhead, bootstrap=20).to_json_dict()  # noqa: E731
    assert fit(typed) == fit(read)
