"""The on-disk caches of ended runs and their histories under ``$CBS_HOME/cache``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------- on-disk caches
#: Version of the on-disk caches (a new one ignores older files).
_DISK_FORMAT = 1
#: Bytes the on-disk caches under ``$CBS_HOME/cache`` may hold (``CBS_DISK_CACHE_MB``, default
#: 512); the least recently used files go first (a read touches its file).
_DISK_MAX_BYTES = int(float(os.environ.get("CBS_DISK_CACHE_MB") or 512) * 2**20)
#: Saves between two prunes in one process (the first save prunes too).
_PRUNE_EVERY = 50
_saves = 0


def _curve_bytes(curve) -> int:
    steps, values = curve
    return 64 * (len(steps) + len(values)) // 2 + 200


def prune_disk_cache(root: Path, max_bytes: int) -> int:
    """Delete the least recently used cache files under ``root`` until they hold at most
    ``max_bytes``; returns the bytes freed. Another process may delete the same file: fine."""
    files = []
    for path in root.rglob("*.pickle"):
        try:
            st = path.stat()
        except OSError:
            continue
        files.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in files)
    freed = 0
    for _, size, path in sorted(files):
        if total - freed <= max_bytes:
            break
        try:
            path.unlink()
            freed += size
        except OSError:
            pass
    return freed


def _disk_load(path: Path) -> dict | None:
    """A cache file written by :func:`_disk_save`; ``None`` when missing, from another MLflow
    version or unreadable (it is only a cache: a miss costs a read from MLflow, never an answer)."""
    import pickle

    import mlflow

    try:
        with path.open("rb") as f:
            saved = pickle.load(f)  # our own file under the state directory
        if saved.get("format") != _DISK_FORMAT or saved.get("mlflow") != mlflow.__version__:
            return None
        os.utime(path)  # recently used: the pruning keeps it
        return saved
    except Exception:  # missing or broken: a miss
        return None


def _disk_save(path: Path, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` atomically (a temporary file renamed over the old one), so processes that
    read and write the same cache never see half a file. Failures are ignored (a cache)."""
    import pickle
    import tempfile

    import mlflow

    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump({"format": _DISK_FORMAT, "mlflow": mlflow.__version__, **payload}, f,
                        protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except Exception:  # a read-only or full disk costs speed, never a read
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        return
    global _saves
    _saves += 1
    if _saves % _PRUNE_EVERY == 1:
        prune_disk_cache(path.parent.parent, _DISK_MAX_BYTES)
