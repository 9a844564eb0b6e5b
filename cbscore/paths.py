"""Where CBS Lab writes at run time, and how a write is made durable.

Everything the product writes (token stores, broker files, checkpoints, the Optuna database) lives
under one state directory: ``$CBS_HOME`` when set, else ``.cbs/`` in the checkout (git-ignored).
Two folders move out of it when several hosts work on one lab (docs/operating.md, "Scaling out"): the trials'
checkpoints (``CBS_CHECKPOINT_DIR``) and the token stores (``CBS_STORE_DIR``), each a path on a
filesystem that every host mounts, so a trial resumes on any host and every host trains on one store.
The base runs' snapshots of ``local`` studies (``CBS_SNAPSHOT_DIR``) move out the same way: a branch
on any host starts from them.

Durable writes (``fsync_file``, ``fsync_folder``): a rename is atomic, but it is durable only once
the folder holding the new name is synced (POSIX ``rename(2)``; ext4 and NFS both need the explicit
``fsync`` of the folder), and a file's bytes are durable only once the file itself is synced. The
token store's build and the trials' checkpoints use these so that what another host reads after a
crash (a power cut, an NFS client's) is whole or absent, never half-written.
"""

from __future__ import annotations

import errno
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


def _shared(env: str) -> Path | None:
    raw = os.environ.get(env, "").strip()
    return Path(raw).expanduser().resolve() if raw else None


def checkpoint_root() -> Path:
    """The folder of the trials' checkpoint folders: ``CBS_CHECKPOINT_DIR``, else
    ``$CBS_HOME/checkpoints`` (not created here: the first checkpoint makes it, and on a full disk
    nothing may be written there before a lease is released)."""
    return _shared("CBS_CHECKPOINT_DIR") or cbs_home() / "checkpoints"


def store_root() -> Path:
    """The folder of the lab's token stores (a data root, and where a store lives unless the spec
    names ``data.store_dir``): ``CBS_STORE_DIR``, else ``$CBS_HOME/data`` (created on first use)."""
    path = _shared("CBS_STORE_DIR") or cbs_home() / "data"
    path.mkdir(parents=True, exist_ok=True)
    return path


def snapshot_root() -> Path:
    """The folder of the studies' kept artifacts, e.g. a local study's base-run snapshots under
    ``<root>/<study>/snapshots/s<seed>``: ``CBS_SNAPSHOT_DIR`` (shared by every host, like
    ``CBS_CHECKPOINT_DIR``), else ``$CBS_HOME/artifacts``. Never a trial's checkpoint folder:
    those are removed when a trial ends, these only when the study is deleted."""
    return _shared("CBS_SNAPSHOT_DIR") or cbs_home() / "artifacts"


def fsync_file(path: str | os.PathLike) -> None:
    """``fsync`` the file at ``path`` (its bytes and size on disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_folder(folder: str | os.PathLike) -> None:
    """``fsync`` a folder, so the names created or renamed in it are on disk. A folder that is
    gone raises ``FileNotFoundError``; a filesystem that cannot sync a folder (EINVAL, ENOTSUP,
    EBADF) has nothing more to flush."""
    fd = os.open(Path(folder), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)
