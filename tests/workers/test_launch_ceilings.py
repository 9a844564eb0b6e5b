"""Issue 41, finding 4: the lab's ceilings (CBS_MAX_TRIALS, ...) hold at launch and at an
extension whatever the spec's own limits say; only a forced launch (an admin's "Launch anyway",
the operator's --force) passes them, and the refusal comes before anything is built per trial."""

from __future__ import annotations

import time

import pytest

from cbscore.errors import ConfigError
from tests.workers.conftest import tiny_spec_dict
from workers.infra.broker_queues import queue_depth
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.tracking import Tracker


def test_a_study_past_the_labs_trial_ceiling_is_refused_though_its_own_max_trials_allows_it(worker_env, token_store,
                                                                                            monkeypatch):
    monkeypatch.setenv("CBS_MAX_TRIALS", "3")  # the tiny study plans 4 trials (4 batch sizes x 1 rate x 1 seed)
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        api.launch_study(tiny_spec_dict("past", max_trials=10**7))
    assert time.perf_counter() - start < 1.0
    assert err.value.field == "trials" and err.value.value == "4 trials" and "CBS_MAX_TRIALS" in err.value.reason
    assert Tracker(WorkerSettings.from_env().tracking_uri).client.get_experiment_by_name("past") is None
    assert queue_depth("cpu") == 0
    assert api.launch_study(tiny_spec_dict("forced"), force=True) == "forced"  # an admin's "Launch anyway"


def test_an_extension_cannot_grow_a_study_past_the_labs_ceiling(worker_env, token_store, monkeypatch):
    assert api.launch_study(tiny_spec_dict("grown")) == "grown"
    monkeypatch.setenv("CBS_MAX_TRIALS", "6")
    with pytest.raises(ConfigError) as err:  # 4 -> 12 trials: two more seeds, and max_trials raised to allow it
        api.extend_study("grown", {"seeds": [0, 1, 2], "max_trials": 10**6})
    assert err.value.field == "trials" and err.value.value == "12 trials"
    assert api.study_spec("grown").seeds == (0,)  # nothing changed
