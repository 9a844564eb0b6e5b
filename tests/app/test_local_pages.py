"""Issue 24 in the browser, through AppTest: the Launch page offers kind ``local`` with its fields
and names a bad one; the Local CBS page draws a local study that really ran (a tiny one, trained in
this process on a real MLflow store by the workers' own code, ``tests/workers/test_local_study.py``);
and (slow) a local study launched from the page on its embedded defaults runs to completion on a
real worker process."""

from __future__ import annotations

import dataclasses
import json
from unittest import mock

import pytest

from cbscore.study import StudySpec, estimate, load_preset
from tests.workers.conftest import DATA, mlflow_template, mlflow_uri, processes, token_store, wait_for, worker_env  # noqa: F401

PREVIEW = "FormSubmitter:launch-Preview"
LAUNCH = "FormSubmitter:launch-Launch study"


def _local_form(at):
    at.run()
    at.segmented_control(key="launch.kind").set_value("local").run()
    assert not at.exception, at.exception
    return at


def test_choosing_kind_local_loads_its_embedded_defaults_and_previews_every_branch(app_test, empty_env):
    at = _local_form(app_test)
    demo = load_preset("local-demo")
    assert at.text_input(key="launch.name").value == "local-demo"
    assert at.text_input(key="launch.local.multipliers").value == "1, 1.5, 2, 3, 4, 6, 8"
    assert at.number_input(key="launch.local.base_batch_size").value == demo.local.base_batch_size
    at.button(key=PREVIEW).click().run()
    assert not at.error, [e.value for e in at.error]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Trials"] == str(estimate(demo).trials) == "30" and metrics["Checkpoints"] == "4"
    table = at.dataframe[0].value
    assert list(table["trial"])[:2] == ["local-demo.base.s0", "local-demo.t12288.k0.5.s0"]


def test_a_multiplier_that_is_not_a_whole_batch_is_named_with_its_value(app_test, empty_env):
    at = _local_form(app_test)
    at.text_input(key="launch.local.multipliers").set_value("1, 1.3, 2")
    at.button(key=PREVIEW).click().run()
    assert [e.value for e in at.error] == ["**Multipliers k** (`local.multipliers`): must make k·B0 a whole batch "
                                           "(B0 = 4), but got `1.3`."]
    assert not at.metric


def test_launch_hands_the_local_spec_to_the_workers(app_test, empty_env):
    at = _local_form(app_test)
    at.text_input(key="launch.name").set_value("my-local")
    at.number_input(key="launch.local.epsilon").set_value(0.02)
    with mock.patch("workers.query.api.launch_study", return_value="my-local") as submit:
        at.button(key=LAUNCH).click().run()
    (spec,), _ = submit.call_args
    assert isinstance(spec, StudySpec) and spec.kind == "local"
    demo = load_preset("local-demo")
    assert spec == demo.replace(name="my-local", local=dataclasses.replace(demo.local, epsilon=0.02))


def test_the_local_cbs_page_draws_a_study_that_ran(app_test, worker_env, token_store):  # noqa: F811
    from tests.workers.test_extend_retry import drain
    from tests.workers.test_local_study import local_spec
    from workers.query import api

    api.launch_study(local_spec("pagecbs"))
    drain("pagecbs")
    fit = api.study_local_fit("pagecbs")
    app_test.run()
    app_test.switch_page("app_pages/local_cbs.py").run()
    assert not app_test.exception, app_test.exception
    assert not app_test.error, [e.value for e in app_test.error]
    assert [t.value for t in app_test.title] == ["Local CBS"]
    figure = json.loads(app_test.get("plotly_chart")[0].proto.spec)
    assert figure["layout"]["yaxis"]["title"]["text"] == "local CBS k*·B0 (sequences)"
    assert figure["layout"]["xaxis"]["type"] == "log"
    drawn = {t["name"]: t for t in figure["data"]}
    merrill = drawn["Merrill (smoothed training loss, one ε)"]
    assert merrill["x"] == [1024.0, 2048.0] and merrill["y"] == [c.merrill.local_cbs for c in fit.checkpoints]
    rows = app_test.dataframe[0].value
    assert list(rows["t (tokens)"]) == [1024, 2048]
    assert list(rows["Merrill B*"]) == [c.merrill.local_cbs for c in fit.checkpoints]
    assert any("ε decides" in e.label for e in app_test.expander)
    # the Studies page lists its base run and branches like any trials
    app_test.switch_page("app_pages/studies.py").run()
    assert not app_test.exception, app_test.exception
    assert not app_test.error, [e.value for e in app_test.error]


@pytest.mark.slow
def test_a_local_study_launched_from_the_page_runs_to_completion_on_a_real_worker(app_test, worker_env, processes,  # noqa: F811
                                                                                token_store, capsys):
    """The embedded defaults (kind Local CBS on the Launch page loads ``local-demo``: 30 trials), on
    this session's small token store instead of the full built-in corpus; one real worker runs the
    base run and every branch, and the fit has a local CBS by both rules at every checkpoint."""
    from cbs import main as cbs_main
    from workers.query import api

    worker = processes.worker()
    at = _local_form(app_test)
    at.text_area(key="launch.yaml_text").set_value(load_preset("local-demo").replace(data=dict(DATA)).to_yaml())
    at.button(key="launch.yaml_load").click().run()
    at.button(key=LAUNCH).click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert [t.value for t in at.title] == ["Studies"]
    wait_for(lambda: api.study_status("local-demo").status == "done", 900, every_s=3,
             what=lambda: "local-demo to finish\n" + processes.log(worker)[-3000:])
    status = api.study_status("local-demo")
    assert status.counts == {"finished": 30}
    capsys.readouterr()
    assert cbs_main(["study", "fit", "local-demo", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert [c["tokens"] for c in fit["checkpoints"]] == [12288, 24832, 49920, 99840]
    for c in fit["checkpoints"]:
        assert c["merrill"]["local_cbs"] > 0 and c["noise_aware"]["local_cbs"] > 0
    assert fit["curve"]["merrill"] is not None and fit["warmup"]["merrill"]["constant_steps"] == 200_000 // 256
