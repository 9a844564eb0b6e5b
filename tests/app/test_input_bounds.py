"""The pages refuse input that could take the server down, by name and at once (issue 21,
findings 3 and 4): an alias bomb pasted into the Launch page, and uploads over Streamlit's cap."""

from __future__ import annotations

import time
from unittest import mock

from app.cli import MAX_UPLOAD_MB, streamlit_command
from tests.cbscore.study.test_safe_yaml import billion_laughs


def test_an_alias_bomb_pasted_into_the_launch_page_is_refused_and_nothing_launched(app_test, empty_env):
    app_test.run()
    app_test.text_area(key="launch.yaml_text").set_value(billion_laughs())
    start = time.perf_counter()
    with mock.patch("workers.query.api.launch_study") as submit:
        app_test.button(key="launch.yaml_load").click().run()
    assert time.perf_counter() - start < 5.0  # a whole page run; the parse itself takes milliseconds
    submit.assert_not_called()
    assert any("must not use YAML anchors or aliases" in e.value for e in app_test.error)
    assert app_test.text_input(key="launch.name").value == "demo"  # the form is untouched


def test_the_upload_cap_is_set_on_the_server():
    cmd = streamlit_command(8501)
    assert cmd[cmd.index("--server.maxUploadSize") + 1] == str(MAX_UPLOAD_MB) == "64"


def test_an_uploaded_truth_table_over_its_limits_is_refused_by_name_in_milliseconds():
    """The Launch page's truth upload (``read_truth_text``) checks the same bounds as the Import
    page before parsing: a million-column header, and more rows than MAX_CSV_ROWS."""
    import pytest

    from app.spec_form import read_truth_text
    from cbscore.analysis import MAX_CSV_ROWS
    from cbscore.errors import DataError
    from cbscore.study import load_preset

    spec = load_preset("demo")
    for text, says in [(",".join(["c"] * 1_000_000) + "\n1\n", "line 1 (header): 1,000,000 columns"),
                       ("setting,s_min,b_noise\n" + "a,1,2\n" * (MAX_CSV_ROWS + 1), "rows, the limit")]:
        start = time.perf_counter()
        with pytest.raises(DataError) as err:
            read_truth_text(text, spec, "truth.csv")
        assert time.perf_counter() - start < 1.0
        assert str(err.value).startswith("truth.csv") and says in str(err.value)


def test_a_steps_table_uploaded_to_the_import_page_past_its_row_limit_is_refused_by_name_and_not_parsed(app_test, empty_env):
    # Issue 41, finding 9: a 1M-row upload cost the web process 112 s and 1.2 GB. The Import page now
    # counts rows before parsing (MAX_IMPORT_ROWS) and names the file and the limit.
    from cbscore.analysis import MAX_IMPORT_ROWS, check_csv_rows
    from cbscore.errors import DataError

    text = "setting,batch_size,steps\n" + "s,4,100\n" * (MAX_IMPORT_ROWS + 1)
    start = time.perf_counter()
    try:
        check_csv_rows(text, "big.csv")
    except DataError as exc:
        message = str(exc)
    assert time.perf_counter() - start < 1.0
    assert message.startswith(f"big.csv: {MAX_IMPORT_ROWS + 1:,} rows, over the limit of {MAX_IMPORT_ROWS:,}")
    check_csv_rows("setting,batch_size,steps\n" + "s,4,100\n" * MAX_IMPORT_ROWS, "ok.csv")  # at the limit: read
    at = app_test
    at.run()
    at.switch_page("app_pages/import_table.py")
    at.run()
    at.file_uploader(key="import.file").set_value(("big.csv", text.encode(), "text/csv")).run()
    assert not at.exception
    assert any(f"over the limit of {MAX_IMPORT_ROWS:,}" in e.value and "big.csv" in e.value for e in at.error)
    assert not [s.value for s in at.success if "Read" in s.value]  # nothing was read, nothing fitted
