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
    """Load the hub tokenizer ``name`` (``DataConfig.hub_tokenizer``): its ``tokenizer.json``
    through ``huggingface_hub`` into the local HF cache (``HF_HOME``), then
    ``tokenizers.Tokenizer.from_file``. Offline (``HF_HUB_OFFLINE=1``) only that cache is read.

    Called only when a token store is built, never when a config is checked; offline and not
    cached, or with the hub unreachable, it fails in seconds with a message that names the
    ``tokenizer`` field and its value.
    """
    from .sources import hub_offline, require_hub

    what = f"tokenizer: the hub tokenizer {name!r}"
    advice = (
        "Prepare the data once where the hub is reachable (the tokenizer then stays in the local "
        "HF cache, HF_HOME, and is read from there offline), or use tokenizer 'bpe' (trained on "
        "the corpus, no network) instead."
    )
    tokenizer = _hub_tokenizer(name, local_only=True) if hub_offline() else None
    if tokenizer is None:
        require_hub(what, advice)  # raises when offline or unreachable
        try:
            tokenizer = _hub_tokenizer(name, local_only=False)
        except Exception as exc:
            raise DataError(f"{what} could not be loaded: {exc}. {advice}") from exc
    if tokenizer.token_to_id(EOT) is None:
        tokenizer.add_special_tokens([EOT])
    return tokenizer, {"kind": "hub", "name": name}


def _hub_tokenizer(name: str, *, local_only: bool) -> Tokenizer | None:
    """``tokenizer.json`` of the hub repo ``name``; with ``local_only``, ``None`` when not cached.

    One download path for both, so a tokenizer fetched once online is exactly the file the
    offline lookup finds.
    """
    from huggingface_hub import hf_hub_download
    from tokenizers import Tokenizer

    try:
        path = hf_hub_download(name, "tokenizer.json", local_files_only=local_only)
    except Exception:
        if local_only:
            return None
        raise
    return Tokenizer.from_file(path)


def tokenizer_hash(tokenizer) -> str:
    """sha256 of the tokenizer's full JSON (vocabulary, merges, normalisers...)."""
    return hashlib.sha256(tokenizer.to_str().encode()).hexdigest()


def eot_id(tokenizer) -> int:
    token_id = tokenizer.token_to_id(EOT)
    if token_id is None:
        raise DataError(f"The tokenizer has no end-of-text token {EOT!r}.")
    return int(token_id)
