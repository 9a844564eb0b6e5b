"""Who may do what (app/auth.py): the owner or an admin cancels, only an admin launches past the
sanity limits, and sign-in is "configured" exactly when the secrets hold an [auth] section."""

from __future__ import annotations

from unittest import mock

import pytest

from app import auth
from cbscore.errors import ConfigError

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


ISSUER = "https://idp.lab.test"


def test_a_user_is_their_verified_email_else_the_issuer_and_subject():
    claims = {"iss": ISSUER, "sub": "u-17", "email": "Alice@Lab.test"}
    assert auth.identity({**claims, "email_verified": True}) == "alice@lab.test"
    assert auth.identity({**claims, "email_verified": "true"}) == "alice@lab.test"  # some providers send a string
    assert auth.identity(claims) == "oidc:https://idp.lab.test#u-17"  # not said to be verified
    assert auth.identity({**claims, "email_verified": False}) == "oidc:https://idp.lab.test#u-17"
    with pytest.raises(auth.NotAllowed, match="sent no subject"):
        auth.identity({"iss": ISSUER, "email": "x@lab.test"})


@pytest.mark.parametrize("email", ["local", "LOCAL", "cli:root", "cli:root@lab.test", "oidc:https://idp#1",
                                   "local@", "a@b,local"])
def test_no_claim_makes_a_user_local_or_a_command_line_user_or_an_admin(email, monkeypatch):
    monkeypatch.setenv("CBS_ADMINS", f"local, cli:root, {email}")
    user = auth.identity({"iss": ISSUER, "sub": "mallory", "email": email, "email_verified": True})
    assert user == "oidc:https://idp.lab.test#mallory"
    assert not auth.is_admin(user)
    with pytest.raises(auth.NotAllowed):
        auth.check_cancel(user, auth.LOCAL_USER, "the study s")
    with pytest.raises(auth.NotAllowed):
        auth.check_change(user, "cli:root", "extend the study s")


def test_admins_are_named_by_verified_email_or_by_issuer_and_subject(monkeypatch):
    monkeypatch.setenv("CBS_ADMINS", "Ops@Lab.test, oidc:https://idp.lab.test#Root-1")
    assert auth.admins() == {"ops@lab.test", "oidc:https://idp.lab.test#Root-1"}
    assert auth.is_admin(auth.identity({"iss": ISSUER, "sub": "x", "email": "ops@lab.test", "email_verified": True}))
    assert not auth.is_admin(auth.identity({"iss": ISSUER, "sub": "x", "email": "ops@lab.test"}))  # unverified
    assert auth.is_admin(auth.identity({"iss": ISSUER, "sub": "Root-1"}))
    assert not auth.is_admin(auth.identity({"iss": ISSUER, "sub": "root-1"}))  # a subject is case-sensitive
    assert not auth.is_admin(auth.identity({"iss": "https://other.test", "sub": "Root-1"}))  # another issuer


def test_auth_is_configured_by_an_auth_section_in_the_secrets(tmp_path, monkeypatch):
    path = tmp_path / "secrets.toml"
    monkeypatch.setenv("CBS_WEB_SECRETS", str(path))
    assert auth.secrets_files() == [path.resolve()] and not auth.auth_configured()
    path.write_text('[other]\nx = 1\n')
    assert not auth.auth_configured()
    path.write_text(f'[auth]\nredirect_uri = "http://lab/oauth2callback"\ncookie_secret = "{"s" * 32}"\n')
    assert auth.auth_configured()


@pytest.mark.parametrize("secret, got", [("s3cret", "'6 characters'"), ("x" * 31, "'31 characters'"),
                                         ("a long random string", "'the example of docs/SECURITY.md'")])
def test_a_short_or_documented_cookie_secret_is_refused_naming_the_setting(secret, got, tmp_path, monkeypatch):
    path = tmp_path / "secrets.toml"
    path.write_text(f'[auth]\nredirect_uri = "http://lab/oauth2callback"\ncookie_secret = "{secret}"\n')
    monkeypatch.setenv("CBS_WEB_SECRETS", str(path))
    with pytest.raises(ConfigError) as err:
        auth.auth_configured()
    assert err.value.field == "[auth] cookie_secret" and str(err.value).endswith(f"but got {got}.")
    assert secret not in str(err.value) or secret == "a long random string" and "docs/SECURITY.md" in str(err.value)


def test_cbs_web_does_not_start_with_the_documented_cookie_secret(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    secrets_file = tmp_path / "secrets.toml"
    secrets_file.write_text('[auth]\nredirect_uri = "http://127.0.0.1:9/oauth2callback"\n'
                            'cookie_secret = "a long random string"\nclient_id = "cbs-lab"\n')
    env = {**os.environ, "CBS_HOME": str(tmp_path / "home"), "CBS_WEB_SECRETS": str(secrets_file)}
    out = subprocess.run([str(Path(sys.executable).parent / "cbs"), "web", "--port", "9"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "[auth] cookie_secret: must be a secret of your own, not the documentation's placeholder" in out.stderr


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


@pytest.mark.parametrize("claims", [{"sub": "alice", "iss": ISSUER}, {"sub": "alice", "iss": ""},
                                    {"sub": "alice", "email": "alice", "email_verified": True}])
def test_a_study_owned_under_the_old_form_oidc_subject_is_matched_by_no_sign_in_only_an_admin_acts(claims,
                                                                                                   monkeypatch):
    """Before owners named their issuer, a user without an e-mail owned studies as ``oidc:<sub>``;
    a subject alone does not say which provider vouched for it, so no sign-in takes such a study
    over (any provider can send ``sub: alice``); an admin acts for it."""
    monkeypatch.setenv("CBS_ADMINS", "admin@lab.test")
    old = "oidc:alice"
    user = auth.identity(claims)
    assert auth.is_old_owner(old) and not auth.is_old_owner(user) and not auth.owns(user, old)
    with pytest.raises(auth.NotAllowed) as err:
        auth.check_cancel(user, old, "the study s")
    assert str(err.value) == (f"Only an admin (CBS_ADMINS) may cancel the study s: its owner oidc:alice is of the old "
                              f"form, without the provider that vouched for it, which no sign-in matches (the "
                              f"operator gives it its owner with `cbs study owner`); you are signed in as {user}.")
    with pytest.raises(auth.NotAllowed, match="Only an admin .* may extend s: its owner oidc:alice is of the old form"):
        auth.check_change(user, old, "extend s")
    assert not auth.owns(old, old)  # not even an identity spelled as the old tag
    auth.check_cancel("admin@lab.test", old, "the study s")
    auth.check_change("admin@lab.test", old, "extend s")
