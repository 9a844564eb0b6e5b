"""Corpus sources: the built-in corpora, local files and streamed hub datasets.

Every source becomes the same thing: a ``datasets.Dataset`` with a ``text`` column and a ``group``
column (in memory for the built-in corpora and hub samples; memory-mapped Arrow files on disk for
local files, so a corpus larger than the machine's memory can be prepared) (documents of one group always land in the same split), plus a *fingerprint*
that changes when the source's content does, so a stale token store is rebuilt.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from cbscore.errors import DataError

from .config import DataConfig

#: Local file kinds and the ``datasets`` builder that reads them.
_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
#: Seconds to wait for the hub before saying it is unreachable.
HUB_PROBE_TIMEOUT_S = 3.0


def source_kind(source: str) -> str:
    if source in ("builtin", "builtin-large"):
        return source
    if source.startswith("hub:"):
        return "hub"
    return "local"


def fingerprint(config: DataConfig) -> dict:
    """What the source currently is; a store whose manifest holds another fingerprint is stale."""
    kind = source_kind(config.source)
    if kind == "builtin":
        import cbscore.data.builtin as builtin  # the module itself, not the package (no import cycle)

        return builtin.fingerprint()
    if kind == "builtin-large":
        import cbscore.data.builtin_large as builtin_large

        return builtin_large.fingerprint()
    if kind == "hub":
        name, hub_config = parse_hub_source(config.source)
        return {"kind": "hub", "name": name, "config": hub_config}
    files = local_files(config.source)
    return {
        "kind": "local",
        "files": [
            {"path": str(f), "bytes": f.stat().st_size, "mtime_ns": f.stat().st_mtime_ns}
            for f in files
        ],
    }


def load_documents(config: DataConfig, cache_dir: Path):
    """The source's documents as a ``datasets.Dataset`` with ``text`` and ``group``.

    Empty documents are dropped; ``max_documents`` keeps the first N. ``cache_dir`` receives any
    Arrow cache ``datasets`` writes (it lives in the build's temporary folder).
    """
    import datasets

    kind = source_kind(config.source)
    if kind == "builtin":
        import cbscore.data.builtin as builtin  # the module itself, not the package (no import cycle)

        rows = _take(builtin.documents(), config.max_documents)
        records = {"text": [r["text"] for r in rows], "group": [r["group"] for r in rows]}
    elif kind == "builtin-large":
        import cbscore.data.builtin_large as builtin_large

        rows = _take(builtin_large.documents(), config.max_documents)
        records = {"text": [r["text"] for r in rows], "group": [r["group"] for r in rows]}
    elif kind == "hub":
        records = _hub_documents(config)
    else:
        dataset = _local_documents(config, cache_dir)
        if len(dataset) == 0:
            raise DataError(
                f"The source {config.source!r} has no documents with text (empty corpus); "
                "give a source that holds text."
            )
        return dataset
    if not records["text"]:
        raise DataError(
            f"The source {config.source!r} has no documents with text (empty corpus); "
            "give a source that holds text."
        )
    return datasets.Dataset.from_dict(records)


def _take(rows, limit: int | None) -> list[dict]:
    out = []
    for row in rows:
        if limit is not None and len(out) >= limit:
            break
        out.append(row)
    return out


# ---- local files --------------------------------------------------------------------------------
def local_files(source: str) -> list[Path]:
    """The files a local source names (a file, or the supported files of a folder), sorted."""
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(
            f"The source {source!r} is not 'builtin', not 'hub:NAME' and no such file or folder "
            "exists; give 'builtin', a .txt/.jsonl/.parquet file or folder, or 'hub:NAME'."
        )
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    files = [f for f in files if f.suffix.lower() in _BUILDERS]
    from .roots import check_files_inside

    check_files_inside(files, source)  # a link inside a root must not lead out of it
    files = [f.resolve() for f in files]
    if not files:
        raise DataError(
            f"The source {source!r} holds no .txt, .jsonl, .json or .parquet file "
            f"(supported: {', '.join(sorted(_BUILDERS))})."
        )
    builders = {_BUILDERS[f.suffix.lower()] for f in files}
    if len(builders) > 1:
        raise DataError(
            f"The source {source!r} mixes file kinds ({', '.join(sorted(builders))}); "
            "use one kind per source."
        )
    return files


def _local_documents(config: DataConfig, cache_dir: Path):
    """Read local files with ``datasets.load_dataset``; ``.txt`` documents are blank-line separated.

    The result stays in Arrow files under ``cache_dir`` (memory-mapped): documents are stripped,
    blank ones dropped and numbered in batches, never gathered into Python lists, so preparing a
    corpus needs memory for a batch, not for the corpus.
    """
    import datasets

    files = local_files(config.source)
    builder = _BUILDERS[files[0].suffix.lower()]
    if builder != "parquet" and all(_blank(f) for f in files):
        return datasets.Dataset.from_dict({"text": [], "group": []})  # datasets refuses empty files
    kwargs = {"sample_by": "paragraph"} if builder == "text" else {}
    if builder != "parquet":
        kwargs["chunksize"] = 1 << 20  # bytes read per block (default 10 MiB), so memory stays small
    try:
        dataset = datasets.load_dataset(
            builder,
            data_files=[str(f) for f in files],
            split="train",
            cache_dir=str(cache_dir),
            **kwargs,
        )
    except Exception as exc:  # a malformed file: name it and the kind of error, never its content
        raise DataError(f"Could not read {config.source!r} as {builder} ({type(exc).__name__}); "
                        f"check that every file is valid {builder}.") from None  # no cause: a traceback would quote it
    field = "text" if builder == "text" else config.text_field
    if field not in dataset.column_names:  # the columns are not listed: they may say what the files hold
        raise DataError(
            f"text_field: the files of {config.source!r} have no column {field!r}; set data.text_field "
            f"to the column that holds the text, but got {field!r}."
        )
    dataset = dataset.select_columns([field])
    if field != "text":
        dataset = dataset.rename_column(field, "text")

    def clean(batch: dict) -> dict:
        return {"text": [t.strip() if isinstance(t, str) else "" for t in batch["text"]]}

    batch = {"batched": True, "batch_size": 256}
    dataset = dataset.map(clean, writer_batch_size=256, desc="reading documents", **batch)
    dataset = dataset.filter(lambda b: [bool(t) for t in b["text"]], writer_batch_size=256,
                             desc="dropping blank documents", **batch)
    if config.max_documents is not None and len(dataset) > config.max_documents:
        dataset = dataset.select(range(config.max_documents))
    return dataset.map(lambda b, idx: {"group": [str(i) for i in idx]}, with_indices=True, writer_batch_size=256,
                       desc="numbering documents", **batch)


def _blank(path: Path, chunk_bytes: int = 1 << 20) -> bool:
    """True when a text file holds only whitespace (stops at the first other byte)."""
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            if chunk.strip():
                return False
    return True


# ---- Hugging Face hub ---------------------------------------------------------------------------
def parse_hub_source(source: str) -> tuple[str, str | None]:
    """``hub:NAME[:CONFIG]`` -> (NAME, CONFIG or None)."""
    name, _, hub_config = source[len("hub:") :].partition(":")
    return name.strip(), (hub_config.strip() or None)


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or ``HF_DATASETS_OFFLINE``) asks for no network at all."""
    return any(
        os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
        for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


_SOURCE_ADVICE = "Use source 'builtin' or a local .txt/.jsonl/.parquet file instead."


def require_hub(what: str, advice: str = _SOURCE_ADVICE) -> None:
    """Fail in seconds, naming ``what``, when the hub cannot be reached (offline or no route).

    ``datasets`` and ``huggingface_hub`` retry for a long time on a dead network; a quick TCP
    probe of the endpoint first turns that into one clear error.
    """
    if hub_offline():
        raise DataError(
            f"{what} needs the Hugging Face hub, but HF_HUB_OFFLINE is set (no network). {advice}"
        )
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    error: list[BaseException] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=HUB_PROBE_TIMEOUT_S).close()
        except OSError as exc:
            error.append(exc)

    thread = threading.Thread(target=probe, daemon=True)  # bounds a hanging DNS lookup too
    thread.start()
    thread.join(HUB_PROBE_TIMEOUT_S + 1.0)
    if thread.is_alive() or error:
        reason = error[0] if error else "timed out"
        raise DataError(
            f"{what} needs the Hugging Face hub, but {endpoint} is unreachable ({reason}). {advice}"
        )


def _hub_documents(config: DataConfig) -> dict:
    """Stream the first ``max_documents`` documents of a hub dataset (nothing else is fetched)."""
    name, hub_config = parse_hub_source(config.source)
    what = f"The hub dataset {name!r}" + (f" (config {hub_config!r})" if hub_config else "")
    if Path(name).exists():  # load_dataset would read a local folder of that name (relative to here)
        from cbscore.errors import ConfigError

        raise ConfigError("data.source", config.source, "must name a hub dataset, not a folder of the worker's "
                                                        "working directory; give local corpora by path inside the data roots")
    require_hub(what)
    try:
        texts = stream_documents(name, hub_config, config.text_field, config.max_documents)
    except DataError:
        raise
    except Exception as exc:
        raise DataError(
            f"{what} could not be streamed: {exc}. "
            "Use source 'builtin' or a local .txt/.jsonl/.parquet file instead."
        ) from exc
    return {"text": texts, "group": [str(i) for i in range(len(texts))]}


def stream_documents(name: str, hub_config: str | None, text_field: str, limit: int) -> list[str]:
    """Take the first ``limit`` non-empty texts of ``load_dataset(name, streaming=True)``.

    ``name`` is a hub dataset (``allenai/c4`` with config ``en``) or anything else
    ``load_dataset`` streams, such as a local folder of ``.jsonl`` files.
    """
    import datasets

    texts: list[str] = []
    for row in datasets.load_dataset(name, hub_config, split="train", streaming=True):
        if text_field not in row:
            raise DataError(
                f"text_field: the dataset {name!r} has no field {text_field!r}; set data.text_field "
                f"to the field that holds the text, but got {text_field!r}."
            )
        text = row[text_field]
        if isinstance(text, str) and text.strip():
            texts.append(text.strip())
            if len(texts) >= limit:
                break
    return texts
