"""Where CBS Lab writes at run time.

Everything the product writes (token stores, broker files, checkpoints, the Optuna database) lives
under one state directory: ``$CBS_HOME`` when set, else ``.cbs/`` in the checkout (git-ignored).
"""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (the folder holding ``pyproject.toml``) for an editable install.
REPO_ROOT = Path(__file__).resolve().parent.parent


def cbs_home() -> Path:
    """The state directory, created on first use."""
    home = Path(os.environ.get("CBS_HOME") or REPO_ROOT / ".cbs").expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    return home


def subdir(name: str) -> Path:
    """A named folder under the state directory (``data``, ``broker``, ``checkpoints``...)."""
    path = cbs_home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
