"""Writes that survive a power cut or an NFS client crash: ``fsync`` for files and for folders.

A rename is atomic, but it is durable only once the folder holding the new name is synced (POSIX
``rename(2)``; ext4 and NFS both need the explicit ``fsync`` of the folder), and a file's bytes are
durable only once the file itself is synced. The token store's build and the trials' checkpoints
use these so that what another host reads after a crash is whole or absent, never half-written.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


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
