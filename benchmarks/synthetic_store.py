"""A synthetic token store in the trainer's format, written with numpy alone (the GPU check's data).

The GPU image has no ``datasets`` or ``pythonbible``, so the check cannot ``prepare`` a corpus.
This writes what ``cbscore.data.prepare`` would have left behind (``manifest.json``,
``tokenizer.json``, ``train.bin``, ``val.bin``; :mod:`cbscore.data.store`) for a stand-in source
file, so that ``prepare`` finds it up to date and the trainer reads it like any other store. Both
live in ``$CBS_HOME/data`` (a data root, :mod:`cbscore.data.roots`) unless told otherwise.

The tokens are a learnable stream in GPT-NeoX's padded vocabulary (50,304 ids): each token is the
previous one plus a uniform step of 1 … 16 (mod ``vocab_size − 1``), so the next-token loss falls
from ``ln V ≈ 10.8`` towards ``ln 16 ≈ 2.8``; the last id is the end-of-text token, every 1,024
tokens. The tokenizer file is a placeholder: nothing on the training path reads it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from cbscore.data import DataConfig, sources
from cbscore.data.store import FORMAT_VERSION, MANIFEST, TOKENIZER, _content_settings

#: GPT-NeoX-20B's 50,277 tokens padded to a multiple of 128, as the paper's models see them.
VOCAB_SIZE = 50_304
DOCUMENT_TOKENS = 1_024
MAX_STEP = 16


def synthetic_config(root: Path, vocab_size: int = VOCAB_SIZE) -> DataConfig:
    """The data settings of the synthetic store under ``root`` (``root/source.txt``, ``root/store``)."""
    return DataConfig(source=str(Path(root) / "source.txt"), tokenizer="bpe", vocab_size=vocab_size,
                      store_dir=str(Path(root) / "store"))


def tokens(n: int, vocab_size: int, seed: int) -> np.ndarray:
    """``n`` token ids (uint16 or uint32): a random walk of steps 1 … 16 and an EOT every 1,024."""
    rng = np.random.default_rng(seed)
    ids = np.cumsum(rng.integers(1, MAX_STEP + 1, size=n, dtype=np.int64)) % (vocab_size - 1)
    ids[DOCUMENT_TOKENS - 1::DOCUMENT_TOKENS] = vocab_size - 1  # end-of-text closes each document
    return ids.astype(np.uint16 if vocab_size <= 2**16 else np.uint32)


def write_store(root: Path | None = None, *, train_tokens: int, val_tokens: int, vocab_size: int = VOCAB_SIZE,
                seed: int = 0) -> DataConfig:
    """Write the store (unless one of these sizes is there) and return its ``DataConfig``;
    ``root`` defaults to ``$CBS_HOME/data/synthetic-<vocab_size>``."""
    if root is None:
        from cbscore.paths import subdir

        root = subdir("data") / f"synthetic-{vocab_size}"
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    config = synthetic_config(root, vocab_size)
    store = Path(config.store_dir)
    manifest_path = store / MANIFEST
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        if (manifest.get("splits", {}).get("train", {}).get("tokens") == train_tokens
                and manifest["splits"].get("val", {}).get("tokens") == val_tokens
                and manifest.get("source_fingerprint") == sources.fingerprint(config)):
            return config
    store.mkdir(parents=True, exist_ok=True)
    source = Path(config.source)
    if not source.is_file():
        source.write_text("A stand-in for the synthetic token store next to it (benchmarks/synthetic_store.py).\n")
    (store / TOKENIZER).write_text(json.dumps({"synthetic": True, "vocab_size": vocab_size}) + "\n")
    splits = {}
    for name, n, split_seed in (("train", train_tokens, seed), ("val", val_tokens, seed + 1)):
        ids = tokens(n, vocab_size, split_seed)
        ids.tofile(store / f"{name}.bin")
        splits[name] = {"file": f"{name}.bin", "documents": -(-n // DOCUMENT_TOKENS), "characters": 0, "tokens": n}
    manifest = {
        "format_version": FORMAT_VERSION,
        "source": config.source,
        "source_fingerprint": sources.fingerprint(config),
        "config": _content_settings(config),
        "tokenizer": config.tokenizer,
        "tokenizer_sha256": hashlib.sha256((store / TOKENIZER).read_bytes()).hexdigest(),
        "tokenizer_training": {"synthetic": True},
        "vocab_size": vocab_size,
        "eot_id": vocab_size - 1,
        "eot_token": "<|endoftext|>",
        "dtype": np.dtype(ids.dtype).name,
        "splits": splits,
        "documents": splits["train"]["documents"] + splits["val"]["documents"],
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"),
        "build_seconds": 0.0,
        "build_phase_seconds": {},
    }
    tmp = manifest_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, manifest_path)
    return config
