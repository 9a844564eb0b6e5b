"""Shared data fixtures (a pytest plugin, loaded by ``tests/conftest.py``).

``builtin_store``: the built-in corpus prepared once per test session with the default settings
(8192-token BPE) into the session's ``CBS_HOME``; later sessions reuse it (``prepare`` is a no-op
when the store is up to date). ``builtin_slice_store``: a small fixed slice of the same corpus
(first 120 chapters, 1024-token BPE) for tests that want a fast, private build.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def builtin_store():
    """The default built-in token store (``DataConfig()``), a ``cbscore.data.TokenStore``."""
    from cbscore.data import DataConfig, prepare

    return prepare(DataConfig())


@pytest.fixture(scope="session")
def builtin_slice_config(tmp_path_factory):
    """Settings of a small, fixed slice of the built-in corpus in a private folder."""
    from cbscore.data import DataConfig

    folder = tmp_path_factory.mktemp("builtin-slice") / "store"
    return DataConfig(vocab_size=1024, max_documents=120, val_fraction=0.1, store_dir=str(folder))


@pytest.fixture(scope="session")
def builtin_slice_store(builtin_slice_config):
    """The prepared slice (about 130k tokens; builds in a couple of seconds)."""
    from cbscore.data import prepare

    return prepare(builtin_slice_config)
