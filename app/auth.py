"""Who is using the web app, and what they may do: Streamlit's OpenID Connect sign-in.

A team plugs in its identity provider (Google, Okta, Keycloak, GitHub through an OIDC bridge) with
an ``[auth]`` section in ``.streamlit/secrets.toml`` (``redirect_uri``, ``cookie_secret``,
``client_id``, ``client_secret``, ``server_metadata_url``; Streamlit's ``st.login``, Authlib).
With it configured:

* every page needs a signed-in user (:func:`require_user`; the sign-in page shows nothing else);
* every study records its owner (the MLflow tag ``owner``): the user's verified identity,
  :func:`identity` (an e-mail the provider says is verified, else issuer and subject);
* only the owner or an admin (``CBS_ADMINS``, comma-separated identities) may cancel a study or its
  trials (:func:`check_cancel`), and only an admin may "Launch anyway" past the sanity limits
  (:func:`check_force`).

The user of a lab without sign-in (:data:`LOCAL_USER`) and the command line's users
(``cli:<unix user>``) live in names no signed-in identity can take: an e-mail identity has an ``@``
and no colon, and every other one starts ``oidc:``.

Without it the app runs as before, for one person, and ``cbs web`` refuses to listen on anything
but loopback unless told ``--insecure-no-auth`` (:mod:`app.cli`). The files are those of
:func:`secrets_files`, which ``cbs web`` hands to Streamlit, so both read the same ones.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import tomllib

from cbscore.errors import CbsError, ConfigError

#: Who owns what is launched without sign-in (a loopback lab has one user); no claim reaches it.
LOCAL_USER = "local"

#: An e-mail that may stand for a user: one ``@``, no colon, comma or space (so never ``local``,
#: ``cli:…`` or ``oidc:…``, and one ``CBS_ADMINS`` entry each).
_EMAIL = re.compile(r"[^@\s:,]+@[^@\s:,]+")


#: Fewest characters of ``[auth] cookie_secret``: it signs every session cookie, so whoever guesses
#: it signs in as anyone (``python -c "import secrets; print(secrets.token_hex(32))"`` gives 64).
MIN_SECRET_CHARS = 32
#: Secrets printed in the documentation (docs/SECURITY.md's example): public, so never accepted.
PLACEHOLDER_SECRETS = frozenset({"a long random string"})


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
    """Whether an ``[auth]`` section with ``redirect_uri`` and ``cookie_secret`` is in the files;
    a weak ``cookie_secret`` is a :class:`ConfigError` (:func:`check_cookie_secret`)."""
    section: dict = {}
    for path in files if files is not None else secrets_files():
        if path.is_file():
            with open(path, "rb") as handle:
                section.update(tomllib.load(handle).get("auth") or {})
    configured = bool(section.get("redirect_uri")) and bool(section.get("cookie_secret"))
    if configured:
        check_cookie_secret(section["cookie_secret"])
    return configured


def check_cookie_secret(secret: object) -> None:
    """:class:`ConfigError` on ``[auth] cookie_secret`` unless it is a string of at least
    :data:`MIN_SECRET_CHARS` characters and no documented placeholder (the message never shows it)."""
    field = "[auth] cookie_secret"
    how = 'python -c "import secrets; print(secrets.token_hex(32))"'
    if not isinstance(secret, str):
        raise ConfigError(field, f"a {type(secret).__name__}", f"must be a string (make one with {how})")
    if secret.strip().lower() in PLACEHOLDER_SECRETS:
        raise ConfigError(field, "the example of docs/SECURITY.md", "must be a secret of your own, not the "
                                 f"documentation's placeholder (make one with {how})")
    if len(secret) < MIN_SECRET_CHARS:
        raise ConfigError(field, f"{len(secret)} characters", f"must be at least {MIN_SECRET_CHARS} characters, "
                                 f"since it signs every session (make one with {how})")


def admins() -> set[str]:
    """``CBS_ADMINS``: identities (:func:`identity`: verified e-mails, any case, or
    ``oidc:<issuer>#<subject>``) who may cancel anything and launch past the limits."""
    entries = (a.strip() for a in (os.environ.get("CBS_ADMINS") or "").split(","))
    return {a.lower() if _EMAIL.fullmatch(a) else a for a in entries if a}


def identity(claims: Mapping) -> str:
    """Who the signed-in user with ID-token ``claims`` is: their e-mail, lower case, when the
    provider says it is verified (``email_verified``) and it is an address; else
    ``oidc:<iss>#<sub>``. Never :data:`LOCAL_USER` nor a ``cli:`` name, whatever the claims say."""
    email = claims.get("email")
    if claims.get("email_verified") in (True, "true") and isinstance(email, str) and _EMAIL.fullmatch(email):
        return email.lower()
    subject = claims.get("sub")
    if not subject:
        raise NotAllowed("Your identity provider sent no subject (the `sub` claim), so CBS Lab cannot tell who "
                         "you are; ask the lab's operator.")
    return f"oidc:{claims.get('iss') or ''}#{subject}"


def enabled() -> bool:
    """Whether sign-in is configured for this app (an ``[auth]`` section in its secrets)."""
    import streamlit as st

    return st.secrets.load_if_toml_exists() and "auth" in st.secrets


def current_user() -> str:
    """The signed-in user's :func:`identity`; :data:`LOCAL_USER` without sign-in."""
    import streamlit as st

    if not enabled():
        return LOCAL_USER
    if not st.user.is_logged_in:
        raise NotAllowed("Sign in first.")
    return identity(st.user.to_dict())


def is_admin(user: str) -> bool:
    """Without sign-in the one local user is the admin; with it, the users of ``CBS_ADMINS``."""
    return user in admins() or (user == LOCAL_USER and not enabled())


def is_old_owner(owner: str) -> bool:
    """Whether ``owner`` is an owner tag of the old form ``oidc:<subject>`` (before owners named
    their issuer): a subject alone says nothing of which provider vouched for it, so no
    sign-in is ever matched to it; an admin acts for such a study."""
    return owner.startswith("oidc:") and "#" not in owner


def owns(user: str, owner: str) -> bool:
    """Whether ``user`` is the study's ``owner`` (exactly; an old-form owner is nobody's)."""
    return bool(owner) and user == owner and not is_old_owner(owner)


def _refusal(user: str, owner: str, action: str) -> NotAllowed:
    if is_old_owner(owner):
        return NotAllowed(f"Only an admin (CBS_ADMINS) may {action}: its owner {owner} is of the old form, without "
                          f"the provider that vouched for it, which no sign-in matches (the operator gives it its owner with `cbs "
                          f"study owner`); you are signed in as {user}.")
    return NotAllowed(f"Only the owner of this study ({owner or 'unknown'}) or an admin (CBS_ADMINS) may {action}; "
                      f"you are signed in as {user}.")


def check_cancel(user: str, owner: str, what: str) -> None:
    """:class:`NotAllowed` unless ``user`` owns the study (``owner``, :func:`owns`) or is an admin."""
    if is_admin(user) or owns(user, owner):
        return
    raise _refusal(user, owner, f"cancel {what}")


def check_change(user: str, owner: str, what: str) -> None:
    """:class:`NotAllowed` unless ``user`` owns the study (``owner``, :func:`owns`) or is an admin:
    who may extend a study or run its trials again (``what`` names the action)."""
    if is_admin(user) or owns(user, owner):
        return
    raise _refusal(user, owner, what)


def check_force(user: str) -> None:
    """:class:`NotAllowed` unless ``user`` may launch past the sanity limits ("Launch anyway")."""
    if not is_admin(user):
        raise NotAllowed(f"Only an admin (CBS_ADMINS) may launch past the sanity limits; you are signed in as "
                         f"{user}. Shrink the study, or ask an admin.")


def require_user() -> str:
    """The current user; with sign-in configured and nobody signed in, a sign-in page and
    ``st.stop()`` (nothing else of the app is drawn or read)."""
    import streamlit as st

    if enabled() and (not st.user.is_logged_in or _signed_out()):
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
    st.sidebar.button("Sign out", key="auth.sign_out", icon=":material/logout:", on_click=sign_out)


def _signed_out() -> bool:
    """Whether this browser's sign-in cookie signed out (somewhere): :mod:`app.signed_out`."""
    import streamlit as st

    from app.signed_out import revoked

    return revoked(dict(st.context.cookies))


def sign_out() -> None:
    """End the session server-side (its cookie is refused from now on, wherever it is sent), then
    Streamlit's own sign-out (which deletes the cookie in this browser)."""
    import streamlit as st

    from app.signed_out import revoke

    revoke(dict(st.context.cookies))
    st.logout()
