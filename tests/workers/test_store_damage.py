"""A damaged token store under a pinned study (issue 42, findings 6 and 9): cut short, or 1 MiB
zeroed in place, the attempt's store check names the store and the command that rebuilds it on
this host (``cbs data prepare``), not a missing mount; the rebuilt store is the pinned one again."""

from __future__ import annotations

import os
import time

import pytest

from cbscore.data import DataConfig, checksums, prepare
from cbscore.data.store import content_digest, prepare_command
from workers.studies.ledger import StorePin
from workers.studies.stores import StoreUnavailable, check_pinned


@pytest.fixture
def pinned(tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CBS_STORE_DIR", str(tmp_path / "stores"))
    checksums._seen.clear()
    config = DataConfig(max_documents=400, vocab_size=320, val_fraction=0.1)
    store = prepare(config)
    pin = StorePin(study="s", path=str(store.path), digest=content_digest(store.path), host="h@x", pinned_s=time.time())
    check_pinned(pin, config)  # whole: no complaint
    return config, store.path, pin


def test_a_truncated_store_is_to_be_rebuilt_with_cbs_data_prepare(pinned):
    config, path, pin = pinned
    os.truncate(path / "train.bin", (path / "train.bin").stat().st_size - 4096)
    with pytest.raises(StoreUnavailable) as raised:
        check_pinned(pin, config)
    message = str(raised.value)
    assert message.startswith(f"this host cannot use the token store at {path}: rebuild it with "
                              f"`{prepare_command(config)}` (it is damaged: train.bin holds")
    assert "CBS_STORE_DIR" not in message.split("(")[0]  # not the advice for a missing mount
    prepare(config)  # the command's work: the same content, so the pinned digest
    check_pinned(pin, config)


def test_a_zeroed_range_is_named_when_the_worker_first_opens_the_store(pinned):
    config, path, pin = pinned
    train = path / "train.bin"
    with open(train, "r+b") as handle:
        handle.seek(8192)
        handle.write(b"\0" * (1 << 20))
    with pytest.raises(StoreUnavailable) as raised:
        check_pinned(pin, config)
    message = str(raised.value)
    assert f"at {path}: rebuild it with `{prepare_command(config)}`" in message
    assert "its content differs from its checksums in train.bin shard 0" in message
