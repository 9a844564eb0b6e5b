"""Files and folders that readers see whole or not at all: reports and exports.

Everything is written beside its target (the same filesystem, so no ``EXDEV`` from a tmpfs
``/tmp``) and put in place with one rename. A kill at any moment leaves the old version or the new
one, plus at most a hidden temporary beside it, which the next writer of the same target removes
(:func:`remove_leftovers`: its name says which process on which host made it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path

_RENAME_EXCHANGE = 2  # linux/fs.h


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it and one ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's file is private
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: A hidden folder beside a target whose writer cannot be asked (made on another host, or before
#: folders named their writer) is removed once it has not changed for this long, seconds.
LEFTOVER_AGE_S = 3600.0


def new_folder_beside(out: str | os.PathLike) -> Path:
    """An empty hidden folder next to ``out`` (its parent made if need be), to fill and then
    :func:`replace_folder` onto ``out``. Named ``.<out>.<pid>-<host>.<random>``; the hidden
    folders a killed writer of ``out`` left beside it go first (:func:`remove_leftovers`)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.{_writer()}.", dir=out.parent))


def remove_leftovers(out: str | os.PathLike, now_s: float | None = None) -> list[str]:
    """Remove the hidden folders beside ``out`` that a writer killed mid-write left (its new
    version, or an old one moved aside): those of a process of this host that no longer runs,
    and any other (another host's, or an unnamed one of an older version) unchanged for
    :data:`LEFTOVER_AGE_S`. Returns their names."""
    out = Path(out)
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.(?:old\.)?(?:(\d+)-([0-9a-f]{{6}})\.)?[a-z0-9_]{{8}}$")
    now_s = time.time() if now_s is None else now_s
    removed = []
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or not entry.is_dir():
            continue
        pid, host = match.groups()
        if pid is not None and host == _host_tag():
            if _alive(int(pid)):
                continue
        else:
            try:
                if now_s - entry.stat().st_mtime < LEFTOVER_AGE_S:
                    continue
            except OSError:
                continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry.name)
    return removed


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]


def _writer() -> str:
    return f"{os.getpid()}-{_host_tag()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def replace_folder(new: Path, out: Path) -> None:
    """Put the folder ``new`` at ``out`` in one rename; whatever ``out`` held goes (no file of an
    earlier version survives). An existing ``out`` is swapped with ``new`` atomically where the
    kernel can (``renameat2(RENAME_EXCHANGE)``), else moved aside first."""
    if not out.exists():
        os.rename(new, out)
        return
    if not _exchange(new, out):
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.{_writer()}.", dir=out.parent))
        os.rename(out, aside / out.name)
        os.rename(new, out)
        new = aside
    shutil.rmtree(new, ignore_errors=True)  # now the old version


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ≥ 3.15); False where the call or the filesystem lacks it."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd = -100
    done = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    return done == 0
