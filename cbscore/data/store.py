"""The token store: a corpus tokenized once into one flat memmap per split, with a JSON manifest.

Layout of a store folder::

    manifest.json     source + fingerprint, tokenizer + sha256, counts per split, creation time,
                      a sha256 per 16 MiB shard of every file (``checksums``, :mod:`.checksums`)
    tokenizer.json    the tokenizer (``tokenizers.Tokenizer.from_file``)
    train.bin         flat uint16 (vocab <= 65536) or uint32 token ids, documents separated by EOT
    val.bin           the held-out documents, same format

``prepare`` builds into a temporary sibling folder and renames it into place, under an exclusive
``fcntl.flock`` on a sibling lock file: concurrent callers wait, then reuse the finished store;
an error at any point leaves the previous store (or nothing) and no half-written files.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import itertools
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import numpy as np

import cbscore.data.checksums as checksums  # the module, not the package (no import cycle)
import cbscore.data.sources as sources  # the module, not the package (no import cycle)
from cbscore.errors import ConfigError, DataError
from cbscore.paths import fsync_file, fsync_folder

from .config import DataConfig, _normalised_source
from .roots import check_source, check_store_dir
from .stream import WindowStream
from .tokenizer import eot_id, load_hub_tokenizer, train_bpe

#: Bump when the store's layout or content rules change: older stores are rebuilt.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"
_ENCODE_BATCH = 256


class TokenStore:
    """A prepared token store on disk (read-only)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        manifest_path = self.path / MANIFEST
        if not manifest_path.is_file():
            raise DataError(f"No token store at {self.path} (no {MANIFEST}); run prepare first.")
        self.manifest: dict = json.loads(manifest_path.read_text())
        self.vocab_size: int = int(self.manifest["vocab_size"])
        self.eot_id: int = int(self.manifest["eot_id"])
        self._tokens: dict[str, np.ndarray] = {}
        #: True when the ``prepare`` call that returned this store built it (False: reused).
        self.built = False

    def tokenizer(self):
        """The store's tokenizer (a ``tokenizers.Tokenizer``)."""
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(self.path / TOKENIZER))

    def tokens(self, split: str) -> np.ndarray:
        """The flat token ids of ``split`` (``train`` or ``val``) as a read-only memmap."""
        if split not in ("train", "val"):
            raise DataError(f"split must be 'train' or 'val', but got {split!r}.")
        if split not in self._tokens:
            info = self.manifest["splits"][split]
            self._tokens[split] = np.memmap(
                self.path / info["file"], dtype=self.manifest["dtype"], mode="r", shape=(info["tokens"],)
            )
        return self._tokens[split]

    def train_stream(self, context_tokens: int, seed: int, allow_repeat: bool = False) -> WindowStream:
        """Seeded windows of ``context_tokens + 1`` training tokens (see ``WindowStream``)."""
        return WindowStream(self.tokens("train"), context_tokens, seed, allow_repeat)

    def val_windows(self, context_tokens: int, max_windows: int | None = None) -> np.ndarray:
        """A fixed set of held-out windows: int64 (K, context_tokens + 1).

        The validation tokens are cut into non-overlapping windows of ``T + 1``; all of them, or
        ``max_windows`` of them evenly spaced through the split (so they span many documents).
        """
        if not _is_int(context_tokens) or context_tokens < 1:
            raise DataError(f"context_tokens must be a positive integer, but got {context_tokens!r}.")
        context_tokens = int(context_tokens)
        if max_windows is not None and (not _is_int(max_windows) or max_windows < 1):
            raise DataError(f"max_windows must be a positive integer or None, but got {max_windows!r}.")
        tokens = self.tokens("val")
        width = context_tokens + 1
        n = len(tokens) // width
        if n == 0:
            raise DataError(
                f"The validation split holds {len(tokens)} tokens, fewer than one window of "
                f"context_tokens + 1 = {width}; use a shorter context, a larger corpus or a larger "
                f"val_fraction, but got context_tokens={context_tokens}."
            )
        grid = tokens[: n * width].reshape(n, width)
        if max_windows is None or max_windows >= n:
            rows = np.arange(n)
        else:
            rows = np.unique(np.linspace(0, n - 1, max_windows).round().astype(np.int64))
        return np.asarray(grid[rows], dtype=np.int64)  # (K, T + 1)

    def __repr__(self) -> str:
        splits = self.manifest["splits"]
        return (
            f"TokenStore({str(self.path)!r}, source={self.manifest['source']!r}, "
            f"vocab_size={self.vocab_size}, train_tokens={splits['train']['tokens']}, "
            f"val_tokens={splits['val']['tokens']})"
        )


# ---- public entry points ------------------------------------------------------------------------
def open_store(config: DataConfig) -> TokenStore:
    """The prepared store of ``config``; ``DataError`` when it has not been prepared."""
    path = config.store_path()
    if not (path / MANIFEST).is_file():
        raise DataError(
            f"The token store for source {config.source!r} (tokenizer {config.tokenizer!r}, "
            f"vocab_size {config.vocab_size}) is not prepared at {path}; run "
            "`cbs data prepare` or cbscore.data.prepare(config) first."
        )
    store = TokenStore(path)
    if store.manifest.get("config") != _content_settings(config):
        raise DataError(
            f"The token store at {path} was prepared with other settings "
            f"({store.manifest.get('config')}); run prepare with these settings to rebuild it."
        )
    return store


def prepare(config: DataConfig, progress: bool = False) -> TokenStore:
    """Build the token store of ``config`` unless an up-to-date one exists; return it.

    Idempotent: a store whose manifest matches these settings, the source's fingerprint and its
    own tokenizer file is reused untouched. Otherwise it is rebuilt (atomically).
    """
    path = config.store_path()
    check_data_location(config)  # before anything else: the source is walked, a rebuild replaces the folder
    fingerprint = sources.fingerprint(config)  # fails fast (missing file) before touching disk
    # An up-to-date store is reused without writing anything, not even the lock file: a host may
    # mount the shared store folder read-only (docs/operating.md, "Scaling out"). A store being swapped in
    # meanwhile is either whole or absent here (renames), and absent falls through to the lock.
    if _up_to_date(path, config, fingerprint) and _intact(path):
        return TokenStore(path)
    with _build_lock(config, path):
        if _up_to_date(path, config, fingerprint) and _intact(path, warn=True):
            return TokenStore(path)
        check_store_content(config)  # again under the lock: another prepare may have built there meanwhile
        tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            _build(config, fingerprint, tmp, progress)
            _swap_into_place(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    store = TokenStore(path)
    store.built = True
    return store


def is_store(path: Path) -> bool:
    """True when ``path`` holds a CBS token-store manifest (a folder ``prepare`` may replace)."""
    try:
        manifest = json.loads((Path(path) / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and "format_version" in manifest and "splits" in manifest


def content_digest(path: Path) -> str:
    """A short hash of what the store at ``path`` holds: its manifest without when and how fast it
    was built, so two hosts that prepare one config from one source get one digest, and a store
    rebuilt from another source (or with another tokenizer) gets another. (The token files are
    not read: their counts and the tokenizer's sha256 stand for them.)"""
    manifest = json.loads((Path(path) / MANIFEST).read_text())
    content = {key: manifest.get(key) for key in _CONTENT_KEYS}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


#: The manifest's fields that say what a store holds (not when or how fast it was built).
_CONTENT_KEYS = ("format_version", "source_fingerprint", "config", "tokenizer", "tokenizer_sha256", "vocab_size",
                 "eot_id", "dtype", "splits")


def reuse_problem(config: DataConfig) -> str | None:
    """Why :func:`prepare` would not reuse the store at ``config.store_path()`` as it is on this
    host, in a few words: none there, damaged (a file cut short, or content that differs from its
    checksums: :func:`damage`), not what this host builds from its source (another version of the
    corpus, other settings), or a source it cannot read; ``None`` when it would reuse it untouched.
    Nothing is written but this host's verification stamp (:func:`checksums.verified`)."""
    path = config.store_path()
    if not (path / MANIFEST).is_file():
        return "there is none there"
    hurt = damage(path)
    if hurt is not None:
        return hurt
    try:
        fingerprint = sources.fingerprint(config)
    except (DataError, OSError) as exc:
        return f"its source {config.source!r} cannot be read here: {exc}"
    if not _up_to_date(path, config, fingerprint):
        return (f"it is not what this host builds from its source {config.source!r}: another version of the "
                "corpus or other settings")
    return None


#: How :func:`damage` (and so :func:`reuse_problem`) begins its answer for a damaged store.
DAMAGED = "it is damaged"


def damage(path: Path) -> str | None:
    """What is wrong with the files of the store at ``path`` against its own manifest: a file
    missing or not the size the manifest says (a copy cut short), the tokenizer's sha256, or a
    shard whose content differs from its checksum (verified once per host: :func:`checksums.verified`).
    ``None`` when whole (a store without checksums is whole as far as its sizes go)."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        itemsize = np.dtype(manifest["dtype"]).itemsize
        for info in manifest["splits"].values():
            size = (path / info["file"]).stat().st_size
            if size != info["tokens"] * itemsize:
                return (f"{DAMAGED}: {info['file']} holds {size} bytes, its manifest "
                        f"{info['tokens'] * itemsize} (cut short or grown)")
        if _file_sha256(path / TOKENIZER) != manifest.get("tokenizer_sha256"):
            return f"{DAMAGED}: {TOKENIZER} is not the one its manifest names"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{DAMAGED}: {type(exc).__name__}: {exc}"
    check = checksums.verified(path)
    if not check.ok:
        shown = "; ".join(check.damaged[:3]) + (f" and {len(check.damaged) - 3} more" if len(check.damaged) > 3 else "")
        return f"{DAMAGED}: its content differs from its checksums in {shown}"
    return None


def prepare_command(config: DataConfig) -> str:
    """The ``cbs data prepare`` command line that builds (or rebuilds) the store of ``config``."""
    default = DataConfig()
    args = ["cbs data prepare"]
    for name, flag in (("source", "--source"), ("tokenizer", "--tokenizer"), ("vocab_size", "--vocab-size"),
                       ("val_fraction", "--val-fraction"), ("seed", "--seed"), ("text_field", "--text-field"),
                       ("max_documents", "--max-documents"), ("store_dir", "--store-dir")):
        value = getattr(config, name)
        if value != getattr(default, name) or name == "vocab_size":
            args.append(f"{flag} {value}")
    return " ".join(args)


def _intact(path: Path, warn: bool = False) -> bool:
    """Whether the store at ``path`` is whole (:func:`damage`); a damaged one is rebuilt by
    :func:`prepare`, and with ``warn`` the log says which and why."""
    hurt = damage(path)
    if hurt is not None and warn:
        import logging

        logging.getLogger(__name__).warning("token store at %s: %s; rebuilding it", path, hurt)
    return hurt is None


def check_store_location(path: Path) -> None:
    """Refuse a store folder that ``prepare`` could destroy something in (a ``ConfigError`` on
    ``data.store_dir``).

    The folder must lie strictly inside a data root (:func:`cbscore.data.roots.data_roots`),
    checked first: nothing looks inside a folder outside the roots, not even for a manifest (a
    store of another lab elsewhere on the host is never replaced). A rebuild renames the existing
    folder aside and deletes it, so an existing folder is only ever replaced when it holds a CBS
    manifest; the state directory's own folders (``checkpoints``, ``broker``...), the store root
    itself and the checkpoint root (``CBS_CHECKPOINT_DIR``) are never a store.
    """
    from cbscore.paths import cbs_home, checkpoint_root, store_root

    path = Path(path).expanduser().resolve()
    check_store_dir(path)
    if is_store(path):
        return
    home, stores, checkpoints = cbs_home(), store_root(), checkpoint_root()
    if path == home or home.is_relative_to(path):
        raise ConfigError("data.store_dir", str(path), "is the state directory $CBS_HOME or holds it; "
                          "pick a folder of its own")
    if path == stores:
        raise ConfigError("data.store_dir", str(path), "is the folder of all token stores (CBS_STORE_DIR, else "
                          "$CBS_HOME/data); pick a folder inside it")
    if path.is_relative_to(checkpoints) or checkpoints.is_relative_to(path):
        raise ConfigError("data.store_dir", str(path), f"is or holds the trials' checkpoints ({checkpoints}, "
                          "CBS_CHECKPOINT_DIR); pick a folder of its own")
    if path.is_relative_to(home) and not path.is_relative_to(stores):
        raise ConfigError("data.store_dir", str(path), f"is inside {home} but not under its store folder; "
                          f"stores live in {stores}")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConfigError("data.store_dir", str(path), "exists and is not a CBS token store (no manifest.json); "
                          "preparing a store replaces its folder, so it must be new, empty or a store")


def check_data_location(config: DataConfig) -> None:
    """``data.source`` and the store folder inside the data roots (:mod:`cbscore.data.roots`),
    before anything is read: at launch, and in the worker by :func:`prepare`; ``builtin-large``
    without its optional packages is refused here too, by name."""
    check_source(config.source)
    if config.source == "builtin-large":
        from .builtin_large import require_packages

        require_packages()
    check_store_location(config.store_path())
    check_store_content(config)


#: The name of a default store folder: :meth:`DataConfig.key`, 16 hex digits of its settings' hash.
_DEFAULT_NAME = re.compile(r"[0-9a-f]{16}")


def check_store_content(config: DataConfig) -> None:
    """Refuse a ``data.store_dir`` that holds a store of other settings (a ``ConfigError``).

    Every store is made for one set of content settings (the default folder is named by their hash,
    :meth:`DataConfig.key`); preparing a store of other settings in its folder would replace it
    under the studies that read it (their trials then fail). So a named folder that holds a store
    is only ever reused or rebuilt for the same settings, never taken over by others; and a named
    folder never takes the name of other settings' default folder (16 hex digits, their
    :meth:`~DataConfig.key`), so a study cannot claim that folder before its own study prepares it."""
    if config.store_dir is None:
        return
    name = config.store_path().name
    if _DEFAULT_NAME.fullmatch(name) and name != config.key():  # another settings' default folder, made or not
        raise ConfigError("data.store_dir", config.store_dir,
                          f"is named as the default store of other settings ({name}, their hash; these settings' is "
                          f"{config.key()}); name a folder of your own, or leave data.store_dir out")
    if not is_store(config.store_path()):
        return
    held = json.loads((config.store_path() / MANIFEST).read_text()).get("config")
    if held != _content_settings(config):
        raise ConfigError("data.store_dir", config.store_dir,
                          "holds a token store prepared with other settings, which other studies may read; a store "
                          "is never replaced by one of other settings: name a new folder, or leave data.store_dir "
                          "out (each settings' store then gets a folder of its own)")


# ---- building -----------------------------------------------------------------------------------
def _build(config: DataConfig, fingerprint: dict, tmp: Path, progress: bool) -> None:
    import datasets

    started = time.perf_counter()
    tmp.mkdir(parents=True)
    bars_were_on = datasets.is_progress_bar_enabled()
    (datasets.enable_progress_bars if progress else datasets.disable_progress_bars)()
    try:
        tokenizer, tokenizer_info = (None, None)
        if not config.uses_bpe:  # a hub tokenizer fails fast, before the corpus is read
            tokenizer, tokenizer_info = load_hub_tokenizer(config.hub_tokenizer)
        seconds = {}
        mark = time.perf_counter()
        docs = sources.load_documents(config, tmp / "hf-cache")
        train_idx, val_idx = _split(docs["group"], config)
        train_docs, val_docs = docs.select(train_idx), docs.select(val_idx)
        seconds["read"], mark = time.perf_counter() - mark, time.perf_counter()
        if tokenizer is None:
            tokenizer, tokenizer_info = train_bpe(
                _TextColumn(train_docs), config.vocab_size, config.seed, progress=progress
            )
        seconds["tokenizer"], mark = time.perf_counter() - mark, time.perf_counter()
        tokenizer.save(str(tmp / TOKENIZER))
        fsync_file(tmp / TOKENIZER)
        vocab_size = tokenizer.get_vocab_size()
        dtype = np.uint16 if vocab_size <= 2**16 else np.uint32
        eot = eot_id(tokenizer)
        splits = {}
        for name, split_docs in (("train", train_docs), ("val", val_docs)):
            n_tokens, n_chars = _write_split(split_docs, tokenizer, eot, dtype, tmp / f"{name}.bin", name, progress)
            splits[name] = {
                "file": f"{name}.bin",
                "documents": len(split_docs),
                "characters": n_chars,
                "tokens": n_tokens,
            }
        seconds["tokenize_and_write"] = time.perf_counter() - mark
        del docs, train_docs, val_docs
        shutil.rmtree(tmp / "hf-cache", ignore_errors=True)
        manifest = {
            "format_version": FORMAT_VERSION,
            "source": config.source,
            "source_fingerprint": fingerprint,
            "config": _content_settings(config),
            "tokenizer": config.tokenizer,
            "tokenizer_sha256": _file_sha256(tmp / TOKENIZER),
            "tokenizer_training": tokenizer_info,
            "vocab_size": vocab_size,
            "eot_id": eot,
            "eot_token": "<|endoftext|>",
            "dtype": np.dtype(dtype).name,
            "splits": splits,
            "documents": splits["train"]["documents"] + splits["val"]["documents"],
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"),
            "build_seconds": round(time.perf_counter() - started, 2),
            "build_phase_seconds": {k: round(v, 2) for k, v in seconds.items()},
        }
        manifest["checksums"] = checksums.compute(tmp)  # the files just written, still in the page cache
        _write_json(tmp / MANIFEST, manifest)
    finally:
        (datasets.enable_progress_bars if bars_were_on else datasets.disable_progress_bars)()


def _split(groups: list[str], config: DataConfig) -> tuple[list[int], list[int]]:
    """Seeded document-level split: whole groups go to validation, never trained on."""
    unique = list(dict.fromkeys(groups))  # first-appearance order: deterministic
    if len(unique) < 2:
        raise DataError(
            f"The source {config.source!r} has {len(unique)} document(s); a train/validation "
            "split needs at least 2."
        )
    n_val = min(len(unique) - 1, max(1, round(config.val_fraction * len(unique))))
    chosen = np.random.default_rng([config.seed, 0]).choice(len(unique), size=n_val, replace=False)
    val_groups = {unique[i] for i in chosen}
    train_idx = [i for i, g in enumerate(groups) if g not in val_groups]
    val_idx = [i for i, g in enumerate(groups) if g in val_groups]
    return train_idx, val_idx


class _TextColumn:
    """``dataset["text"]`` read document by document (``len`` and ``[i]``), for a dataset kept on
    disk: the BPE trainer samples documents from it without loading the column."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> str:
        return self.dataset[int(i)]["text"]


def _write_split(docs, tokenizer, eot: int, dtype, path: Path, name: str, progress: bool) -> tuple[int, int]:
    """Tokenize ``docs`` batch by batch and append each document's ids and an EOT to ``path``;
    returns (tokens written, characters read). Memory: one batch, whatever the corpus size."""
    from tqdm.auto import tqdm

    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    total = chars = 0
    with open(path, "wb") as out, tqdm(total=len(docs), desc=f"tokenizing {name}", unit="doc",
                                       disable=not progress) as bar:
        for batch in docs.iter(batch_size=_ENCODE_BATCH):
            texts = batch["text"]
            chars += sum(len(t) for t in texts)
            ids = [e.ids for e in encode(texts)]
            n = sum(len(x) for x in ids) + len(ids)  # + one EOT per document
            block = np.fromiter(itertools.chain.from_iterable(x + [eot] for x in ids), dtype=dtype, count=n)
            out.write(block.tobytes())
            total += n
            bar.update(len(texts))
        out.flush()
        os.fsync(out.fileno())  # another host reads this file over NFS once the store is swapped in
    return total, chars


# ---- idempotence, atomicity, locking ------------------------------------------------------------
def _content_settings(config: DataConfig) -> dict:
    """The settings that decide a store's content (everything but where it lives)."""
    settings = config.to_dict()
    settings.pop("store_dir")
    settings["source"] = _normalised_source(config.source)
    if not config.uses_bpe:
        settings["vocab_size"] = None  # the hub tokenizer decides
    settings["val_fraction"] = float(settings["val_fraction"])
    return settings


def _up_to_date(path: Path, config: DataConfig, fingerprint: dict) -> bool:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if (
        manifest.get("format_version") != FORMAT_VERSION
        or manifest.get("config") != _content_settings(config)
        or manifest.get("source_fingerprint") != fingerprint
    ):
        return False
    try:
        if _file_sha256(path / TOKENIZER) != manifest.get("tokenizer_sha256"):
            return False
        itemsize = np.dtype(manifest["dtype"]).itemsize
        return all(
            (path / info["file"]).stat().st_size == info["tokens"] * itemsize
            for info in manifest["splits"].values()
        )
    except (OSError, KeyError, TypeError):
        return False


def _swap_into_place(tmp: Path, path: Path) -> None:
    """Replace ``path`` by ``tmp`` with renames (readers of the old files keep their inodes).

    Every file in ``tmp`` is already synced (:func:`_write_split`, :func:`_write_json`); syncing
    ``tmp`` makes their names durable, and syncing the parent after the rename makes the swap
    durable, so a crash (or an NFS client's) leaves the old store or the new one, never a folder
    whose manifest names files that never reached the disk."""
    fsync_folder(tmp)
    if path.exists():
        old = path.parent / f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(path, old)
        os.rename(tmp, path)
        fsync_folder(path.parent)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)
        fsync_folder(path.parent)


@contextlib.contextmanager
def _build_lock(config: DataConfig, path: Path):
    """The store's build lock beside its folder; a folder this host cannot write (a read-only
    mount of the shared stores) is a ``DataError`` that says where to prepare it instead."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = _exclusive_lock(path.parent / f".{path.name}.lock")
        lock.__enter__()
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise DataError(
            f"The token store for source {config.source!r} at {path} is missing or not up to date, and its "
            f"folder cannot be written on this host ({exc.strerror}): prepare it where the folder is writable "
            "(`cbs data prepare`), or point CBS_STORE_DIR / data.store_dir at a writable folder."
        ) from exc
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path):
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # blocks while another process builds
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_json(path: Path, data: dict) -> None:
    with open(path, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=False)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
