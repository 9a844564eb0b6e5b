"""Optuna per cell: proposals inside the range and independent of who asks, and what each
outcome tells the sampler (the semantics in workers/studies/search.py)."""

from __future__ import annotations

import optuna
import pytest
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


def test_orphans_of_a_crash_between_ask_and_enqueue_are_failed(url):
    search = CellSearch(url, "s")
    search.ask("c", 3, lr_min=1e-3, lr_max=1e-1, n_startup=2)
    assert search.fail_orphans("c", known_numbers={0, 2}) == 1
    states = [t.state for t in search.trials("c")]
    assert states == [TrialState.RUNNING, TrialState.FAIL, TrialState.RUNNING]
