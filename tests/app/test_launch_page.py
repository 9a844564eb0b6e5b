"""The Launch page through AppTest: validation messages, the preview, and launching.

The launch itself is patched at the workers boundary (``workers.api.launch_study``): what the
page hands over is checked, nothing is enqueued.
"""

from __future__ import annotations

from unittest import mock

import pytest

from cbscore.study import StudySpec, load_preset

PREVIEW = "FormSubmitter:launch-Preview"
LAUNCH = "FormSubmitter:launch-Launch study"


@pytest.fixture
def launch(app_test, empty_env):
    app_test.run()
    assert not app_test.exception
    return app_test


def _errors(at) -> list[str]:
    return [e.value for e in at.error]


def test_form_starts_from_the_demo_preset(launch):
    assert launch.text_input(key="launch.name").value == "demo"
    assert launch.text_input(key="launch.batch_sizes").value == "4, 8, 16, 32, 64, 128"
    assert launch.text_area(key="launch.settings").value == "tiny-0.1M, 160k\ntiny-0.1M, 320k\ntiny-0.8M, 160k"


def test_negative_batch_size_is_named_with_its_value(launch):
    launch.text_input(key="launch.batch_sizes").set_value("8, -16, 32")
    launch.button(key=PREVIEW).click().run()
    assert _errors(launch) == ["**Batch sizes** (`batch_sizes`): must be a positive integer, but got `-16`."]
    assert not launch.metric  # no preview of a spec that is not valid


def test_unknown_model_and_bad_token_count_are_named(launch):
    launch.text_area(key="launch.settings").set_value("tiny-0.1M, 1M\nhuge-9B, 2M")
    launch.button(key=PREVIEW).click().run()
    (error,) = _errors(launch)
    assert "`settings[1].model`" in error and "'huge-9B'" in error
    launch.text_area(key="launch.settings").set_value("tiny-0.1M, lots")
    launch.button(key=PREVIEW).click().run()
    assert _errors(launch) == ["**Settings (model, tokens)** (`settings[0].tokens`): must be a count like "
                               "2000000, 2M or 1.741B, but got `'lots'`."]


def test_b_ref_outside_the_batch_sizes_is_refused(launch):
    launch.number_input(key="launch.b_ref").set_value(48)
    launch.button(key=PREVIEW).click().run()
    (error,) = _errors(launch)
    assert error.startswith("**Reference batch size B_ref** (`b_ref`): must be one of batch_sizes") and "48" in error


def test_preview_counts_cells_trials_and_compute(launch):
    launch.button(key=PREVIEW).click().run()
    assert not _errors(launch)
    metrics = {m.label: m.value for m in launch.metric}
    # demo: 3 settings × 6 batch sizes = 18 cells, 2 learning rates each.
    assert metrics["Settings"] == "3" and metrics["Cells"] == "18" and metrics["Trials"] == "36"
    cells = launch.dataframe[0].value
    assert len(cells) == 18
    reference = cells[cells["role"] == "reference: sets the target"]
    assert list(reference["B (sequences)"]) == [16, 16, 16]
    # A reference trial spends D tokens, the others budget_multiple·D = 2·D.
    assert list(reference["budget per trial (tokens)"]) == [160_000, 320_000, 160_000]


def test_yaml_paste_fills_the_form_and_bad_yaml_is_named(launch):
    spec = load_preset("demo").replace(name="pasted", batch_sizes=(16, 32, 64))
    launch.text_area(key="launch.yaml_text").set_value(spec.to_yaml())
    launch.button(key="launch.yaml_load").click().run()
    assert launch.text_input(key="launch.name").value == "pasted"
    assert launch.text_input(key="launch.batch_sizes").value == "16, 32, 64"
    launch.text_area(key="launch.yaml_text").set_value("name: x\nkind: custom\nbatch_size: [1]\n")
    launch.button(key="launch.yaml_load").click().run()
    (error,) = _errors(launch)
    assert error.startswith("**batch_size** (`batch_size`): is not a study field")


def test_launch_hands_the_spec_to_the_workers_and_opens_the_study(launch):
    launch.text_input(key="launch.name").set_value("my-study")
    with mock.patch("workers.api.launch_study", return_value="my-study") as submit:
        launch.button(key=LAUNCH).click().run()
    submit.assert_called_once()
    (spec,), kwargs = submit.call_args
    assert isinstance(spec, StudySpec) and kwargs == {"force": False}
    assert spec == load_preset("demo").replace(name="my-study")
    assert launch.session_state["studies.selected"] == "my-study"
    assert [t.value for t in launch.title] == ["Studies"]  # switched to the study's live page


def test_study_past_the_sanity_limit_is_not_launched_without_force(launch):
    launch.number_input(key="launch.max_trials").set_value(10)
    with mock.patch("workers.api.launch_study", return_value="demo") as submit:
        launch.button(key=LAUNCH).click().run()
    submit.assert_not_called()
    assert any(e.startswith("Not launched: 36 trials exceed max_trials=10") for e in _errors(launch))


def test_form_keeps_its_values_when_another_page_was_open(launch):
    launch.text_input(key="launch.name").set_value("kept")
    launch.button(key=PREVIEW).click().run()
    launch.switch_page("app_pages/import_table.py").run()
    launch.switch_page("app_pages/launch.py").run()
    assert not launch.exception
    assert launch.text_input(key="launch.name").value == "kept"
    assert launch.text_input(key="launch.batch_sizes").value == "4, 8, 16, 32, 64, 128"
