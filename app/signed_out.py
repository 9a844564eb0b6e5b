"""Sessions that signed out, so that their cookie no longer signs anyone in.

Streamlit's sign-in cookie (``_streamlit_user``, split in chunks ``_streamlit_user__1``... when
large) is signed, not stored: "Sign out" deletes it in that browser, and a copy of it (another
browser, a stolen cookie) stayed valid for its whole 30 days. :func:`revoke` records a hash of the
cookie's signed value in ``$CBS_HOME/auth/signed-out.json`` until the cookie would expire anyway,
and :func:`revoked` is what the pages (:func:`app.auth.require_user`), the MLflow proxy and the
side-door guard (:func:`app.mlflow_proxy.signed_in_user`) ask before they trust one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

#: How long Streamlit's sign-in cookie stays valid (its max age): a revocation is kept that long.
COOKIE_MAX_AGE_S = 30 * 24 * 3600
_USER_COOKIE = re.compile(r"_streamlit_user(__\d+)?")


def _store() -> Path:
    from cbscore.paths import cbs_home

    return cbs_home() / "auth" / "signed-out.json"


def cookie_key(cookies: Mapping[str, str]) -> str | None:
    """A hash of the sign-in cookie's signed value (all its chunks), or ``None`` without one."""
    parts = sorted((name, value) for name, value in cookies.items() if _USER_COOKIE.fullmatch(name))
    if not parts:
        return None
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _read(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def revoke(cookies: Mapping[str, str], *, now: float | None = None) -> bool:
    """Record the sign-in cookie in ``cookies`` as signed out (until it would expire); ``False``
    when there is none."""
    key = cookie_key(cookies)
    if key is None:
        return False
    now = time.time() if now is None else now
    path = _store()
    path.parent.mkdir(mode=0o700, exist_ok=True)
    held = {k: t for k, t in _read(path).items() if t > now}  # expired cookies sign no one in anyway
    held[key] = now + COOKIE_MAX_AGE_S
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(held))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return True


def revoked(cookies: Mapping[str, str]) -> bool:
    """Whether the sign-in cookie in ``cookies`` signed out."""
    key = cookie_key(cookies)
    return key is not None and _read(_store()).get(key, 0.0) > time.time()
