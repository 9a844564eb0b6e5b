"""Issue 25: trials reused across studies. A study that repeats a finished study's cells trains
nothing (each trial's run is copied, tagged reused_from) and its steps table equals the first's;
a study that opts out trains every trial."""

from __future__ import annotations

from tests.workers.conftest import tiny_spec
from tests.workers.test_extend_retry import drain
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.runner import Runner
from workers.tracking import Tracker


def advance_until_done(name: str, limit: int = 20) -> list[str]:
    """Advance ``name`` (starting what its planner releases) and run what is queued, until done;
    returns the trials trained."""
    trained = []
    for _ in range(limit):
        Runner().advance(name)
        trained += drain(name)
        if api.study_status(name).status == "done":
            return trained
    raise AssertionError(f"{name} is not done after {limit} passes")


def steps(name: str) -> list[tuple]:
    return sorted((r.setting, r.batch_size, r.seed, r.outcome, r.steps) for r in api.study_table(name))


def test_a_study_that_repeats_a_finished_one_trains_nothing_and_gets_its_table(worker_env, token_store):
    api.launch_study(tiny_spec("first", batch_sizes=[4, 8, 16]))
    assert len(advance_until_done("first")) == 3
    api.launch_study(tiny_spec("again", batch_sizes=[4, 8, 16]))
    assert advance_until_done("again") == []  # nothing trained
    assert steps("again") == steps("first")
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    first = {r.batch_size: r.run_id for r in api.study_records("first")}
    for r in api.study_records("again"):
        tags = tracker.get_run(r.run_id).data.tags
        assert (tags["reused_from"], tags["reused_from_study"]) == (first[r.batch_size], "first")
        assert r.run_id != first[r.batch_size] and r.reused_from == f"first/{first[r.batch_size]}"
    from app.study_view import trial_rows  # the Studies page's "reused from" column

    assert {row["reused from"] for row in trial_rows(api.study_records("again"), {})} == \
        {f"first/{run}" for run in first.values()}
    # the copy carries the whole curve: the held-out history is the source's, point for point
    src, dst = api.study_records("first")[0], [r for r in api.study_records("again")
                                               if r.batch_size == api.study_records("first")[0].batch_size][0]
    assert tracker.curves(dst.run_id) == tracker.curves(src.run_id)


def test_a_study_that_opts_out_trains_every_trial(worker_env, token_store):
    api.launch_study(tiny_spec("base", batch_sizes=[4, 8]))
    advance_until_done("base")
    api.launch_study(tiny_spec("fresh", batch_sizes=[4, 8], reuse_trials=False))
    assert len(advance_until_done("fresh")) == 2
    assert steps("fresh") == steps("base")  # the same numbers, trained again: the trainer is deterministic
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    assert all("reused_from" not in tracker.get_run(r.run_id).data.tags for r in api.study_records("fresh"))
