"""The Studies page's "Delete study…" (workers.studies.delete) through AppTest, on a real MLflow store and
ledger of this test's own: the button waits for the study's name, deletes the study as a whole,
refuses one with trials queued, and tells anyone but the owner or an admin who may."""

from __future__ import annotations

from unittest import mock

import streamlit as st

from tests.workers.conftest import mlflow_template, mlflow_uri, tiny_spec, token_store, worker_env  # noqa: F401
from workers.query import api


def _studies_page(app_test, name: str):
    st.cache_data.clear()
    app_test.run()
    app_test.switch_page("app_pages/studies.py").run()
    app_test.selectbox(key="studies.study").set_value(name).run()
    assert not app_test.exception, app_test.exception
    return app_test


def test_the_delete_button_waits_for_the_name_then_deletes_the_study(app_test, worker_env, token_store):  # noqa: F811
    api.launch_study(tiny_spec("kept"))
    api.launch_study(tiny_spec("doomed"))
    api.cancel_study("doomed")  # nothing queued or running any more
    at = _studies_page(app_test, "doomed")
    at.text_input(key="studies.delete_confirm").set_value("doome").run()
    assert at.button(key="studies.delete_go").disabled
    at.text_input(key="studies.delete_confirm").set_value("doomed").run()
    assert not at.button(key="studies.delete_go").disabled
    at.button(key="studies.delete_go").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert [s.value for s in at.success] == ["Deleted doomed: 2 MLflow run(s) soft-deleted, 1 ledger entries, "
                                             "0 checkpoint folder(s)."]
    assert [s.name for s in api.list_studies()] == ["kept"]
    assert at.selectbox(key="studies.study").options == ["kept"] and at.selectbox(key="studies.study").value == "kept"


def test_a_study_with_a_trial_queued_is_not_deleted_from_the_page(app_test, worker_env, token_store):  # noqa: F811
    api.launch_study(tiny_spec("waiting"))  # its reference trial is queued
    at = _studies_page(app_test, "waiting")
    assert any("1 trial(s) are queued or running: cancel the study first" in w.value for w in at.warning)
    at.text_input(key="studies.delete_confirm").set_value("waiting").run()
    at.button(key="studies.delete_go").click().run()
    assert not at.exception, at.exception
    assert ("waiting has 1 trial(s) queued or running, so it was not deleted: cancel it first (Cancel…) and delete "
            "it once they have stopped.") in [e.value for e in at.error]
    assert [s.name for s in api.list_studies()] == ["waiting"]


def test_only_the_owner_or_an_admin_may_delete_a_study(app_test, worker_env, token_store):  # noqa: F811
    api.launch_study(tiny_spec("theirs"), owner="alice@example.com")
    api.cancel_study("theirs")
    with mock.patch("app.auth.current_user", return_value="bob@example.com"):
        at = _studies_page(app_test, "theirs")
        at.text_input(key="studies.delete_confirm").set_value("theirs").run()
        at.button(key="studies.delete_go").click().run()
    assert ("Only the owner of this study (alice@example.com) or an admin (CBS_ADMINS) may delete the study theirs; "
            "you are signed in as bob@example.com.") in [e.value for e in at.error]
    assert [s.name for s in api.list_studies()] == ["theirs"]
