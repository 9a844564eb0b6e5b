"""Issue 41, finding 8: a session that signed out stays refused until its cookie would have expired
(app/signed_out.py); the live check is tests/app/test_live_sign_in.py."""

from __future__ import annotations

import time

from app import signed_out


def test_a_signed_out_cookie_is_refused_for_its_max_age_and_no_other_is(tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    alice = {"_streamlit_user": "2|alice-signed", "_streamlit_user__1": "chunk", "_streamlit_xsrf": "x"}
    assert not signed_out.revoked(alice) and not (tmp_path / "home" / "auth").exists()  # a read writes nothing
    assert signed_out.revoke(alice)
    assert signed_out.revoked(alice)
    assert signed_out.revoked({**alice, "_streamlit_xsrf": "another tab"})  # the same session cookie
    assert not signed_out.revoked({**alice, "_streamlit_user__1": "other"})  # another session
    assert not signed_out.revoked({"_streamlit_user": "2|bob-signed"})
    assert not signed_out.revoke({"_streamlit_xsrf": "x"}) and not signed_out.revoked({})  # no sign-in cookie
    # a revocation is kept as long as the cookie could be valid (30 days), then dropped
    monkeypatch.setattr(time, "time", lambda: 1e9)
    assert signed_out.revoke({"_streamlit_user": "old"}, now=1e9 - signed_out.COOKIE_MAX_AGE_S - 1)
    assert not signed_out.revoked({"_streamlit_user": "old"})
