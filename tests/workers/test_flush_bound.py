"""Issue 42, finding 9: a trial whose tracking server is down trains on without blocking in
``flush`` (one quick try per due retry, its points kept), and past ``CBS_TRACKING_OUTAGE_HOLD_S``
gives its worker back (a transient error: the attempt goes back, uncounted) instead of holding it."""

from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import pytest

from workers.tracking import MlflowCallback, Tracker, TrackingOutage, is_transient


def _dead_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens (connection refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def cut_off(monkeypatch):
    monkeypatch.setenv("CBS_TRACKING_OUTAGE_HOLD_S", "3")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")  # what pre_train sets in a trial's process
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    return MlflowCallback(Tracker(_dead_url()), "0" * 32, flush_s=0.0)


def test_a_trial_cut_off_from_tracking_trains_on_then_gives_its_worker_back(cut_off):
    state = SimpleNamespace(step=0, tokens=0)
    started = time.monotonic()
    slowest, flushes = 0.0, 0
    with pytest.raises(TrackingOutage) as raised:
        while time.monotonic() - started < 60:
            state.step += 1
            state.tokens += 64
            cut_off._add("train/loss", 3.0, state.step)
            t = time.monotonic()
            try:
                cut_off.flush(state)
            finally:
                slowest, flushes = max(slowest, time.monotonic() - t), flushes + 1
            time.sleep(0.05)  # a training step
    held = time.monotonic() - started
    assert is_transient(raised.value)  # the attempt is given back, not counted
    assert "CBS_TRACKING_OUTAGE_HOLD_S=3" in str(raised.value)
    assert 3 <= held < 3 + 10, held  # the hold, plus at most one write's time
    assert slowest < 10, slowest  # no flush blocks the loop for minutes (MLflow's own retries)
    assert flushes > 10  # the loop trained on between the tries
    assert [m.step for m in cut_off.buffer if m.key == "train/loss"] == list(range(1, state.step + 1))  # none lost


def test_the_end_of_a_trial_waits_for_the_store_as_before(cut_off):
    """At the end (``must``) the flush retries and raises the store's own error, as it did."""
    state = SimpleNamespace(step=5, tokens=320)
    cut_off._add("train/loss", 3.0, 5)
    with pytest.raises(Exception) as raised:
        cut_off.flush(state, must=True)
    assert is_transient(raised.value) and not isinstance(raised.value, TrackingOutage)
    assert [m.step for m in cut_off.buffer if m.key == "train/loss"] == [5]
