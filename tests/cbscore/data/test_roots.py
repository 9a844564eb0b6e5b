"""``data.source`` and ``data.store_dir`` resolve inside the data roots or are refused by name,
before anything is read, with one message whether or not the path exists (issue 21, findings 2, 7)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cbscore.data import DataConfig, prepare
from cbscore.data.roots import check_source, check_store_dir, data_roots
from cbscore.errors import ConfigError


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A private $CBS_HOME with the default roots only (no CBS_DATA_ROOTS, no CBS_STORE_ROOTS)."""
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CBS_DATA_ROOTS", raising=False)
    monkeypatch.delenv("CBS_STORE_ROOTS", raising=False)
    monkeypatch.delenv("CBS_STORE_DIR", raising=False)
    return tmp_path / "home"


def refused(source: str) -> ConfigError:
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        check_source(source)
    assert time.perf_counter() - start < 1.0 and err.value.field == "data.source"
    return err.value


def test_the_default_roots_are_the_stores_and_the_corpora_folder(home):
    assert data_roots() == [home.resolve() / "data", home.resolve() / "corpora"]
    assert (home / "corpora").is_dir()  # created empty, for the operator to fill


@pytest.mark.parametrize("source", ["/", "/etc/passwd", "/root", "~", "../../etc", "hub:/etc", "hub:../x",
                                    "hub:~/secrets", "hub:a/b/c", "hub:allenai/c4:../en"])
def test_server_paths_and_path_like_hub_names_are_refused(home, source):
    assert refused(source).value == source


def test_the_refusal_is_the_same_whether_or_not_the_path_exists(home, tmp_path):
    (tmp_path / "real").mkdir()
    here, absent = refused(str(tmp_path / "real")), refused(str(tmp_path / "absent"))
    assert here.reason == absent.reason


def test_a_link_out_of_a_root_is_refused_before_it_is_read(home, tmp_path):
    (home / "corpora").mkdir(parents=True, exist_ok=True)
    os.symlink("/etc", home / "corpora" / "etc")
    refused(str(home / "corpora" / "etc"))
    folder = home / "corpora" / "mixed"
    folder.mkdir()
    (folder / "a.txt").write_text("a paragraph\n\nanother\n")
    os.symlink("/etc/hostname", folder / "b.txt")  # a file link inside a root folder
    with pytest.raises(ConfigError, match="holds a link that leads outside the data roots") as err:
        prepare(DataConfig(source=str(folder), vocab_size=260))
    assert "hostname" not in str(err.value)


def test_builtin_hub_names_and_corpora_inside_the_roots_are_accepted(home):
    for source in ("builtin", "hub:allenai/c4:en", "hub:wikitext", str(home / "corpora" / "mine.txt")):
        check_source(source)
    check_store_dir(home / "data" / "mine")


def test_prepare_checks_the_roots_before_walking_anything(home, monkeypatch):
    """The worker's own check (``prepare``), before the source is fingerprinted (``rglob``)."""
    def walked(*_a, **_k):
        raise AssertionError("the source was walked")

    monkeypatch.setattr(Path, "rglob", walked)
    monkeypatch.setattr("cbscore.data.sources.fingerprint", walked)
    with pytest.raises(ConfigError) as err:
        prepare(DataConfig(source="/", vocab_size=260))
    assert err.value.field == "data.source"


def test_a_store_outside_the_roots_is_refused_before_its_manifest_is_read(home, tmp_path, monkeypatch):
    other = tmp_path / "other-lab" / "store"
    other.mkdir(parents=True)
    (other / "manifest.json").write_text('{"format_version": 1, "splits": {}}')  # looks like a store
    monkeypatch.setattr("cbscore.data.store.is_store", lambda p: pytest.fail("looked inside"))
    with pytest.raises(ConfigError) as err:
        prepare(DataConfig(vocab_size=260, store_dir=str(other)))
    assert err.value.field == "data.store_dir"
    assert (other / "manifest.json").exists()


def test_a_hub_name_that_is_a_local_folder_is_not_read(home, tmp_path, monkeypatch):
    """``datasets.load_dataset("owner/name")`` reads a local folder of that name first."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team" / "secrets").mkdir(parents=True)
    (tmp_path / "team" / "secrets" / "a.txt").write_text("do not read\n\nme\n")
    with pytest.raises(ConfigError, match="not a folder of the worker's working directory"):
        prepare(DataConfig(source="hub:team/secrets", max_documents=10, vocab_size=260))
