"""Files and folders that readers see whole or not at all: reports and exports.

Everything is written beside its target (the same filesystem, so no ``EXDEV`` from a tmpfs
``/tmp``) and put in place with one rename. A kill at any moment leaves the old version or the new
one, plus at most a hidden temporary beside it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import tempfile
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


def new_folder_beside(out: str | os.PathLike) -> Path:
    """An empty hidden folder next to ``out`` (its parent made if need be), to fill and then
    :func:`replace_folder` onto ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))


def replace_folder(new: Path, out: Path) -> None:
    """Put the folder ``new`` at ``out`` in one rename; whatever ``out`` held goes (no file of an
    earlier version survives). An existing ``out`` is swapped with ``new`` atomically where the
    kernel can (``renameat2(RENAME_EXCHANGE)``), else moved aside first."""
    if not out.exists():
        os.rename(new, out)
        return
    if not _exchange(new, out):
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
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
