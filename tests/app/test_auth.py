"""Who may do what (app/auth.py): the owner or an admin cancels, only an admin launches past the
sanity limits, and sign-in is "configured" exactly when the secrets hold an [auth] section."""

from __future__ import annotations

from unittest import mock

import pytest

from app import auth

LAUNCH = "FormSubmitter:launch-Launch study"


def test_the_owner_or_an_admin_may_cancel(monkeypatch):
    monkeypatch.setenv("CBS_ADMINS", "Admin@lab.test, ops@lab.test")
    auth.check_cancel("alice@lab.test", "alice@lab.test", "the study s")
    auth.check_cancel("admin@lab.test", "alice@lab.test", "the study s")
    with pytest.raises(auth.NotAllowed) as err:
        auth.check_cancel("bob@lab.test", "alice@lab.test", "the study s")
    assert str(err.value) == ("Only the owner of this study (alice@lab.test) or an admin (CBS_ADMINS) may cancel "
                              "the study s; you are signed in as bob@lab.test.")


def test_only_an_admin_may_launch_anyway(monkeypatch):
    monkeypatch.setenv("CBS_ADMINS", "admin@lab.test")
    auth.check_force("admin@lab.test")
    auth.check_force(auth.LOCAL_USER)  # no sign-in: the one user on loopback
    with pytest.raises(auth.NotAllowed, match="Only an admin"):
        auth.check_force("alice@lab.test")


def test_auth_is_configured_by_an_auth_section_in_the_secrets(tmp_path, monkeypatch):
    path = tmp_path / "secrets.toml"
    monkeypatch.setenv("CBS_WEB_SECRETS", str(path))
    assert auth.secrets_files() == [path.resolve()] and not auth.auth_configured()
    path.write_text('[other]\nx = 1\n')
    assert not auth.auth_configured()
    path.write_text('[auth]\nredirect_uri = "http://lab/oauth2callback"\ncookie_secret = "s"\n')
    assert auth.auth_configured()


def test_a_signed_in_user_who_is_no_admin_cannot_launch_past_the_limits(app_test, empty_env, monkeypatch):
    monkeypatch.setenv("CBS_ADMINS", "admin@lab.test")
    monkeypatch.setattr(auth, "current_user", lambda: "alice@lab.test")
    app_test.run()
    assert app_test.checkbox(key="launch.force").disabled  # the box is greyed out for her
    app_test.number_input(key="launch.max_trials").set_value(10)
    app_test.session_state["launch.force"] = True  # ticked anyway (a crafted session)
    with mock.patch("workers.query.api.launch_study", return_value="demo") as submit:
        app_test.button(key=LAUNCH).click().run()
    submit.assert_not_called()
    assert any("Only an admin (CBS_ADMINS) may launch past the sanity limits" in e.value for e in app_test.error)
