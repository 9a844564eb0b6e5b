"""Issue 41: what a signed-in user types on a page is never a path to a server file, and an error
never shows more of a value than a line of it (through AppTest, on a real MLflow store)."""

from __future__ import annotations

from cbscore.errors import shown
from tests.app.conftest import STUDY
from tests.workers.conftest import mlflow_template, mlflow_uri, token_store, worker_env  # noqa: F401

SECRET = "gho_" + "s3cr3t" * 6


def _texts(at) -> list[str]:
    return [e.value for kind in (at.error, at.warning, at.info, at.success, at.markdown, at.code) for e in kind]


def _extend(at, patch: str) -> list[str]:
    at.text_area(key=f"studies.extend.{STUDY}").set_value(patch).run()
    at.button(key="studies.extend_go").click().run()
    assert not at.exception, at.exception
    return [e.value for e in at.error]


def test_extend_reads_a_typed_path_as_text_and_never_shows_the_file_or_whether_it_exists(app_test, app_env,
                                                                                       tmp_path):
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(f"github.com:\n  oauth_token: {SECRET}\n  user: someone\n")
    at = app_test.run()
    at.switch_page("app_pages/studies.py")
    at.run()
    there = _extend(at, str(hosts))
    assert there == [f"**patch** (`patch`): must be a mapping of the study fields to change (for example "
                     f"batch_sizes: [...] or seeds: [...]), but got `{shown(str(hosts))}`."], there
    assert not any(SECRET in text or "oauth_token" in text for text in _texts(at))
    # a path that names no file gets the same answer: the page is no oracle of what exists
    missing = _extend(at, str(tmp_path / "nowhere.yml"))
    assert missing == [there[0].replace(shown(str(hosts)), shown(str(tmp_path / "nowhere.yml")))]


def test_an_error_on_a_page_shows_at_most_80_characters_of_the_value(app_test, app_env):
    at = app_test.run()
    at.switch_page("app_pages/studies.py")
    at.run()
    long_value = "x" * 5000
    (error,) = _extend(at, f"b_ref: {long_value}\n")
    assert error.startswith("**Reference batch size B_ref** (`b_ref`): ")
    assert error.endswith(f"but got `'{'x' * 79}… (5,002 characters)`."), error[-120:]
    assert long_value not in error and len(error) < 400


def test_a_signed_in_claim_of_local_is_neither_the_local_user_nor_an_admin(app_test, app_env, monkeypatch):
    from app import auth

    monkeypatch.setattr(auth, "enabled", lambda: True)  # sign-in configured (the secrets AppTest cannot reach)
    monkeypatch.setenv("CBS_ADMINS", "admin@lab.test")
    app_test.user = {"is_logged_in": True, "iss": "http://idp.test", "sub": "mallory", "email": "local",
                     "email_verified": True}
    at = app_test.run()
    at.switch_page("app_pages/studies.py")
    at.run()
    assert "Signed in as **oidc:http://idp.test#mallory**" in [c.value for c in at.sidebar.caption]
    errors = _extend(at, "b_ref: 2\n")  # refused before the patch is read: she owns nothing here
    assert len(errors) == 1 and errors[0].startswith("Only the owner of this study (")
    assert errors[0].endswith("or an admin (CBS_ADMINS) may extend the study seeded; you are signed in as "
                              "oidc:http://idp.test#mallory."), errors


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound and closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tracking_store_outage_shows_its_url_with_the_password_masked(app_test, empty_env, monkeypatch):
    port = _closed_port()
    monkeypatch.setenv("CBS_TRACKING_URI", f"postgresql://cbs:hunter2-db@127.0.0.1:{port}/cbs_mlflow")
    at = app_test.run()
    at.switch_page("app_pages/studies.py")
    at.run()
    assert not at.exception, at.exception
    shown = [w.value for w in at.warning]
    assert (f"The tracking store is unreachable at `postgresql+psycopg2://cbs:***@127.0.0.1:{port}/cbs_mlflow` — start it "
            "with `cbs tracking` (or everything with `cbs up`), then reload.") in shown, shown
    assert not any("hunter2-db" in text for text in _texts(at))


def test_a_broker_outage_at_launch_shows_the_broker_url_with_the_password_masked(app_test, worker_env, monkeypatch):
    from workers.infra.broker import reconfigure

    port = _closed_port()
    monkeypatch.setenv("CBS_BROKER_URL", f"redis://:hunter2-redis@127.0.0.1:{port}/0")
    reconfigure()
    try:
        at = app_test.run()
        at.text_input(key="launch.name").set_value("outage").run()
        at.button(key="FormSubmitter:launch-Launch study").click().run()
    finally:
        monkeypatch.delenv("CBS_BROKER_URL")
        reconfigure()
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith(f"the broker 'redis://:***@127.0.0.1:{port}/0' does not answer ("), \
        errors
    assert errors[0].endswith("); nothing was launched")
    assert not any("hunter2-redis" in text for text in _texts(at))


def _signed_in(app_test, monkeypatch, email: str):
    from app import auth

    monkeypatch.setattr(auth, "enabled", lambda: True)  # sign-in configured (the secrets AppTest cannot reach)
    monkeypatch.setenv("CBS_ADMINS", "admin@lab.test")
    app_test.user = {"is_logged_in": True, "iss": "http://idp.test", "sub": email, "email": email,
                     "email_verified": True}
    return app_test.run()


def test_a_user_who_is_no_admin_cannot_preview_or_launch_past_the_labs_ceiling(app_test, worker_env, monkeypatch):
    from workers.query import api

    monkeypatch.setenv("CBS_MAX_TRIALS", "10")  # the demo plans 45 trials; its own max_trials is 2000
    at = _signed_in(app_test, monkeypatch, "alice@lab.test")
    at.button(key="FormSubmitter:launch-Launch study").click().run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == [
        "**trials** (`trials`): the study plans more than the lab's ceiling of 10 trials (CBS_MAX_TRIALS; the spec's "
        "max_trials does not raise it); only an admin may launch past it, but got `'45 trials'`."]
    assert not [h for h in at.subheader if h.value.startswith("Plan of")]  # nothing of the plan was built
    assert api.list_studies() == []


def test_an_admin_sees_the_ceiling_as_a_warning_and_launches_past_it_only_with_launch_anyway(app_test, worker_env,
                                                                                          token_store, monkeypatch):
    from workers.query import api

    monkeypatch.setenv("CBS_MAX_TRIALS", "10")
    at = _signed_in(app_test, monkeypatch, "admin@lab.test")
    at.button(key="FormSubmitter:launch-Preview").click().run()
    assert not at.exception, at.exception
    assert any(w.value.startswith("Past the lab's ceilings: trials: the study plans more than the lab's ceiling of 10 "
                                  "trials") for w in at.warning), [w.value for w in at.warning]
    assert [h.value for h in at.subheader if h.value.startswith("Plan of")] == ["Plan of `demo`"]
    at.button(key="FormSubmitter:launch-Launch study").click().run()  # not ticked: the runner's check refuses
    assert any(e.value.startswith("**trials** (`trials`): the study plans more than the lab's ceiling")
               for e in at.error), [e.value for e in at.error]
    assert api.list_studies() == []
    at.checkbox(key="launch.force").check()  # ticked and submitted together, as a form does
    at.button(key="FormSubmitter:launch-Launch study").click().run()
    assert not at.error, [e.value for e in at.error]
    assert [s.name for s in api.list_studies()] == ["demo"]


# ---- finding 5: "Simulate this design" is bounded in trials and time, and ends with the session
SIMULATE = "FormSubmitter:launch.simulate-Simulate"


def _simulate_demo(at, seeds: int):
    at.button(key="FormSubmitter:launch-Preview").click().run()
    at.radio(key="launch.sim.truth").set_value("b_noise")
    at.number_input(key="launch.sim.b_noise").set_value(8.0)
    at.number_input(key="launch.sim.seeds").set_value(seeds)
    at.button(key=SIMULATE).click().run()
    assert not at.exception, at.exception
    return at


def test_a_user_who_is_no_admin_cannot_simulate_past_the_web_apps_bound(app_test, empty_env, monkeypatch):
    monkeypatch.setenv("CBS_WEB_SIM_TRIALS", "100")  # the demo plans 45 trials: 3 studies are 135
    at = _simulate_demo(_signed_in(app_test, monkeypatch, "alice@lab.test"), 3)
    assert [e.value for e in at.error] == [
        "**simulated studies** (`simulated studies`): 3 studies of this design simulate 135 trials, more than the "
        "web app runs for one click (100, CBS_WEB_SIM_TRIALS); simulate fewer studies, or run `cbs study simulate` "
        "on the host, but got `3`."]
    assert not [d for d in at.dataframe if "B* study" in d.value.columns]  # nothing was simulated
    _simulate_demo(at, 2)  # 90 trials: within the bound
    assert not at.error and [d for d in at.dataframe if "B* study" in d.value.columns]


def test_a_simulation_stops_at_its_time_limit_and_says_how_far_it_got(app_test, empty_env, monkeypatch):
    monkeypatch.setenv("CBS_WEB_SIM_SECONDS", "0")  # every study past the first is over time
    at = _simulate_demo(app_test.run(), 3)
    assert [w.value for w in at.warning if w.value.startswith("Stopped")] == [
        "Stopped after 1 of 3 simulated studies: the web app simulates for at most 0 s (CBS_WEB_SIM_SECONDS); "
        "`cbs study simulate` on the host has no such limit."]
    assert any(m.value.startswith("**1 simulated studies** against B_noise = 8") for m in at.markdown)


def test_a_simulation_run_study_by_study_gives_the_librarys_numbers_and_stops_when_the_session_ends():
    from app import spec_form
    from cbscore.study import load_preset
    from cbscore.study.simulate import SimConfig, simulate

    demo = load_preset("demo")
    truth, config = spec_form.uniform_truth(demo, 8.0), SimConfig(noise_sigma=0.1)
    report, done = spec_form.simulate_within(demo, truth, config, 3, seconds=60)
    assert done == 3 and report.to_json_dict() == simulate(demo, truth, config, seeds=3).to_json_dict()
    asked = []
    report, done = spec_form.simulate_within(demo, truth, config, 3, seconds=60,
                                             alive=lambda: asked.append(1) or False)  # the tab was closed
    assert done == 1 and len(report.seeds) == 1 and asked == [1]
