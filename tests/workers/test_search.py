"""Optuna per cell: proposals inside the range and independent of who asks, and what each
outcome tells the sampler (the semantics in workers/studies/search.py)."""

from __future__ import annotations

import math

import optuna
import pytest
import sqlalchemy.exc
from optuna.trial import TrialState

from workers.studies.search import CellSearch, cell_study_name


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'optuna.db'}"


def test_asks_are_in_range_numbered_and_do_not_repeat_across_processes(url):
    first = CellSearch(url, "s").ask("set.b8", 2, lr_min=1e-4, lr_max=1e-1, n_startup=2)
    # A new CellSearch stands for another runner process asking later.
    second = CellSearch(url, "s").ask("set.b8", 2, lr_min=1e-4, lr_max=1e-1, n_startup=2)
    numbers = [n for n, _ in first + second]
    lrs = [lr for _, lr in first + second]
    assert numbers == [0, 1, 2, 3]
    assert all(1e-4 <= lr <= 1e-1 for lr in lrs)
    assert len(set(lrs)) == 4
    # The same (cell, number) always proposes the same learning rate: a fresh storage agrees.
    again = CellSearch(url.replace("optuna.db", "other.db"), "s").ask("set.b8", 1, lr_min=1e-4, lr_max=1e-1,
                                                                      n_startup=2)
    assert again == [first[0]]


def test_outcomes_tell_the_documented_values_and_states(url):
    search = CellSearch(url, "s")
    search.ask("c", 5, lr_min=1e-3, lr_max=1e-1, n_startup=2)
    search.tell("c", 0, "reached", steps_to_target=123.5, budget_steps=400)
    search.tell("c", 1, "censored", steps_to_target=None, budget_steps=400)
    search.tell("c", 2, "pruned")
    search.tell("c", 3, "diverged")
    search.tell("c", 4, "failed")
    search.tell("c", 4, "failed")  # telling twice is harmless (a repeated end)
    study = optuna.load_study(storage=url, study_name=cell_study_name("s", "c"))
    trials = {t.number: t for t in study.get_trials()}
    assert (trials[0].state, trials[0].value) == (TrialState.COMPLETE, 123.5)
    assert (trials[1].state, trials[1].value, trials[1].user_attrs) == (TrialState.COMPLETE, 400.0, {"censored": True})
    assert trials[2].state == TrialState.PRUNED
    assert trials[3].state == trials[4].state == TrialState.FAIL
    assert study.best_trial.number == 0


def _proposals(url: str, monkeypatch, *, cut_at: int | None = None, orphan_at: int | None = None) -> list:
    """Five trials of one cell proposed one at a time, each told a value as soon as it is made
    (steps to target, smallest near lr 0.01), as the runner does: ``[(number, lr)]`` of the trials
    started. ``cut_at``: that proposal dies between its two writes (the Optuna trial is written,
    its ``lr`` is not: a storage error raised inside); ``orphan_at``: that proposal is whole but
    its CBS trial is never made (a kill right after ``ask()``)."""
    started: dict[int, float] = {}

    def ask():
        return CellSearch(url, "s").ask("c", 1, lr_min=1e-3, lr_max=1e-1, n_startup=2, known_numbers=set(started))

    for i in range(5):
        if i == cut_at:
            def storage_error(*args, **kwargs):
                raise sqlalchemy.exc.OperationalError("INSERT INTO trial_params", {}, Exception("disk I/O error"))

            with monkeypatch.context() as m:
                m.setattr(optuna.trial.Trial, "suggest_float", storage_error)
                with pytest.raises(sqlalchemy.exc.OperationalError):
                    ask()
        if i == orphan_at:
            ask()
        [(number, lr)] = ask()
        started[number] = lr
        CellSearch(url, "s").tell("c", number, "reached", steps_to_target=100 + 1000 * abs(math.log(lr / 1e-2)))
    return list(started.items())


def test_an_interrupted_proposal_leaves_the_proposals_of_an_undisturbed_run(tmp_path, monkeypatch):
    undisturbed = _proposals(f"sqlite:///{tmp_path / 'a.db'}", monkeypatch)
    assert [n for n, _ in undisturbed] == [0, 1, 2, 3, 4] and len({lr for _, lr in undisturbed}) == 5
    assert _proposals(f"sqlite:///{tmp_path / 'b.db'}", monkeypatch) == undisturbed  # deterministic
    # the orphan of either cut is reused (never failed): same numbers, same seeds, same rates
    assert _proposals(f"sqlite:///{tmp_path / 'c.db'}", monkeypatch, cut_at=2) == undisturbed
    assert _proposals(f"sqlite:///{tmp_path / 'd.db'}", monkeypatch, orphan_at=3) == undisturbed
    states = [t.state for t in CellSearch(f"sqlite:///{tmp_path / 'c.db'}", "s").trials("c")]
    assert states == [TrialState.COMPLETE] * 5


def test_a_runner_killed_right_after_ask_starts_the_same_trial_on_its_next_pass(worker_env, tmp_path, monkeypatch):
    from tests.workers.conftest import tiny_spec
    from workers.infra.settings import WorkerSettings
    from workers.query import api
    from workers.studies.runner import Runner

    real_start, calls = Runner._start, []

    def killed_after_ask(self, ts, exp_id, parent_id):
        calls.append(ts.trial_id)
        if len(calls) == 1:  # the proposal is in Optuna, the trial is not: the process dies here
            raise KeyboardInterrupt
        return real_start(self, ts, exp_id, parent_id)

    monkeypatch.setattr(Runner, "_start", killed_after_ask)
    spec = tiny_spec("ask1", batch_sizes=[8], search={"kind": "optuna", "n_trials": 2, "parallel_per_cell": 1,
                                                      "lr_min": 3e-3, "lr_max": 3e-2})
    with pytest.raises(KeyboardInterrupt):
        api.launch_study(spec)
    Runner().advance("ask1")  # the next pass
    [record] = api.study_records("ask1")
    [(number, lr)] = CellSearch(f"sqlite:///{tmp_path / 'undisturbed.db'}", "ask1").ask(
        record.cell_id, 1, lr_min=3e-3, lr_max=3e-2, n_startup=2)
    assert (record.search_number, record.lr, record.trial_id) == (number, lr, calls[0]) == (0, lr, calls[1])
    trials = CellSearch(WorkerSettings.from_env().optuna_storage, "ask1").trials(record.cell_id)
    assert [(t.number, t.state, t.params["lr"]) for t in trials] == [(0, TrialState.RUNNING, lr)]  # not failed
