"""What of a credential may be shown: URLs with their password masked.

A broker or database URL carries its password (``redis://:PASSWORD@host:6379/0``,
``postgresql://cbs:PASSWORD@db/cbs_mlflow``). Every message that names one, on a page, in a log
or on a command line, shows it through :func:`masked_url`, and a page shows any text through
:func:`masked`, which masks every such URL in it.
"""

from __future__ import annotations

import re

#: What stands for a password.
MASK = "***"

# scheme://user:password@ — the password runs to the authority's last "@" (an unescaped "@" in it
# is masked whole), never past a "/" or a space.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*):(?P<password>[^\s/]*)@")


def masked(text: str) -> str:
    """``text`` with the password of every URL in it replaced by :data:`MASK`."""
    return _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@" if m["password"] else m[0], text)


def masked_url(url: str) -> str:
    """``url`` with its password replaced by :data:`MASK` (``redis://:***@host:6379/0``)."""
    return masked(url)
