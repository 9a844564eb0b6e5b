"""The web process's warm-up (app/warm_up.py) leaves the imported stack out of the collector's walks."""

from __future__ import annotations

import gc

from app import sources, warm_up


def test_warm_up_freezes_what_the_imports_left_and_a_store_down_does_not(monkeypatch):
    monkeypatch.setattr(sources, "warm_up", lambda: None)
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        warm_up.warm()
        assert gc.get_freeze_count() > 0  # the modules and their objects, out of every collection
        gc.unfreeze()

        def down():
            raise ConnectionError("Connection refused")

        monkeypatch.setattr(sources, "warm_up", down)
        warm_up.warm()  # said in the log; the first page imports the rest, nothing frozen
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
