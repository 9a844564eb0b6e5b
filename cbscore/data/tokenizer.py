"""Tokenizers: a byte-level BPE trained on the training split, or one from the Hugging Face hub."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

from cbscore.errors import DataError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

#: Separates documents in the token stream.
EOT = "<|endoftext|>"
#: The BPE trains on at most this many characters (a seeded sample of training documents):
#: merges learnt from 8M characters of this corpus are as good as from all of it, at a third of
#: the time.
BPE_TRAIN_MAX_CHARS = 8_000_000


def train_bpe(
    texts: list[str], vocab_size: int, seed: int, progress: bool = False
) -> tuple[Tokenizer, dict]:
    """Train a byte-level BPE (GPT-2 style) on ``texts``; returns it and what it was trained on.

    When the texts exceed ``BPE_TRAIN_MAX_CHARS``, a seeded random sample of whole documents
    (up to that many characters) is used; the manifest records it.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    order = np.random.default_rng([seed, 1]).permutation(len(texts))
    sample, chars = [], 0
    for i in order:
        if chars >= BPE_TRAIN_MAX_CHARS:
            break
        sample.append(texts[i])
        chars += len(texts[i])
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=progress,
    )
    tokenizer.train_from_iterator(sample, trainer, length=len(sample))
    info = {
        "kind": "bpe",
        "trained_on_documents": len(sample),
        "trained_on_characters": chars,
        "sampled": len(sample) < len(texts),
        "max_characters": BPE_TRAIN_MAX_CHARS,
    }
    return tokenizer, info


def load_hub_tokenizer(name: str) -> tuple[Tokenizer, dict]:
    """Load ``name`` from the hub (or from the local HF cache when offline); fails in seconds."""
    from tokenizers import Tokenizer

    from .sources import hub_offline, require_hub

    what = f"The hub tokenizer {name!r}"
    advice = "Use tokenizer 'bpe' (trained on the corpus, no network) instead."
    if hub_offline():
        tokenizer = _cached_hub_tokenizer(name)
        if tokenizer is None:
            require_hub(what, advice)  # raises: offline and not in the local cache
    else:
        require_hub(what, advice)
        try:
            tokenizer = Tokenizer.from_pretrained(name)
        except Exception as exc:
            raise DataError(f"{what} could not be loaded: {exc}. {advice}") from exc
    if tokenizer.token_to_id(EOT) is None:
        tokenizer.add_special_tokens([EOT])
    return tokenizer, {"kind": "hub", "name": name}


def _cached_hub_tokenizer(name: str):
    from huggingface_hub import hf_hub_download
    from tokenizers import Tokenizer

    try:
        path = hf_hub_download(name, "tokenizer.json", local_files_only=True)
    except Exception:
        return None
    return Tokenizer.from_file(path)


def tokenizer_hash(tokenizer) -> str:
    """sha256 of the tokenizer's full JSON (vocabulary, merges, normalisers...)."""
    return hashlib.sha256(tokenizer.to_str().encode()).hexdigest()


def eot_id(tokenizer) -> int:
    token_id = tokenizer.token_to_id(EOT)
    if token_id is None:
        raise DataError(f"The tokenizer has no end-of-text token {EOT!r}.")
    return int(token_id)
