"""``workers.query.api.study_table``: the steps table the fits read, from a real MLflow store."""

from __future__ import annotations

import pytest

from tests.app import store_seed
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.tracking import Tracker


def test_reference_runs_cross_the_planners_own_exact_target(worker_env, monkeypatch):
    """The target is the whole reference cell's fitted loss at D (cbscore.analysis.reference_target),
    and the table reads every reference run's crossing of exactly the planner's number: a target
    read back from a rounded tag once left every reference run 'censored'."""
    from cbscore.analysis import first_crossing

    monkeypatch.setattr(store_seed, "TARGET", 4.1234549)
    s = WorkerSettings.from_env()
    spec = store_seed.spec_for("exact", n_settings=1, batch_sizes=(8, 16, 32), lrs=(0.003, 0.01, 0.03), b_ref=16)
    [seeded] = store_seed.seed_study(Tracker(s.tracking_uri, worker_env["CBS_ARTIFACT_ROOT"]), spec).values()
    rows = api.study_table("exact")
    [target] = api.study_status("exact").targets.values()
    assert target == pytest.approx(4.1234549, abs=0.01)
    records = {r.trial_id: r for r in api.study_records("exact")}
    refs = [r for r in rows if r.role == "reference"]
    assert refs and any(r.outcome == "reached" for r in refs)
    for row in refs:
        rec = records[row.trial_id]
        crossing = first_crossing(rec.eval_steps, rec.eval_losses, target)
        assert (row.outcome == "reached") == (crossing is not None)
        if crossing is not None:
            assert row.steps == crossing
    # The middle learning rate is the seeded best: it crosses near D at B_ref (488 steps).
    best = min((r for r in refs if r.outcome == "reached"), key=lambda r: r.steps)
    assert best.lr == 0.01 and best.steps == pytest.approx(seeded.steps(16), rel=0.05)
    # The other cells cross at the seeded S(B).
    best = min(r.steps for r in rows if r.outcome == "reached" and r.batch_size == 8)
    assert best == pytest.approx(seeded.steps(8), rel=1e-6)
