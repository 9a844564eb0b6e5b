"""The pages refuse input that could take the server down, by name and at once (issue 21,
findings 3 and 4): an alias bomb pasted into the Launch page, and uploads over Streamlit's cap."""

from __future__ import annotations

import time
from unittest import mock

from app.cli import MAX_UPLOAD_MB, streamlit_command
from tests.cbscore.test_safe_yaml import billion_laughs


def test_an_alias_bomb_pasted_into_the_launch_page_is_refused_and_nothing_launched(app_test, empty_env):
    app_test.run()
    app_test.text_area(key="launch.yaml_text").set_value(billion_laughs())
    start = time.perf_counter()
    with mock.patch("workers.api.launch_study") as submit:
        app_test.button(key="launch.yaml_load").click().run()
    assert time.perf_counter() - start < 5.0  # a whole page run; the parse itself takes milliseconds
    submit.assert_not_called()
    assert any("must not use YAML anchors or aliases" in e.value for e in app_test.error)
    assert app_test.text_input(key="launch.name").value == "demo"  # the form is untouched


def test_the_upload_cap_is_set_on_the_server():
    cmd = streamlit_command(8501)
    assert cmd[cmd.index("--server.maxUploadSize") + 1] == str(MAX_UPLOAD_MB) == "64"
