"""Trial checkpoints: one file, written atomically, read back to resume.

A checkpoint holds the model, the optimizer, the averaged weights, the step, the RNG states and
the evaluation history (everything :func:`cbscore.train.trainer.train` needs to continue exactly). It is
written to a temporary file in the same folder, flushed and ``fsync``-ed, moved over the old one
with ``os.replace`` (atomic on POSIX), and then the folder itself is ``fsync``-ed, so a kill at any
moment leaves either the old or the new checkpoint, never half of one. The folder's ``fsync``
makes the rename itself durable: on a shared mount (NFS, ``CBS_CHECKPOINT_DIR``) it is the commit
that another host's next attempt sees, and after a crash of the writing host the folder holds the
new name, not a temporary file.

Snapshots. A trial with ``snapshot_dir`` also keeps read-only copies of its state at chosen
stream positions, ``snapshot_path(snapshot_dir, tokens)``, for branches to start from
(Merrill et al. 2025, arXiv 2505.23971: the local CBS is measured by branching from a run's
checkpoints). A snapshot is written once (an existing one is never replaced, so a branch that
started from it can always find the same one again) and read with :func:`read_checkpoint`, which
never changes the folder it reads.
"""

from __future__ import annotations

import os
import random
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from cbscore.paths import fsync_folder

CHECKPOINT_NAME = "checkpoint.pt"
SNAPSHOT_PREFIX = "tokens-"


def checkpoint_path(checkpoint_dir: str | os.PathLike) -> Path:
    return Path(checkpoint_dir) / CHECKPOINT_NAME


def snapshot_path(snapshot_dir: str | os.PathLike, tokens: int) -> Path:
    """The folder of the snapshot at stream position ``tokens``: ``tokens-<15 digits>`` (zero
    padded, so that names sort as positions do); a branch's ``branch_from``."""
    return Path(snapshot_dir) / f"{SNAPSHOT_PREFIX}{int(tokens):015d}"


def save_snapshot(snapshot_dir: str | os.PathLike, tokens: int, payload: dict) -> Path | None:
    """Write ``payload`` as the snapshot at ``tokens`` unless one is there; the path written, or
    ``None`` when it existed (write once: its content is a pure function of the trial's config)."""
    folder = snapshot_path(snapshot_dir, tokens)
    if checkpoint_path(folder).exists():
        return None
    return save_checkpoint(folder, payload)


def read_checkpoint(checkpoint_dir: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Another trial's checkpoint, read without changing its folder (no clean-up of temporary
    files, no moving aside): a branch's base is not the branch's to repair. Raises
    ``FileNotFoundError`` when there is none, and what ``torch.load`` raises when it is unreadable."""
    path = checkpoint_path(checkpoint_dir)
    if not path.is_file():
        raise FileNotFoundError(f"no {CHECKPOINT_NAME} in {checkpoint_dir}")
    return torch.load(path, map_location=map_location, weights_only=True)


def save_checkpoint(checkpoint_dir: str | os.PathLike, payload: dict, *, create: bool = True) -> Path | None:
    """Write ``payload`` to ``checkpoint_dir/checkpoint.pt`` atomically; returns the path.

    ``None`` (nothing saved, no error) when the folder is removed while the save runs, or is
    already gone with ``create=False``: a writer that has saved there before and finds it gone was
    overtaken (its trial ended, or a newer attempt took the trial and cleared the folder), so it
    must not make the folder again.
    """
    folder = Path(checkpoint_dir)
    if create and not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        fsync_folder(folder.parent)  # the new folder's own name, durable before anything is in it
    final = folder / CHECKPOINT_NAME
    try:
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", suffix=".tmp", dir=folder)
    except FileNotFoundError:
        return None
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
        fsync_folder(folder)  # the rename, durable (and seen by other hosts of a shared mount)
    except FileNotFoundError:
        Path(tmp).unlink(missing_ok=True)
        if folder.is_dir():
            raise
        return None  # removed under this save (see above)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


def load_checkpoint(checkpoint_dir: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict | None:
    """The checkpoint in ``checkpoint_dir``, or ``None`` when there is none.

    Temporary files of a save cut short (SIGKILL between ``mkstemp`` and ``os.replace``) are
    removed. A checkpoint that cannot be read (a disk that lied about ``fsync``, a truncated copy)
    is moved aside to ``checkpoint.pt.corrupt`` and ``None`` is returned: the trial restarts from
    step 0, which costs time but never a wrong number, instead of failing for good.
    """
    folder = Path(checkpoint_dir)
    for leftover in folder.glob(".checkpoint-*.tmp") if folder.is_dir() else ():
        leftover.unlink(missing_ok=True)
    path = checkpoint_path(checkpoint_dir)
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError, EOFError, UnpicklingError, ...
        aside = path.with_name(CHECKPOINT_NAME + ".corrupt")
        os.replace(path, aside)
        warnings.warn(f"checkpoint {path} could not be read ({type(exc).__name__}); moved to {aside.name}, "
                      f"the trial restarts from step 0", RuntimeWarning, stacklevel=2)
        return None


def rng_state() -> dict:
    """Every RNG the process might use, as tensors and plain values (``weights_only`` safe)."""
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "python": [list(x) if isinstance(x, tuple) else x for x in random.getstate()],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
