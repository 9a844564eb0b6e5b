"""prepare / open_store: the built-in corpus end to end, idempotence, rebuilds, atomic failures."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from cbscore.data import DataConfig, builtin, open_store, prepare
from cbscore.data.store import check_store_location
from cbscore.errors import ConfigError, DataError

CHAPTERS = 1189  # chapters of the 66-book Protestant canon
TRANSLATIONS = len(builtin.TRANSLATIONS)


def _documents(store, split: str) -> list[str]:
    """Decode a split back into its documents (split on the end-of-text token)."""
    tokens = np.asarray(store.tokens(split), dtype=np.int64)
    ends = np.flatnonzero(tokens == store.eot_id)
    starts = np.concatenate([[0], ends[:-1] + 1])
    tokenizer = store.tokenizer()
    return tokenizer.decode_batch([tokens[s:e].tolist() for s, e in zip(starts, ends)])


def _leftovers(folder: Path) -> list[str]:
    """Temporary or half-written entries next to stores (lock files are fine)."""
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---- the built-in corpus ------------------------------------------------------------------------
def test_builtin_corpus_prepares_end_to_end(builtin_store):
    manifest = builtin_store.manifest
    splits = manifest["splits"]
    # One document per chapter per translation; the split holds out whole chapters.
    assert manifest["documents"] == CHAPTERS * TRANSLATIONS
    assert splits["val"]["documents"] == round(0.02 * CHAPTERS) * TRANSLATIONS
    assert splits["train"]["tokens"] > 5_000_000
    assert splits["val"]["tokens"] > 100_000
    assert manifest["vocab_size"] == builtin_store.vocab_size == 8192
    assert manifest["dtype"] == "uint16"
    assert manifest["tokenizer_training"]["sampled"] is True  # BPE trains on a seeded sample
    for name, info in splits.items():
        tokens = builtin_store.tokens(name)
        assert len(tokens) == info["tokens"]
        assert int(np.count_nonzero(tokens == builtin_store.eot_id)) == info["documents"]
        assert int(tokens[-1]) == builtin_store.eot_id
        assert int(tokens.max()) < builtin_store.vocab_size


def test_tokenizer_round_trips_real_text(builtin_store):
    tokenizer = builtin_store.tokenizer()
    text = "In the beginning God created the heavens and the earth. Naïve “quotes” — 3.14!"
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text) / 2  # a trained BPE compresses English well below a char a token
    assert tokenizer.token_to_id("<|endoftext|>") == builtin_store.eot_id


def test_slice_documents_decode_back_and_split_is_disjoint(builtin_slice_store, builtin_slice_config):
    expected = [d["text"] for d in builtin.documents()][: builtin_slice_config.max_documents]
    train, val = _documents(builtin_slice_store, "train"), _documents(builtin_slice_store, "val")
    assert sorted(train + val) == sorted(expected)  # lossless
    assert not set(train) & set(val)  # disjoint at the document level
    assert len(val) == round(0.1 * len(expected))
    assert train[0].startswith("In the beginning God created the heavens and the earth.")


def test_val_chapters_are_held_out_of_every_translation(builtin_store):
    group_of = {d["text"]: d["group"] for d in builtin.documents()}
    val_groups = [group_of[text] for text in _documents(builtin_store, "val")]
    counts = {group: val_groups.count(group) for group in val_groups}
    # Each held-out chapter is in val in all its translations, so in none of train.
    assert len(counts) == round(0.02 * CHAPTERS)
    assert set(counts.values()) == {TRANSLATIONS}


def test_split_depends_on_the_seed(tmp_path):
    a = prepare(DataConfig(max_documents=60, vocab_size=300, val_fraction=0.1, store_dir=str(tmp_path / "a")))
    b = prepare(
        DataConfig(max_documents=60, vocab_size=300, val_fraction=0.1, seed=1, store_dir=str(tmp_path / "b"))
    )
    assert set(_documents(a, "val")) != set(_documents(b, "val"))


# ---- idempotence and rebuilds -------------------------------------------------------------------
def test_prepare_again_is_a_fast_no_op(builtin_slice_config, builtin_slice_store):
    path = builtin_slice_store.path
    before = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}
    started = time.perf_counter()
    again = prepare(builtin_slice_config)
    assert time.perf_counter() - started < 1.0
    assert again.built is False
    assert again.manifest == builtin_slice_store.manifest
    assert {p.name: p.stat().st_mtime_ns for p in path.iterdir()} == before


def test_each_vocab_size_gets_its_own_store(tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_STORE_DIR", str(tmp_path / "stores"))
    first = prepare(DataConfig(max_documents=40, vocab_size=512))
    second = prepare(DataConfig(max_documents=40, vocab_size=300))
    assert second.built and second.vocab_size == 300 and first.vocab_size == 512 and second.path != first.path
    assert second.manifest["tokenizer_sha256"] != first.manifest["tokenizer_sha256"]
    assert second.manifest["splits"]["train"]["tokens"] > first.manifest["splits"]["train"]["tokens"]
    assert open_store(DataConfig(max_documents=40, vocab_size=300)).vocab_size == 300
    assert open_store(DataConfig(max_documents=40, vocab_size=512)).vocab_size == 512  # still there


def test_a_named_store_folder_is_never_taken_over_by_other_settings(tmp_path):
    """Issue 41, finding 6: a spec naming another study's store with other settings replaced it
    under that study (its trials failed with StoreUnavailable)."""
    folder = str(tmp_path / "store")
    first = prepare(DataConfig(max_documents=40, vocab_size=512, store_dir=folder))
    manifest = (tmp_path / "store" / "manifest.json").read_text()
    with pytest.raises(ConfigError) as err:
        prepare(DataConfig(max_documents=40, vocab_size=300, store_dir=folder))
    assert err.value.field == "data.store_dir" and err.value.value == folder
    assert err.value.reason.startswith("holds a token store prepared with other settings, which other studies")
    assert (tmp_path / "store" / "manifest.json").read_text() == manifest  # untouched
    assert open_store(DataConfig(max_documents=40, vocab_size=512, store_dir=folder)).manifest == first.manifest
    assert prepare(DataConfig(max_documents=40, vocab_size=512, store_dir=folder)).built is False  # its own: reused
    assert _leftovers(tmp_path) == []


# ---- where a store may live (issue 12, item 1) ----------------------------------------------------
def test_prepare_never_replaces_a_folder_that_is_not_a_store(tmp_path, monkeypatch):
    """A folder holding someone's files is refused, untouched, wherever it is."""
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CBS_STORE_ROOTS", str(tmp_path))
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("irreplaceable")
    with pytest.raises(ConfigError) as err:
        prepare(DataConfig(max_documents=20, vocab_size=260, store_dir=str(thesis)))
    assert err.value.field == "data.store_dir" and "thesis" in str(err.value)
    assert (thesis / "chapter1.tex").read_text() == "irreplaceable"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "thesis"]  # nothing built beside it


def test_store_folders_live_under_the_labs_store_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CBS_STORE_ROOTS", raising=False)
    monkeypatch.setenv("CBS_DATA_ROOTS", str(tmp_path / "elsewhere"))  # a corpus root is read, never written
    outside = tmp_path / "elsewhere" / "store"
    with pytest.raises(ConfigError, match="must be a folder inside the lab's store folder"):
        check_store_location(outside)
    assert not outside.parent.exists()
    for corpora in (tmp_path / "home" / "corpora" / "store",):  # the lab's own corpus root neither
        with pytest.raises(ConfigError, match="must be a folder inside the lab's store folder"):
            check_store_location(corpora)
    # The state directory and its own folders are never a store.
    for bad in (tmp_path / "home", tmp_path / "home" / "checkpoints", tmp_path):
        with pytest.raises(ConfigError):
            check_store_location(bad)
    check_store_location(tmp_path / "home" / "data" / "mine")  # new, under $CBS_HOME/data: fine
    monkeypatch.setenv("CBS_STORE_ROOTS", str(tmp_path / "elsewhere"))
    check_store_location(outside)  # the operator made it a store folder


def test_an_existing_store_may_be_rebuilt_inside_the_store_folders_only(tmp_path, monkeypatch):
    """Issue 21, finding 7: a store outside the roots (another lab's) was renamed aside and deleted
    because ``is_store`` answered before the roots were checked."""
    monkeypatch.setenv("CBS_STORE_ROOTS", str(tmp_path))
    folder = str(tmp_path / "s")
    prepare(DataConfig(max_documents=20, vocab_size=260, store_dir=folder))
    (tmp_path / "s" / "val.bin").write_bytes(b"")  # a damaged copy: rebuilt, since it holds a manifest
    rebuilt = prepare(DataConfig(max_documents=20, vocab_size=260, store_dir=folder))
    assert rebuilt.built and rebuilt.vocab_size == 260
    manifest = (tmp_path / "s" / "manifest.json").read_text()
    monkeypatch.delenv("CBS_STORE_ROOTS")
    with pytest.raises(ConfigError, match="inside the lab's store folder"):
        prepare(DataConfig(max_documents=20, vocab_size=260, store_dir=folder))
    assert (tmp_path / "s" / "manifest.json").read_text() == manifest  # untouched


def test_a_named_store_folder_never_takes_the_name_of_other_settings_default_store(tmp_path, monkeypatch):
    """Issue 41, finding 6: the default store's folder is its settings' hash, a predictable name; a
    spec of other settings that named it could claim it before the study it belongs to prepared it."""
    from cbscore.data.store import check_data_location
    from cbscore.paths import store_root

    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CBS_STORE_DIR", raising=False)
    victim = DataConfig(max_documents=40, vocab_size=512)
    squatter = DataConfig(max_documents=40, vocab_size=300, store_dir=str(store_root() / victim.key()))
    with pytest.raises(ConfigError) as err:
        check_data_location(squatter)
    assert err.value.field == "data.store_dir" and err.value.value == squatter.store_dir
    assert f"is named as the default store of other settings ({victim.key()}" in str(err.value)
    assert not (store_root() / victim.key()).exists()
    # the same settings may name their own default folder (it is the store they would use anyway)
    check_data_location(DataConfig(max_documents=40, vocab_size=512, store_dir=str(store_root() / victim.key())))


@pytest.fixture
def read_only_view(tmp_path):
    """``(writable, read_only)``: a folder and a read-only bind mount of it, as a host that mounts the
    shared stores read-only sees them (root only: ``mount --bind`` then ``remount,ro``)."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    writable, view = tmp_path / "shared", tmp_path / "ro"
    writable.mkdir()
    view.mkdir()
    if subprocess.run(["mount", "--bind", str(writable), str(view)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        remounted = subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], capture_output=True)
        if remounted.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remounted.stderr.decode().strip()}")
        yield writable, view
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)


def test_an_up_to_date_store_is_used_from_a_read_only_mount(read_only_view):
    writable, view = read_only_view
    built = prepare(DataConfig(max_documents=40, vocab_size=300, store_dir=str(writable / "store")))
    with pytest.raises(OSError):  # the mount really is read-only
        (view / "probe").write_text("x")
    ro = DataConfig(max_documents=40, vocab_size=300, store_dir=str(view / "store"))
    store = prepare(ro)  # before: the build lock's file was opened for writing first (EROFS)
    assert store.built is False and store.manifest == built.manifest
    assert np.array_equal(store.tokens("train"), built.tokens("train"))
    # a store that would need a rebuild (here a damaged copy) says so, naming the path and what to do;
    # nothing is written
    (writable / "store" / "val.bin").write_bytes(b"")
    with pytest.raises(DataError, match=r"store.*cannot be written on this host.*cbs data prepare"):
        prepare(ro)
    assert sorted(p.name for p in writable.iterdir()) == sorted(p.name for p in view.iterdir())
    assert _leftovers(writable) == []


def test_a_built_store_is_synced_before_and_after_its_swap(tmp_path, monkeypatch):
    """Each file's bytes, then the folder of new names, then the parent after the rename (NFS: what
    another host reads after a crash is the old store or the whole new one)."""
    synced: list[str] = []  # the path of every descriptor synced, in order
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))[1])
    store = prepare(DataConfig(max_documents=40, vocab_size=300, store_dir=str(tmp_path / "s" / "store")))
    names = [Path(p).name for p in synced]
    assert {"train.bin", "val.bin", "tokenizer.json", "manifest.json"} <= set(names), names
    # the temporary folder before the swap, the parent after it: the last sync is the parent's
    assert any(".store.tmp-" in n for n in names) and Path(synced[-1]) == store.path.parent
