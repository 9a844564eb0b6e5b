"""``cbs study delete``: a study deleted as a whole (:mod:`workers.studies.delete`). Trials run in this
process (the worker's own code, ``run_trial_attempt``), on a real MLflow store, ledger and Optuna
storage of this test's own; every trace a study leaves is counted before and after."""

from __future__ import annotations

import io
import threading

import optuna
import pytest
from mlflow.entities import ViewType

from cbs import main as cbs_main
from cbscore import paths
from cbscore.errors import ConfigError
from mlflow import MlflowClient
from tests.workers.conftest import tiny_spec, wait_for
from tests.workers.test_extend_retry import drain
from tests.workers.test_reuse import advance_until_done, steps
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies import delete
from workers.studies.delete import StudyInFlight
from workers.studies.ledger import Ledger
from workers.studies.local_study import study_artifacts
from workers.studies.runner import Runner
from workers.studies.search import storage
from workers.tracking import Tracker


def stores() -> tuple[Tracker, Ledger]:
    s = WorkerSettings.from_env()
    return Tracker(s.tracking_uri, s.artifact_root), Ledger(s.ledger_url)


def optuna_studies(name: str) -> list[str]:
    return sorted(n for n in optuna.get_all_study_names(storage=storage(WorkerSettings.from_env().optuna_storage))
                  if n.startswith(f"{name}/"))


def traces(name: str, exp_id: str) -> dict:
    """Every trace of study ``name`` (experiment ``exp_id``) that a delete removes."""
    tracker, ledger = stores()
    root = paths.checkpoint_root()
    return {
        "active runs": len(tracker.client.search_runs([exp_id], "", run_view_type=ViewType.ACTIVE_ONLY)),
        "experiment": tracker.client.get_experiment(exp_id).lifecycle_stage,
        "leases": len(ledger.leases(name)),
        "store pin": ledger.store_pin(name) is not None,
        "checkpoints": sorted(p.name for p in root.glob(f"{name}.*")) if root.is_dir() else [],
        "artifacts": study_artifacts(name).exists(),
        "listed": name in [s.name for s in api.list_studies()],
    }


GONE = {"active runs": 0, "experiment": "deleted", "leases": 0, "store pin": False, "checkpoints": [],
        "artifacts": False, "listed": False}


def test_deleting_a_finished_study_removes_every_trace_and_frees_its_name(worker_env, token_store, monkeypatch,
                                                                           capsys):
    name = "gone"
    monkeypatch.setenv("CBS_KEEP_CHECKPOINTS", "1")  # the trials' checkpoint folders stay after they end
    api.launch_study(tiny_spec(name, batch_sizes=[4, 8]))
    ran = drain(name)
    assert api.study_status(name).status == "done"
    tracker, _ = stores()
    exp_id = tracker.experiment(name).experiment_id
    run_ids = [r.run_id for r in api.study_records(name)] + [tracker.study_run(name).info.run_id]
    assert traces(name, exp_id) == {"active runs": 3, "experiment": "active", "leases": 2, "store pin": True,
                                    "checkpoints": sorted(ran), "artifacts": False, "listed": True}
    capsys.readouterr()
    assert cbs_main(["study", "delete", name, "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"cbs study: deleted '{name}'\n" in out
    assert f"MLflow: 3 run(s) soft-deleted, the experiment too (now '{name}.deleted-{exp_id}'" in out
    assert "ledger: 2 lease(s); Optuna: 0 study(ies); checkpoints: 2 folder(s); artifacts: none" in out
    assert traces(name, exp_id) == GONE
    # MLflow's delete is soft: the runs are still in the store, marked deleted
    assert {tracker.client.get_run(r).info.lifecycle_stage for r in run_ids} == {"deleted"}
    # neither the CLI nor the runner sees it any more
    assert cbs_main(["study", "list"]) == 0 and name not in capsys.readouterr().out
    assert cbs_main(["study", "status", name]) == 2
    assert "name: names no study, but got 'gone'." in capsys.readouterr().err
    assert Runner().advance_all() == []
    # deleting it again: there is nothing left to delete
    assert cbs_main(["study", "delete", name, "--yes"]) == 2
    assert "names no study (a study of this name was deleted)" in capsys.readouterr().err
    # the name is free, and a new study of it trains its first trial: a deleted run is never reused
    api.launch_study(tiny_spec(name, batch_sizes=[4, 8]))
    [first] = api.study_records(name)
    assert first.status == "queued" and first.reused_from == "" and first.run_id not in run_ids


def test_an_unknown_study_is_named(worker_env, capsys):
    assert cbs_main(["study", "delete", "nosuch", "--yes"]) == 2
    assert capsys.readouterr().err == "cbs study: error: name: names no study, but got 'nosuch'.\n"
    with pytest.raises(ConfigError, match="names no study"):
        api.delete_study("../etc")


def test_a_study_with_a_trial_queued_is_refused_by_name_and_count_and_nothing_is_deleted(worker_env, token_store,
                                                                                       capsys):
    name = "queued"
    api.launch_study(tiny_spec(name))  # its reference trial is queued
    tracker, _ = stores()
    exp_id = tracker.experiment(name).experiment_id
    before = traces(name, exp_id)
    [trial] = [r.trial_id for r in api.study_records(name)]
    with pytest.raises(StudyInFlight) as refused:
        api.delete_study(name)
    assert str(refused.value).startswith(f"study 'queued' has 1 trial(s) queued or running ({trial}), so it was "
                                         "not deleted; cancel it first (`cbs study cancel queued`)")
    assert refused.value.trial_ids == (trial,)
    assert cbs_main(["study", "delete", name, "--yes"]) == 2
    assert "study 'queued' has 1 trial(s) queued or running" in capsys.readouterr().err
    assert traces(name, exp_id) == before and before["listed"] and before["leases"] == 1
    assert api.study_status(name).status == "running"


def test_force_cancels_a_running_trial_waits_for_it_to_stop_then_deletes(worker_env, token_store):
    from workers.trials.trial import run_trial_attempt

    name = "busy"
    # a reference trial long enough to be stopped half-way (200k tokens: minutes on two cores)
    api.launch_study(tiny_spec(name, settings=[{"model": "tiny-0.1M", "tokens": 200_000}], allow_repeat=True))
    [ref] = api.study_records(name)
    tracker, ledger = stores()
    exp_id = tracker.experiment(name).experiment_id
    result = {}
    holder = threading.Thread(target=lambda: result.update(run_trial_attempt(name, ref.trial_id, ref.attempt,
                                                                             worker="test")))
    holder.start()
    try:
        wait_for(lambda: tracker.get_run(ref.run_id).info.status == "RUNNING"
                 and tracker.get_run(ref.run_id).data.metrics.get("progress/step", 0) > 0, 120,
                 what="the reference trial to train")
        assert api.deletion_preview(name).in_flight == (ref.trial_id,)
        report = api.delete_study(name, force=True, wait_s=120)
    finally:
        holder.join(120)
    assert report.cancelled == 1 and report.runs_deleted == 2 and report.leases_deleted == 1
    assert result["outcome"] == "stopped"  # the holder stopped at its heartbeat, not at its budget
    run = tracker.client.get_run(ref.run_id)
    assert (run.info.status, run.data.tags["status"], run.info.lifecycle_stage) == ("KILLED", "stopped", "deleted")
    assert run.data.metrics["progress/tokens"] < 200_000
    assert traces(name, exp_id) == GONE


def test_force_deletes_a_local_study_with_queued_branches_and_its_snapshots(worker_env, token_store, capsys):
    from tests.workers.test_local_study import local_spec
    from workers.trials.trial import run_trial_attempt

    name = "locdel"
    api.launch_study(local_spec(name))
    run_trial_attempt(name, f"{name}.base.s0", 1, worker="test")  # the base run writes its snapshots
    records = {r.trial_id: r.status for r in api.study_records(name)}
    assert records[f"{name}.base.s0"] == "finished" and list(records.values()).count("queued") == 6
    assert sorted(p.name for p in (study_artifacts(name) / "snapshots" / "s0").iterdir()) == \
        ["tokens-000000000001024", "tokens-000000000002048"]
    tracker, _ = stores()
    exp_id = tracker.experiment(name).experiment_id
    with pytest.raises(StudyInFlight, match="has 6 trial"):
        api.delete_study(name)
    capsys.readouterr()
    assert cbs_main(["study", "delete", name, "--yes", "--force"]) == 0
    out = capsys.readouterr().out
    assert "cancelled first: 6 unfinished trial(s) stopped" in out and "MLflow: 8 run(s) soft-deleted" in out
    assert "ledger: 7 lease(s); Optuna: 0 study(ies); checkpoints: 0 folder(s); artifacts: removed" in out
    assert traces(name, exp_id) == GONE


def _crash_after(monkeypatch, owner, attr: str, *, calls: int = 1) -> None:
    """``owner.attr`` runs ``calls`` times, then raises as a process killed there would stop."""
    real, n = getattr(owner, attr), [0]

    def crashing(*args, **kwargs):
        n[0] += 1
        if n[0] > calls:
            raise RuntimeError(f"crash in {attr}")
        out = real(*args, **kwargs)
        if n[0] == calls:
            raise RuntimeError(f"crash after {attr}")
        return out

    monkeypatch.setattr(owner, attr, crashing)


@pytest.mark.parametrize("where", ["_mark", "_remove_checkpoints", "_delete_optuna", "forget_study", "delete_run",
                                   "rename_experiment"])
def test_a_delete_stopped_half_way_is_finished_by_running_it_again(worker_env, token_store, monkeypatch, capsys,
                                                                   where):
    name = "half"
    api.launch_study(tiny_spec(name, search={"kind": "optuna", "n_trials": 2, "lr_min": 1e-3, "lr_max": 1e-1}))
    assert api.cancel_study(name) >= 1  # queued trials stop at once
    trials = [r.trial_id for r in api.study_records(name)]
    for tid in trials:  # what a trial lost with its host leaves behind
        (paths.checkpoint_root() / tid).mkdir(parents=True, exist_ok=True)
        (paths.checkpoint_root() / tid / "checkpoint.pt").write_bytes(b"x")
    tracker, _ = stores()
    exp_id = tracker.experiment(name).experiment_id
    assert optuna_studies(name) == [f"{name}/tiny-0.1M_D15K.b8"]
    assert traces(name, exp_id)["checkpoints"] == sorted(trials)

    with monkeypatch.context() as m:
        if where == "forget_study":
            _crash_after(m, Ledger, where)
        elif where in ("delete_run", "rename_experiment"):  # half the runs deleted; renamed, not deleted
            _crash_after(m, MlflowClient, where)
        else:
            _crash_after(m, delete, where)
        with pytest.raises(RuntimeError, match="crash"):
            api.delete_study(name)
    assert not traces(name, exp_id)["listed"]  # hidden from the first step on
    capsys.readouterr()
    assert cbs_main(["study", "delete", name, "--yes"]) == 0
    assert "(finishing a delete that had stopped half-way)" in capsys.readouterr().out
    assert traces(name, exp_id) == GONE and optuna_studies(name) == []
    assert tracker.client.get_experiment(exp_id).name == f"{name}.deleted-{exp_id}"
    assert {r.info.lifecycle_stage for r in tracker.client.search_runs([exp_id], "", run_view_type=ViewType.ALL)} \
        == {"deleted"}


def test_without_yes_the_cli_asks_on_a_terminal_and_refuses_without_one(worker_env, token_store, monkeypatch, capsys):
    name = "ask"
    api.launch_study(tiny_spec(name))
    api.cancel_study(name)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", io.StringIO("ask\n"))  # piped: not a terminal
    assert cbs_main(["study", "delete", name]) == 2
    assert capsys.readouterr().err == ("cbs study: error: not deleting 'ask' without a confirmation: standard input "
                                       "is not a terminal; pass --yes to delete it\n")
    monkeypatch.setattr("sys.stdin", Terminal("no\n"))
    assert cbs_main(["study", "delete", name]) == 1
    out = capsys.readouterr().out
    assert out.startswith("study 'ask' (cancelled): 2 MLflow run(s), its ledger entries, Optuna studies, "
                          "checkpoints and artifacts will be deleted")
    assert out.endswith("Type the study's name (ask) to delete it: cbs study: 'ask' was not deleted\n")
    assert name in [s.name for s in api.list_studies()]
    monkeypatch.setattr("sys.stdin", Terminal("ask\n"))
    assert cbs_main(["study", "delete", name]) == 0
    assert "cbs study: deleted 'ask'" in capsys.readouterr().out
    assert name not in [s.name for s in api.list_studies()]


def test_a_study_whose_trials_another_reused_is_deleted_and_the_other_keeps_its_copies(worker_env, token_store):
    api.launch_study(tiny_spec("src", batch_sizes=[4, 8]))
    advance_until_done("src")
    api.launch_study(tiny_spec("copy", batch_sizes=[4, 8]))
    assert advance_until_done("copy") == []  # every trial copied from src
    tracker, _ = stores()
    table = steps("copy")
    curves = {r.trial_id: tracker.curves(r.run_id) for r in api.study_records("copy")}
    assert api.deletion_preview("src").dependants == ("copy",)
    report = api.delete_study("src")
    assert report.dependants == ("copy",)
    # the copies hold the whole result: the table, the curves and the fit do not change
    assert steps("copy") == table
    assert {r.trial_id: tracker.curves(r.run_id) for r in api.study_records("copy")} == curves
    assert sorted(p.batch_size for p in api.study_fit("copy", bootstrap=0).settings[0].points) == [4, 8]
    assert {r.reused_from.split("/")[0] for r in api.study_records("copy")} == {"src"}  # the deleted source, named
    # a third study of the same config still trains nothing: it copies the copies
    api.launch_study(tiny_spec("third", batch_sizes=[4, 8]))
    assert advance_until_done("third") == [] and steps("third") == table
