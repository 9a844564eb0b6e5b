"""The pages' read model (workers.studies.read_model): a study read from the ledger gives what MLflow
gives, asks MLflow only for the trials in flight, and a ledger from before the read model still
reads (from MLflow) and fills itself as it reads."""

from __future__ import annotations

import sqlite3

import pytest

from tests.app import store_seed
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies import ledger as ledger_module
from workers.studies.ledger import Ledger
from workers.tracking import Tracker

STUDY = "kept"


def _seed(worker_env, *, ledger=None):
    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri, worker_env["CBS_ARTIFACT_ROOT"])
    spec = store_seed.spec_for(STUDY, n_settings=2, batch_sizes=(8, 16, 32, 64), lrs=(0.003, 0.01, 0.03), b_ref=16)
    store_seed.seed_study(tracker, spec, running=2, ledger=ledger if ledger is not None else Ledger(s.ledger_url))
    return tracker, Ledger(s.ledger_url)


def _mlflow_reads(monkeypatch) -> list[str]:
    """The filters of the trial-run searches this test makes from here on."""
    filters: list[str] = []
    real = Tracker.runs

    def runs(self, experiment_id, flt="", **kw):
        filters.append(flt)
        return real(self, experiment_id, flt, **kw)

    monkeypatch.setattr(Tracker, "runs", runs)
    return filters


def _reads():
    """What the Curves, Scaling laws and Studies pages read of the study."""
    return (api.study_table(STUDY), api.study_records(STUDY), api.study_forecast(STUDY, with_fit=False),
            api.study_histories(STUDY), api.study_eval_curves(STUDY))


def _forget_host_caches():
    """A new process on a host with no cache: the tracker's caches and the ended trials this
    process remembers (read_model._SERVED) go."""
    from workers.studies import read_model

    Tracker._ENDED.clear()
    Tracker._HISTORY.clear()
    read_model.forget()


def test_a_study_reads_from_the_read_model_as_from_mlflow_and_asks_mlflow_only_for_trials_in_flight(
        worker_env, monkeypatch):
    tracker, ledger = _seed(worker_env)
    leases = ledger.leases(STUDY)
    ended = {t for t, lease in leases.items() if lease.state == "done"}
    running = {lease.run_id for lease in leases.values() if lease.state == "running"}
    assert len(running) == 2 and ended and set(ledger.results(STUDY)) == ended
    _forget_host_caches()
    filters = _mlflow_reads(monkeypatch)
    kept = _reads()
    # one search per read, each for the two running trials by id: no ended trial was asked of MLflow
    assert filters and all(f.startswith("attributes.run_id IN (") for f in filters)
    assert {r for f in filters for r in f[len("attributes.run_id IN ("):-1].replace("'", "").split(", ")} == running
    # the same reads from MLflow alone: a ledger with no row of the read model (a lab from before it)
    with ledger.engine.begin() as conn:
        conn.execute(ledger_module.RESULTS.delete())
    _forget_host_caches()
    filters.clear()
    from_mlflow = _reads()
    assert len({r for f in filters for r in f[len("attributes.run_id IN ("):-1].replace("'", "").split(", ")}) == len(leases)
    assert kept[0] == from_mlflow[0]  # the steps table, row for row
    assert kept[1] == from_mlflow[1]  # the records, curves included
    assert kept[2] == from_mlflow[2]  # the noise-scale forecast (B_simple of the best reference runs)
    assert kept[3] == from_mlflow[3]  # every trial's evaluations (the bootstrap's redrawn target)
    assert kept[4] == from_mlflow[4]  # every trial's eval curve (the Studies page's overlay)
    assert kept[2].forecasts and all(f.b_hat > 0 for f in kept[2].forecasts)
    # ... and that read kept every ended trial again
    assert set(ledger.results(STUDY)) == ended


def test_a_row_serves_only_the_lease_it_was_kept_for(worker_env, monkeypatch):
    """A trial that runs again (its lease moved) is read from MLflow, not from its old row."""
    tracker, ledger = _seed(worker_env)
    done = sorted(t for t, lease in ledger.leases(STUDY).items() if lease.state == "done")[0]
    lease = ledger.lease(done)
    with ledger.engine.begin() as conn:  # what a re-run leaves: the lease queued again, its run too
        conn.execute(ledger_module.LEASES.update().where(ledger_module.LEASES.c.trial_id == done)
                     .values(state="queued", attempt=2, updated_s=lease.updated_s + 1))
    tracker.set_trial_status(lease.run_id, "queued", attempt=2)
    filters = _mlflow_reads(monkeypatch)
    record = {r.trial_id: r for r in api.study_records(STUDY)}[done]
    assert record.status == "queued" and record.attempt == 2
    assert any(lease.run_id in f for f in filters)
    assert done not in {r.trial_id for r in api.study_table(STUDY)}


def test_a_ledger_from_before_the_read_model_gets_its_table_and_fills_it_as_it_reads(worker_env, tmp_path, monkeypatch):
    """A lab's ledger whose schema has no cbs_trial_results (made by an older CBS Lab): opening it
    adds the table, the first read comes from MLflow and keeps each ended trial, the next from the
    ledger, with the same answers."""
    path = tmp_path / "old-ledger.db"
    url = f"sqlite:///{path}"
    monkeypatch.setenv("CBS_LEDGER_URL", url)
    tracker, ledger = _seed(worker_env)
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE cbs_trial_results")
    ledger_module._ENGINES.clear()  # a new process of the new version opens the old ledger
    assert "cbs_trial_results" not in {r[0] for r in sqlite3.connect(path).execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    ledger = Ledger(url)
    assert ledger.results(STUDY) == {}
    _forget_host_caches()
    first = _reads()
    ended = {t for t, lease in ledger.leases(STUDY).items() if lease.state == "done"}
    assert set(ledger.results(STUDY)) == ended
    _forget_host_caches()
    filters = _mlflow_reads(monkeypatch)
    assert _reads() == first
    assert all(f.startswith("attributes.run_id IN (") and f.count("'") == 4 for f in filters)  # the 2 running


def test_a_study_the_ledger_does_not_index_is_read_from_mlflow(worker_env):
    """No lease at all (a store written by other means, a ledger reset): MLflow alone, as before."""
    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri, worker_env["CBS_ARTIFACT_ROOT"])
    spec = store_seed.spec_for("unindexed", n_settings=1, batch_sizes=(8, 16, 32), lrs=(0.003, 0.01, 0.03), b_ref=16)
    seeded = store_seed.seed_study(tracker, spec)
    assert Ledger(s.ledger_url).leases("unindexed") == {}
    rows = api.study_table("unindexed")
    [setting] = seeded.values()
    best = min(r.steps for r in rows if r.outcome == "reached" and r.batch_size == 8)
    assert best == pytest.approx(setting.steps(8), rel=1e-6)
    assert Ledger(s.ledger_url).results("unindexed") == {}


def test_a_trial_that_ends_keeps_its_row_for_the_pages(worker_env, token_store, monkeypatch):
    from tests.workers.conftest import tiny_spec
    from workers.studies.read_model import EVAL_KEY, GNS_KEY, stored_run
    from workers.trials.trial import run_trial_attempt

    api.launch_study(tiny_spec("ends", batch_sizes=[8]))
    [record] = api.study_records("ends")
    ledger = Ledger(WorkerSettings.from_env().ledger_url)
    assert ledger.results("ends") == {}
    assert run_trial_attempt("ends", record.trial_id, 1, worker="test")["outcome"] == "finished"
    [row] = ledger.results("ends").values()
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    run = tracker.get_run(record.run_id)
    lease = ledger.lease(record.trial_id)
    assert (row.run_id, row.outcome, row.lease_updated_s) == (record.run_id, "finished", lease.updated_s)
    kept = stored_run(row)
    assert kept.info.status == run.info.status == "FINISHED"
    assert kept.data.metrics == run.data.metrics
    assert kept.data.tags == {k: v for k, v in run.data.tags.items() if k not in ("trial_spec", "eval_curve")}
    steps, losses = tracker.history(run, EVAL_KEY)
    assert len(steps) >= 2 and kept.curves[EVAL_KEY] == (steps, losses)
    assert set(kept.curves) == {EVAL_KEY, GNS_KEY}  # a reference trial: its noise scale too
    filters = _mlflow_reads(monkeypatch)
    assert [r.status for r in api.study_records("ends")] == ["finished"]
    assert filters == []  # nothing in flight: MLflow was not asked for the study's trials


def test_a_fit_of_a_study_table_is_kept_once_per_table_and_settings(worker_env, monkeypatch):
    """A page on any host reads the fit the first one computed; another table, other settings or a
    fit another version wrote is fitted (and kept) anew; a study keeps its newest few; deleting the
    study deletes them."""
    import cbscore.analysis
    from workers.studies import read_model

    tracker, ledger = _seed(worker_env)
    rows = api.study_table(STUDY)
    fitted = []
    real = cbscore.analysis.analyze_table

    def analyze_table(*args, **kw):
        fitted.append(kw["b_ref"])
        return real(*args, **kw)

    monkeypatch.setattr(cbscore.analysis, "analyze_table", analyze_table)
    first = api.study_table_fit(STUDY, rows, b_ref=16, overhead=0.2, bootstrap=50)
    again = api.study_table_fit(STUDY, rows, b_ref=16, overhead=0.2, bootstrap=50)
    assert fitted == [16]  # the second came from the read model
    assert [(s.setting, s.cbs, s.cbs_ci) for s in again.settings] == [(s.setting, s.cbs, s.cbs_ci) for s in first.settings]
    assert again.settings[0].cbs == pytest.approx(real(rows, b_ref=16, overhead=0.2, bootstrap=0).settings[0].cbs)
    api.study_table_fit(STUDY, rows[:-1], b_ref=16, overhead=0.2, bootstrap=50)  # a trial fewer: another table
    for b_ref in (8, 32, 64):
        api.study_table_fit(STUDY, rows, b_ref=b_ref, overhead=0.2, bootstrap=50)
    assert fitted == [16, 16, 8, 32, 64]
    with ledger.engine.connect() as conn:
        assert len(conn.execute(ledger_module.FITS.select()).all()) == read_model.FITS_KEPT
        conn.execute(ledger_module.FITS.update().values(fit=b"written by another version"))
        conn.commit()
    api.study_table_fit(STUDY, rows, b_ref=64, overhead=0.2, bootstrap=50)
    assert fitted[-1] == 64 and len(fitted) == 6  # unreadable: fitted again
    ledger.forget_study(STUDY)
    with ledger.engine.connect() as conn:
        assert conn.execute(ledger_module.FITS.select()).all() == []
    assert ledger.results(STUDY) == {}  # and the kept trials with it


def test_a_process_reads_each_ended_trial_once_while_its_lease_stays(worker_env, monkeypatch):
    """The pages' later reads of a study (table, records, forecast, histories, curves) ask the ledger for no
    row and build no record of an ended trial already read; a trial whose lease moves (run again)
    is read afresh; every read gives what a new process reads."""
    from workers.studies import read_model

    tracker, ledger = _seed(worker_env)
    _forget_host_caches()
    first = _reads()
    rows_read, built = [], []
    real_results, real_record = Ledger.results, read_model.record_from_run
    monkeypatch.setattr(Ledger, "results", lambda self, study: rows_read.append(study) or real_results(self, study))
    monkeypatch.setattr(read_model, "record_from_run",
                        lambda run, *a, **kw: built.append(run.info.run_id) or real_record(run, *a, **kw))
    assert _reads() == first
    assert rows_read == [] and built == []
    # a record without its eval curve (with_history=False), taken from one with it, is the one built without
    served = read_model._SERVED[STUDY].values()
    assert served and all(s.records[False] == real_record(s.run, s.lease, read_model.Histories(tracker),
                                                          with_history=False) for s in served)
    assert any(s.records[None].eval_steps for s in served)  # ... where there was a curve to drop
    # a trial runs again: its lease moves, so its old row and its remembered records serve no more
    done = sorted(t for t, lease in ledger.leases(STUDY).items() if lease.state == "done")[0]
    lease = ledger.lease(done)
    with ledger.engine.begin() as conn:
        conn.execute(ledger_module.LEASES.update().where(ledger_module.LEASES.c.trial_id == done)
                     .values(state="queued", attempt=2, updated_s=lease.updated_s + 1))
    tracker.set_trial_status(lease.run_id, "queued", attempt=2)
    filters = _mlflow_reads(monkeypatch)
    moved = _reads()
    assert all(lease.run_id in f for f in filters)
    assert {r.trial_id: r for r in moved[1]}[done].status == "queued"
    assert done not in {r.trial_id for r in moved[0]} and moved[0] != first[0]
    _forget_host_caches()
    assert _reads() == moved  # what a new process reads


def test_a_process_remembers_the_studies_it_read_last():
    """The ended trials of at most STUDIES_REMEMBERED studies stay in memory, the most recently read."""
    from workers.studies import read_model

    read_model.forget()
    try:
        for i in range(read_model.STUDIES_REMEMBERED):
            read_model._remember(f"s{i}", {})
        read_model._remember("s0", {})  # read again: now the most recent
        read_model._remember("new", {})
        assert "s1" not in read_model._SERVED and {"s0", "new"} <= set(read_model._SERVED)
        assert len(read_model._SERVED) == read_model.STUDIES_REMEMBERED
    finally:
        read_model.forget()
