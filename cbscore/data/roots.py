"""Where a spec may point the lab's data: the data roots.

A study spec comes from a web page, so its ``data.source`` and ``data.store_dir`` are untrusted
paths on the server. A source must resolve (links followed) inside a *data root*:

* the store root, ``CBS_STORE_DIR`` or else ``$CBS_HOME/data`` — the token stores the lab builds
  (the default store location; :func:`cbscore.paths.store_root`);
* ``$CBS_HOME/corpora`` — the corpora the operator puts there for studies to read (created empty
  on first use; copy or link a ``.txt``/``.jsonl``/``.parquet`` file or folder into it and give
  its path as ``data.source``);
* every folder of ``CBS_DATA_ROOTS`` (``os.pathsep``-separated), an environment setting of the
  server, never a spec field, so a spec cannot widen it.

A ``data.store_dir`` is written, so it must lie strictly inside the lab's store folder (the store
root, or a folder of ``CBS_STORE_ROOTS``: :func:`store_roots`), never in a corpus root (issue 41,
finding 6).

``builtin``, ``builtin-large`` and ``hub:NAME`` sources are not paths; a hub name must look like one (``owner/name``,
letters, digits, ``.``, ``_``, ``-``), never a path such as ``hub:/etc``.

:func:`check_source` and :func:`check_store_dir` run at launch (``check_spec``) and again in the
worker before anything is read or written (``prepare``). Their messages name the field and the
value as given, and are the same whether or not the path exists: they reveal nothing about the
server's files outside the roots.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cbscore.errors import ConfigError

#: ``hub:NAME[:CONFIG]``: NAME is ``name`` or ``owner/name``; CONFIG a plain word.
HUB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
HUB_CONFIG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def data_roots() -> list[Path]:
    """The store root (``CBS_STORE_DIR``, else ``$CBS_HOME/data``), ``$CBS_HOME/corpora`` and the
    folders of ``CBS_DATA_ROOTS``, resolved."""
    from cbscore.paths import store_root, subdir

    roots = [store_root(), subdir("corpora")]
    for raw in (os.environ.get("CBS_DATA_ROOTS") or "").split(os.pathsep):
        if raw.strip():
            roots.append(Path(raw.strip()).expanduser().resolve())
    return roots


def _roots_text(roots: list[Path]) -> str:
    return ", ".join(map(str, roots))


def inside_roots(path: Path, roots: list[Path] | None = None, *, strictly: bool = False) -> bool:
    """Whether ``path`` (resolved, links followed) lies inside a data root (``strictly``: not a root itself)."""
    resolved = Path(path).expanduser().resolve()
    return any(resolved.is_relative_to(root) and not (strictly and resolved == root)
               for root in (roots if roots is not None else data_roots()))


def check_hub_name(source: str, field: str = "data.source") -> None:
    """A ``hub:NAME[:CONFIG]`` source whose NAME looks like a hub dataset, never a path."""
    name, _, config = source[len("hub:"):].partition(":")
    if not HUB_NAME_RE.fullmatch(name.strip()) or ".." in name or (config and not HUB_CONFIG_RE.fullmatch(config.strip())):
        raise ConfigError(field, source, "must be a hub dataset name like hub:owner/name or hub:owner/name:config "
                                         "(letters, digits, '.', '_', '-'), never a path")


def check_source(source: str, field: str = "data.source") -> None:
    """``builtin``, ``builtin-large``, a ``hub:`` name, or a path inside the data roots; a
    ConfigError otherwise. Nothing on disk is read but the resolution of the path itself (whether
    ``builtin-large``'s packages are installed is :func:`cbscore.data.store.check_data_location`'s)."""
    if source in ("builtin", "builtin-large"):
        return
    if source.startswith("hub:"):
        check_hub_name(source, field)
        return
    roots = data_roots()
    if not inside_roots(Path(source), roots):
        raise ConfigError(field, source, "must be 'builtin', 'builtin-large', 'hub:NAME' or a file or folder inside the data roots "
                                         f"({_roots_text(roots)}); the operator adds a root with CBS_DATA_ROOTS")


def check_files_inside(files: list[Path], source: str, field: str = "data.source") -> None:
    """Every file a local source names, resolved, inside the roots (a link inside a root folder
    must not lead out of it); the message names the source, never the file."""
    roots = data_roots()
    if any(not inside_roots(f, roots) for f in files):
        raise ConfigError(field, source, "holds a link that leads outside the data roots "
                                         f"({_roots_text(roots)}); copy the corpus into a root instead")


def store_roots() -> list[Path]:
    """Where a token store may be written, resolved: the lab's store folder (``CBS_STORE_DIR``, else
    ``$CBS_HOME/data``) and the folders of ``CBS_STORE_ROOTS`` (``os.pathsep``-separated; an
    environment setting of the server, e.g. a shared mount for stores, never a spec field). Never
    ``$CBS_HOME/corpora`` nor a folder of ``CBS_DATA_ROOTS``: a corpus root is read, not written."""
    from cbscore.paths import store_root

    roots = [store_root()]
    for raw in (os.environ.get("CBS_STORE_ROOTS") or "").split(os.pathsep):
        if raw.strip():
            roots.append(Path(raw.strip()).expanduser().resolve())
    return roots


def check_store_dir(path: Path, field: str = "data.store_dir") -> None:
    """A store folder strictly inside the lab's store folders (:func:`store_roots`; checked
    before anything looks inside it)."""
    roots = store_roots()
    if not inside_roots(Path(path), roots, strictly=True):
        raise ConfigError(field, str(path), f"must be a folder inside the lab's store folder ({_roots_text(roots)}: "
                                            "CBS_STORE_DIR, else $CBS_HOME/data), never elsewhere on the server; the "
                                            "operator adds a store folder with CBS_STORE_ROOTS")
