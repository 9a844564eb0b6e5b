"""Test-wide setup: every cache and all run-time state stay inside the checkout.

The Makefile sets the same variables; setting them here too keeps a bare ``pytest`` honest.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"

for _name, _value in {
    "HF_HOME": str(CACHE / "hf"),
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TORCHINDUCTOR_CACHE_DIR": str(CACHE / "inductor"),
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
    "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
}.items():
    os.environ.setdefault(_name, _value)

# Run-time state of the product under test: one folder per test session, never the user's .cbs/.
# (Under pytest-xdist each worker process is a session of its own: its own folder.)
os.environ.setdefault("CBS_HOME", str(CACHE / ("cbs-home-tests" + (f"-{os.environ['PYTEST_XDIST_WORKER']}"
                                                                   if os.environ.get("PYTEST_XDIST_WORKER") else ""))))
# Tests build throw-away stores in pytest's temporary folders and shared ones under .cache/: allow
# them as data roots (the product allows only $CBS_HOME unless the operator sets this; tests of
# that rule unset it).
os.environ.setdefault("CBS_DATA_ROOTS", os.pathsep.join([tempfile.gettempdir(), str(CACHE)]))
# ... and as folders a store may be written to (the product allows only the store root).
os.environ.setdefault("CBS_STORE_ROOTS", os.pathsep.join([tempfile.gettempdir(), str(CACHE)]))

# Shared fixtures (a prepared built-in token store, ...) live in plugin modules.
pytest_plugins = ["tests.data_fixtures"]


def pytest_collection_modifyitems(config, items):
    """Skip ``gpu`` tests where CUDA is missing (they are also deselected by default). Under
    pytest-xdist (``-n 2 --dist loadgroup``), every ``services`` test runs on one worker: they share
    the local Redis database and its queue."""
    for item in items:
        if "services" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("services"))
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # torch missing or broken: no GPU tests either way
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
