"""Who is using the web app, and what they may do: Streamlit's OpenID Connect sign-in.

A team plugs in its identity provider (Google, Okta, Keycloak, GitHub through an OIDC bridge) with
an ``[auth]`` section in ``.streamlit/secrets.toml`` (``redirect_uri``, ``cookie_secret``,
``client_id``, ``client_secret``, ``server_metadata_url``; Streamlit's ``st.login``, Authlib).
With it configured:

* every page needs a signed-in user (:func:`require_user`; the sign-in page shows nothing else);
* every study records its owner (the MLflow tag ``owner``: the user's e-mail, else their subject);
* only the owner or an admin (``CBS_ADMINS``, comma-separated e-mails) may cancel a study or its
  trials (:func:`check_cancel`), and only an admin may "Launch anyway" past the sanity limits
  (:func:`check_force`).

Without it the app runs as before, for one person, and ``cbs web`` refuses to listen on anything
but loopback unless told ``--insecure-no-auth`` (:mod:`app.cli`). The files are those of
:func:`secrets_files`, which ``cbs web`` hands to Streamlit, so both read the same ones.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from cbscore.errors import CbsError

#: Who owns what is launched without sign-in (a loopback lab has one user).
LOCAL_USER = "local"


class NotAllowed(CbsError):
    """The signed-in user may not do this; the message says who may."""


def secrets_files() -> list[Path]:
    """``CBS_WEB_SECRETS`` (one file) when set, else Streamlit's own places:
    ``~/.streamlit/secrets.toml`` and ``.streamlit/secrets.toml`` in the working folder."""
    chosen = os.environ.get("CBS_WEB_SECRETS")
    if chosen:
        return [Path(chosen).expanduser().resolve()]
    return [Path("~/.streamlit/secrets.toml").expanduser(), Path.cwd() / ".streamlit" / "secrets.toml"]


def auth_configured(files: list[Path] | None = None) -> bool:
    """Whether an ``[auth]`` section with ``redirect_uri`` and ``cookie_secret`` is in the files."""
    section: dict = {}
    for path in files if files is not None else secrets_files():
        if path.is_file():
            with open(path, "rb") as handle:
                section.update(tomllib.load(handle).get("auth") or {})
    return bool(section.get("redirect_uri")) and bool(section.get("cookie_secret"))


def admins() -> set[str]:
    """``CBS_ADMINS``: users (e-mails or subjects) who may cancel anything and launch past the limits."""
    return {a.strip().lower() for a in (os.environ.get("CBS_ADMINS") or "").split(",") if a.strip()}


def enabled() -> bool:
    """Whether sign-in is configured for this app (an ``[auth]`` section in its secrets)."""
    import streamlit as st

    return st.secrets.load_if_toml_exists() and "auth" in st.secrets


def current_user() -> str:
    """The signed-in user's e-mail, lower case (else ``oidc:<subject>``); :data:`LOCAL_USER`
    without sign-in."""
    import streamlit as st

    if not enabled():
        return LOCAL_USER
    if not st.user.is_logged_in:
        raise NotAllowed("Sign in first.")
    email = st.user.get("email")
    # A subject without an e-mail is prefixed, so that no identity can be the local user's name.
    return str(email).lower() if email else f"oidc:{st.user.get('sub')}"


def is_admin(user: str) -> bool:
    """Without sign-in the one local user is the admin; with it, the users of ``CBS_ADMINS``."""
    return user == LOCAL_USER or user.lower() in admins()


def check_cancel(user: str, owner: str, what: str) -> None:
    """:class:`NotAllowed` unless ``user`` owns the study (``owner``) or is an admin."""
    if is_admin(user) or (owner and user.lower() == owner.lower()):
        return
    raise NotAllowed(f"Only the owner of this study ({owner or 'unknown'}) or an admin (CBS_ADMINS) may cancel "
                     f"{what}; you are signed in as {user}.")


def check_change(user: str, owner: str, what: str) -> None:
    """:class:`NotAllowed` unless ``user`` owns the study (``owner``) or is an admin: who may
    extend a study or run its trials again (``what`` names the action)."""
    if is_admin(user) or (owner and user.lower() == owner.lower()):
        return
    raise NotAllowed(f"Only the owner of this study ({owner or 'unknown'}) or an admin (CBS_ADMINS) may {what}; "
                     f"you are signed in as {user}.")


def check_force(user: str) -> None:
    """:class:`NotAllowed` unless ``user`` may launch past the sanity limits ("Launch anyway")."""
    if not is_admin(user):
        raise NotAllowed(f"Only an admin (CBS_ADMINS) may launch past the sanity limits; you are signed in as "
                         f"{user}. Shrink the study, or ask an admin.")


def require_user() -> str:
    """The current user; with sign-in configured and nobody signed in, a sign-in page and
    ``st.stop()`` (nothing else of the app is drawn or read)."""
    import streamlit as st

    if enabled() and not st.user.is_logged_in:
        st.title("CBS Lab")
        st.write("Sign in to see and launch studies.")
        st.button("Sign in", key="auth.sign_in", type="primary", icon=":material/login:", on_click=st.login)
        st.stop()
    return current_user()


def sidebar(user: str) -> None:
    """Who is signed in, and a way out (nothing without sign-in)."""
    import streamlit as st

    if user == LOCAL_USER:
        return
    st.sidebar.caption(f"Signed in as **{user}**" + (" (admin)" if is_admin(user) else ""))
    st.sidebar.button("Sign out", key="auth.sign_out", icon=":material/logout:", on_click=st.logout)
