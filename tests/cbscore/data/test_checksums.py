"""Token-store checksums (issue 42, finding 6): a real built-in store with 1 MiB zeroed in place,
the same size, is named with the shard and the command that rebuilds it, when a worker first
opens it (``reuse_problem``, ``prepare``) and by ``cbs data verify``; ``prepare`` rebuilds it; a
store built before checksums were kept is used as before, said so, and can get them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cbscore.data import DataConfig, checksums, prepare
from cbscore.data.store import DAMAGED, damage, prepare_command, reuse_problem

CBS = str(Path(sys.executable).parent / "cbs")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """The built-in corpus (400 chapters, about 0.9M tokens: a train.bin of 1.7 MB) prepared into ``tmp_path/stores``."""
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CBS_STORE_DIR", str(tmp_path / "stores"))
    checksums._seen.clear()
    config = DataConfig(max_documents=400, vocab_size=320, val_fraction=0.1)
    prepared = prepare(config)
    assert prepared.built
    return config, prepared.path


def _zero(path: Path, offset: int, length: int) -> None:
    """Zero ``length`` bytes of ``path`` at ``offset`` in place (its size unchanged)."""
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(b"\0" * length)
    assert path.stat().st_size == size


def _cli(env_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CBS_HOME": str(env_dir / "home"), "CBS_STORE_DIR": str(env_dir / "stores")}
    return subprocess.run([CBS, "data", *args], env=env, capture_output=True, text=True, timeout=120)


def _args(config: DataConfig) -> list[str]:
    return prepare_command(config).split()[3:]  # after "cbs data prepare"


def test_a_built_store_carries_a_checksum_per_shard_and_verifies_whole(store):
    config, path = store
    manifest = json.loads((path / "manifest.json").read_text())
    sums = manifest["checksums"]
    assert sums["algorithm"] == "sha256" and sums["shard_bytes"] == checksums.SHARD_BYTES
    assert set(sums["files"]) == {"train.bin", "val.bin", "tokenizer.json"}
    train = (path / "train.bin").stat().st_size
    assert len(sums["files"]["train.bin"]) == -(-train // checksums.SHARD_BYTES)
    check = checksums.verify(path)
    assert check.ok and check.has_checksums and check.bytes_read >= train
    assert reuse_problem(config) is None


def test_a_zeroed_mebibyte_names_the_store_its_shard_and_the_rebuild(store, tmp_path):
    config, path = store
    train = path / "train.bin"
    assert train.stat().st_size > (1 << 20) + 4096
    assert checksums.verified(path).ok  # the worker's first open: verified, stamped
    _zero(train, 4096, 1 << 20)
    # the worker's next open sees the file written since (its mtime moved) and reads it again
    problem = reuse_problem(config)
    assert problem.startswith(f"{DAMAGED}: its content differs from its checksums in train.bin shard 0 (bytes 0–")
    out = _cli(tmp_path, "verify", *_args(config))
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"token store DAMAGED: {path}" in out.stdout and "train.bin shard 0" in out.stdout
    assert f"rebuild it (the same content, from its source): {prepare_command(config)}" in out.stdout
    # the command it names rebuilds it, to the same content
    rebuilt = _cli(tmp_path, "prepare", *_args(config), "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["reused"] is False
    checksums._seen.clear()
    assert checksums.verify(path).ok and reuse_problem(config) is None


def test_prepare_rebuilds_a_damaged_store_instead_of_reusing_it(store):
    config, path = store
    _zero(path / "val.bin", 0, 4096)
    assert damage(path).startswith(f"{DAMAGED}: its content differs from its checksums in val.bin shard 0")
    assert prepare(config).built
    assert damage(path) is None


def test_a_host_verifies_a_store_once_until_its_files_change(store):
    _, path = store
    stamps = path.parent / "stamps"
    first = checksums.verified(path, stamps)
    assert first.ok and not first.from_stamp and first.bytes_read > 0
    checksums._seen.clear()  # another process on the same host
    again = checksums.verified(path, stamps)
    assert again.ok and again.from_stamp and again.bytes_read == 0
    checksums._seen.clear()
    _zero(path / "train.bin", 0, 16)
    assert not checksums.verified(path, stamps).ok


def test_a_store_without_checksums_is_used_said_so_and_can_get_them(store, tmp_path):
    config, path = store
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["checksums"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    checksums._seen.clear()
    assert not checksums.verify(path).has_checksums
    assert reuse_problem(config) is None and prepare(config).built is False  # not broken, not rebuilt
    out = _cli(tmp_path, "verify", *_args(config))
    assert out.returncode == 0 and "has no checksums (built before they were kept)" in out.stdout
    assert "--add-checksums" in out.stdout
    added = _cli(tmp_path, "verify", *_args(config), "--add-checksums", "--json")
    assert added.returncode == 0, added.stderr
    result = json.loads(added.stdout)
    assert result["checksums_added"] and result["whole"] and result["has_checksums"]
    assert checksums.verify(path).ok


def test_a_truncated_store_is_damaged_and_named_with_its_sizes(store):
    config, path = store
    train = path / "train.bin"
    size = train.stat().st_size
    os.truncate(train, size - 2048)
    assert reuse_problem(config) == (f"{DAMAGED}: train.bin holds {size - 2048} bytes, its manifest {size} "
                                     "(cut short or grown)")
