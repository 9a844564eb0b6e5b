"""prepare / open_store: the built-in corpus end to end, idempotence, rebuilds, atomic failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cbscore.data import DataConfig, open_store, prepare
from cbscore.data import builtin
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


def test_rebuilds_when_vocab_size_changes(tmp_path):
    folder = str(tmp_path / "store")
    first = prepare(DataConfig(max_documents=40, vocab_size=512, store_dir=folder))
    second = prepare(DataConfig(max_documents=40, vocab_size=300, store_dir=folder))
    assert second.built and second.vocab_size == 300 and first.vocab_size == 512
    assert second.manifest["tokenizer_sha256"] != first.manifest["tokenizer_sha256"]
    assert second.manifest["splits"]["train"]["tokens"] > first.manifest["splits"]["train"]["tokens"]
    assert open_store(DataConfig(max_documents=40, vocab_size=300, store_dir=folder)).vocab_size == 300
    with pytest.raises(DataError, match="other settings"):
        open_store(DataConfig(max_documents=40, vocab_size=512, store_dir=folder))
    assert _leftovers(tmp_path) == []


def test_rebuilds_when_a_local_source_changes(tmp_path):
    corpus = _write(tmp_path / "c.txt", "one fish\n\ntwo fish\n\nred fish\n\nblue fish\n")
    config = DataConfig(source=str(corpus), vocab_size=260, val_fraction=0.25, store_dir=str(tmp_path / "s"))
    first = prepare(config)
    assert first.manifest["documents"] == 4
    _write(corpus, "one fish\n\ntwo fish\n\nred fish\n\nblue fish\n\nold fish\n\nnew fish\n")
    second = prepare(config)
    assert second.built and second.manifest["documents"] == 6


def test_rebuilds_when_the_tokenizer_file_was_altered(builtin_slice_config, tmp_path):
    config = DataConfig(**{**builtin_slice_config.to_dict(), "store_dir": str(tmp_path / "s"), "max_documents": 20})
    store = prepare(config)
    (store.path / "tokenizer.json").write_text("{}")
    assert prepare(config).built is True


# ---- errors: clear, early, nothing half-written -------------------------------------------------
@pytest.mark.parametrize("source", ["no-such-corpus", "missing/file.txt"])
def test_unknown_source_or_missing_file_is_a_clear_error(tmp_path, monkeypatch, source):
    monkeypatch.chdir(tmp_path)  # a relative source resolves inside a data root (tmp): missing, not refused
    store_dir = tmp_path / "store"
    with pytest.raises(DataError, match=f"'{source}'.*no such file") as info:
        prepare(DataConfig(source=source, store_dir=str(store_dir)))
    assert "builtin" in str(info.value)
    assert not store_dir.exists() and list(tmp_path.iterdir()) == []


def test_unsupported_file_kind_is_a_clear_error(tmp_path):
    path = _write(tmp_path / "notes.md", "# hi")
    with pytest.raises(DataError, match=r"no \.txt, \.jsonl"):
        prepare(DataConfig(source=str(path), store_dir=str(tmp_path / "s")))


@pytest.mark.parametrize(("name", "content"), [("e.txt", "\n\n  \n"), ("e.jsonl", '{"text": ""}\n{"text": "  "}\n')])
def test_empty_corpus_is_a_clear_error_and_leaves_nothing(tmp_path, name, content):
    path = _write(tmp_path / name, content)
    store_dir = tmp_path / "store"
    with pytest.raises(DataError, match="empty corpus"):
        prepare(DataConfig(source=str(path), vocab_size=300, store_dir=str(store_dir)))
    assert not store_dir.exists()
    assert _leftovers(tmp_path) == []


def test_single_document_cannot_be_split(tmp_path):
    path = _write(tmp_path / "one.txt", "just one paragraph\n")
    with pytest.raises(DataError, match="at least 2"):
        prepare(DataConfig(source=str(path), vocab_size=300, store_dir=str(tmp_path / "s")))
    assert _leftovers(tmp_path) == []


def test_vocab_size_too_small_is_a_config_error():
    with pytest.raises(ConfigError, match=r"vocab_size: .*at least 257.*but got 100\.$"):
        DataConfig(vocab_size=100)


def test_failed_rebuild_keeps_the_previous_store(tmp_path):
    corpus = _write(tmp_path / "c.txt", "alpha beta\n\ngamma delta\n\nepsilon\n")
    config = DataConfig(source=str(corpus), vocab_size=260, val_fraction=0.3, store_dir=str(tmp_path / "s"))
    good = prepare(config)
    _write(corpus, "\n\n")  # the source changed into an empty corpus: the rebuild fails...
    with pytest.raises(DataError, match="empty corpus"):
        prepare(config)
    kept = open_store(config)  # ...and the last good store is still whole
    assert kept.manifest == good.manifest
    assert len(kept.tokens("train")) == good.manifest["splits"]["train"]["tokens"]
    assert _leftovers(tmp_path) == []


def test_open_store_before_prepare_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="not prepared"):
        open_store(DataConfig(store_dir=str(tmp_path / "nothing")))


# ---- concurrency --------------------------------------------------------------------------------
_WORKER = """
import json, sys, time
from cbscore.data import DataConfig, prepare
store = prepare(DataConfig.from_dict(json.loads(sys.argv[1])))
print(json.dumps({"built": store.built, "created": store.manifest["created"],
                  "sha": store.manifest["tokenizer_sha256"],
                  "inode": (store.path / "train.bin").stat().st_ino}))
"""


def test_two_processes_preparing_at_once_build_once(tmp_path):
    config = DataConfig(max_documents=150, vocab_size=600, store_dir=str(tmp_path / "store"))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, json.dumps(config.to_dict())],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        for _ in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["built"] for r in results) == [False, True]  # one built, the other waited
    assert results[0]["created"] == results[1]["created"]
    assert results[0]["inode"] == results[1]["inode"]
    assert _leftovers(tmp_path) == []


def test_a_relative_and_an_absolute_path_share_one_store(tmp_path, monkeypatch):
    _write(tmp_path / "c.txt", "one fish\n\ntwo fish\n\nred fish\n")
    monkeypatch.chdir(tmp_path)
    relative = DataConfig(source="c.txt", vocab_size=260, val_fraction=0.3)
    absolute = DataConfig(source=str(tmp_path / "c.txt"), vocab_size=260, val_fraction=0.3)
    assert prepare(relative).built is True
    again = prepare(absolute)
    assert again.built is False and again.path == relative.store_path()
    assert open_store(relative).manifest == open_store(absolute).manifest


# ---- where a store may live (issue 12, item 1) ----------------------------------------------------
def test_prepare_never_replaces_a_folder_that_is_not_a_store(tmp_path, monkeypatch):
    """A folder holding someone's files is refused, untouched, wherever it is."""
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CBS_DATA_ROOTS", str(tmp_path))
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("irreplaceable")
    with pytest.raises(ConfigError) as err:
        prepare(DataConfig(max_documents=20, vocab_size=260, store_dir=str(thesis)))
    assert err.value.field == "data.store_dir" and "thesis" in str(err.value)
    assert (thesis / "chapter1.tex").read_text() == "irreplaceable"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "thesis"]  # nothing built beside it


def test_store_folders_live_under_the_data_roots(tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CBS_DATA_ROOTS", raising=False)
    outside = tmp_path / "elsewhere" / "store"
    with pytest.raises(ConfigError, match="must be a folder inside the data roots"):
        check_store_location(outside)
    assert not outside.parent.exists()
    # The state directory and its own folders are never a store.
    for bad in (tmp_path / "home", tmp_path / "home" / "checkpoints", tmp_path):
        with pytest.raises(ConfigError):
            check_store_location(bad)
    check_store_location(tmp_path / "home" / "data" / "mine")  # new, under $CBS_HOME/data: fine
    monkeypatch.setenv("CBS_DATA_ROOTS", str(tmp_path / "elsewhere"))
    check_store_location(outside)  # the operator allowed that root


def test_an_existing_store_may_be_rebuilt_inside_the_roots_only(tmp_path, monkeypatch):
    """Issue 21, finding 7: a store outside the roots (another lab's) was renamed aside and deleted
    because ``is_store`` answered before the roots were checked."""
    monkeypatch.setenv("CBS_DATA_ROOTS", str(tmp_path))
    folder = str(tmp_path / "s")
    prepare(DataConfig(max_documents=20, vocab_size=260, store_dir=folder))
    rebuilt = prepare(DataConfig(max_documents=20, vocab_size=300, store_dir=folder))  # it holds a manifest
    assert rebuilt.built and rebuilt.vocab_size == 300
    manifest = (tmp_path / "s" / "manifest.json").read_text()
    monkeypatch.delenv("CBS_DATA_ROOTS")
    with pytest.raises(ConfigError, match="inside the data roots"):
        prepare(DataConfig(max_documents=20, vocab_size=260, store_dir=folder))
    assert (tmp_path / "s" / "manifest.json").read_text() == manifest  # untouched


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
    # a store that would need a rebuild says so, naming the path and what to do; nothing is written
    other = DataConfig(max_documents=40, vocab_size=260, store_dir=str(view / "store"))
    with pytest.raises(DataError, match=r"store.*cannot be written on this host.*cbs data prepare"):
        prepare(other)
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
