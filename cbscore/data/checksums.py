"""Content checksums of a token store: a sha256 per shard of each of its files.

A store's sizes and manifest say nothing of its content: a range zeroed in place (a bad disk, a
copy cut short and padded, a stray ``dd``) leaves every size right, and trials then train on
zeros and diverge with nothing naming the store. ``prepare`` writes the
checksums into the manifest (``checksums``: the algorithm, the shard size and one digest per
``shard_bytes`` of ``train.bin``, ``val.bin`` and ``tokenizer.json``).

:func:`verify` reads every byte and names the shards that differ. :func:`verified` is what a
worker calls when it opens a store: the first open on a host verifies it and leaves a stamp (the
files' sizes, modification times and inodes) under ``$CBS_HOME/verified-stores/``; a later open
whose files still match the stamp costs a few ``stat`` calls, and a file written since (its
modification time moves) is verified again. A store built before checksums were kept verifies as
``has_checksums=False``: it is used as before, and ``cbs data verify --add-checksums`` adds them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

ALGORITHM = "sha256"
#: Bytes per checksummed shard: small enough to say where a store is damaged, large enough that a
#: manifest of a 100 GB store stays a few hundred kB.
SHARD_BYTES = 16 << 20
_READ_BYTES = 4 << 20
#: The files a store's checksums cover (the manifest itself is their carrier).
FILES = ("train.bin", "val.bin", "tokenizer.json")
_STAMPS = "verified-stores"


@dataclass(frozen=True, kw_only=True)
class StoreCheck:
    """What :func:`verify` found in one store."""

    path: str
    has_checksums: bool
    """False for a store built before checksums were kept (nothing could be checked)."""
    damaged: tuple[str, ...] = ()
    """The shards whose content differs from their checksum, e.g. ``train.bin shard 0 (bytes
    0–16777216)``, and files missing or of another size."""
    bytes_read: int = 0
    seconds: float = 0.0
    from_stamp: bool = False
    """True when this host had verified the same files before (nothing was read this time)."""
    shards: int = field(default=0)

    @property
    def ok(self) -> bool:
        return not self.damaged


def file_checksums(path: Path, shard_bytes: int = SHARD_BYTES) -> list[str]:
    """The sha256 of each ``shard_bytes`` of ``path`` (the last shard may be shorter)."""
    out = []
    with open(path, "rb", buffering=0) as handle:
        while True:
            digest, left = hashlib.sha256(), shard_bytes
            while left:
                block = handle.read(min(_READ_BYTES, left))
                if not block:
                    break
                digest.update(block)
                left -= len(block)
            if left == shard_bytes:  # nothing read: the end
                break
            out.append(digest.hexdigest())
            if left:
                break
    return out or [hashlib.sha256(b"").hexdigest()]


def compute(folder: Path, shard_bytes: int = SHARD_BYTES) -> dict:
    """The manifest's ``checksums`` entry for the store files in ``folder``."""
    folder = Path(folder)
    return {"algorithm": ALGORITHM, "shard_bytes": shard_bytes,
            "files": {name: file_checksums(folder / name, shard_bytes) for name in FILES}}


def verify(path: Path) -> StoreCheck:
    """Read the store at ``path`` and compare each shard with its checksum."""
    path = Path(path)
    manifest = json.loads((path / "manifest.json").read_text())
    sums = manifest.get("checksums")
    if not sums:
        return StoreCheck(path=str(path), has_checksums=False)
    started, shard_bytes, damaged, read, shards = time.perf_counter(), int(sums["shard_bytes"]), [], 0, 0
    for name, expected in sums["files"].items():
        file = path / name
        try:
            got = file_checksums(file, shard_bytes)
            read += file.stat().st_size
        except OSError as exc:
            damaged.append(f"{name} cannot be read ({exc.strerror})")
            continue
        shards += len(expected)
        if len(got) != len(expected):
            damaged.append(f"{name} has {len(got)} shards of {shard_bytes} bytes, its checksums {len(expected)}")
        damaged += [f"{name} shard {i} (bytes {i * shard_bytes}–{min((i + 1) * shard_bytes, file.stat().st_size)})"
                    for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    return StoreCheck(path=str(path), has_checksums=True, damaged=tuple(damaged), bytes_read=read,
                      seconds=round(time.perf_counter() - started, 4), shards=shards)


#: Per process: stores verified here, by their files' identity (a worker opens a store many times).
_seen: dict[tuple, StoreCheck] = {}
_warned: set[str] = set()


def verified(path: Path, stamps: Path | None = None) -> StoreCheck:
    """:func:`verify` once per host for the store's current files (see the module's docstring).

    ``stamps``: the folder of this host's stamps (default ``$CBS_HOME/verified-stores``); a stamp
    that cannot be written (a read-only home) only means the next process verifies again."""
    path = Path(path).resolve()
    identity = _identity(path)
    if identity is None:  # a file missing: verify says which
        return verify(path)
    if identity in _seen:
        return _seen[identity]
    if stamps is None:
        from cbscore.paths import cbs_home

        stamps = cbs_home() / _STAMPS
    stamp = stamps / (hashlib.sha256(str(path).encode()).hexdigest()[:24] + ".json")
    try:
        if json.loads(stamp.read_text()) == _stamp_body(identity):
            check = StoreCheck(path=str(path), has_checksums=True, from_stamp=True)
            _seen[identity] = check
            return check
    except (OSError, ValueError):
        pass
    check = verify(path)
    if not check.has_checksums and str(path) not in _warned:
        _warned.add(str(path))
        import logging

        logging.getLogger(__name__).warning(
            "token store at %s has no checksums (built before they were kept): its content is not verified; "
            "add them with `cbs data verify --add-checksums` and the store's settings (or --store-dir %s)", path, path)
    if check.has_checksums and check.ok:
        _seen[identity] = check
        try:
            stamps.mkdir(parents=True, exist_ok=True)
            tmp = stamp.with_suffix(f".tmp-{os.getpid()}")
            tmp.write_text(json.dumps(_stamp_body(identity)))
            os.replace(tmp, stamp)
        except OSError:
            pass
    return check


def _identity(path: Path) -> tuple | None:
    """The store's files as ``stat`` sees them: (name, size, modification time, inode, device)."""
    out = [str(path)]
    for name in ("manifest.json", *FILES):
        try:
            st = (path / name).stat()
        except OSError:
            return None
        out.append((name, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev))
    return tuple(out)


def _stamp_body(identity: tuple) -> list:
    return json.loads(json.dumps(identity))  # tuples as lists, as read back


def add_to_manifest(path: Path) -> dict:
    """Write checksums of the store's files as they are into its manifest (atomically); returns them.
    The files are trusted as they are: for a store that may be damaged, rebuild it instead."""
    path = Path(path)
    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["checksums"] = compute(path)
    tmp = path / f".manifest.json.tmp-{os.getpid()}"
    with open(tmp, "w") as handle:
        json.dump(manifest, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, manifest_path)
    return manifest["checksums"]
