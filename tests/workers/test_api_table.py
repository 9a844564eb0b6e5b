"""``workers.api.study_table``: the steps table the fits read, from a real MLflow store."""

from __future__ import annotations

import pytest

from tests.app import store_seed
from workers import api
from workers.settings import WorkerSettings
from workers.tracking import Tracker


def test_the_best_reference_run_reaches_its_own_exact_target(worker_env, monkeypatch):
    """The target is the best reference run's final loss, to the last bit: a target read back
    from a rounded tag (4.12345 < 4.1234549) once left every reference run 'censored'."""
    monkeypatch.setattr(store_seed, "TARGET", 4.1234549)
    s = WorkerSettings.from_env()
    spec = store_seed.spec_for("exact", n_settings=1, batch_sizes=(8, 16, 32), lrs=(0.003, 0.01, 0.03), b_ref=16)
    [seeded] = store_seed.seed_study(Tracker(s.tracking_uri, worker_env["CBS_ARTIFACT_ROOT"]), spec).values()
    rows = api.study_table("exact")
    refs = [r for r in rows if r["role"] == "reference"]
    reached = [r for r in refs if r["outcome"] == "reached"]
    assert [r["lr"] for r in reached] == [0.01]  # the middle learning rate is the seeded best
    ref_steps = round(seeded.steps(16))  # D tokens at B_ref: 1M / (16 · 128) = 488 steps
    assert reached[0]["steps"] == pytest.approx(ref_steps, abs=1e-6)
    assert {r["outcome"] for r in refs if r["lr"] != 0.01} == {"censored"}
    # The other cells cross at the seeded S(B).
    best = min(r["steps"] for r in rows if r["outcome"] == "reached" and r["batch_size"] == 8)
    assert best == pytest.approx(seeded.steps(8), rel=1e-6)
