"""Every trial task carries a hard time limit derived from its budget, unless the operator sets
``CBS_TRIAL_TIME_LIMIT_S`` (issue 21, finding 8: with no default limit, a trial of a spec past the
sanity limits never ended)."""

from __future__ import annotations

import json
import time

import pytest

from cbscore.errors import ConfigError
from tests.workers.conftest import tiny_spec, tiny_spec_dict
from workers.infra.broker_queues import queue_depth
from workers.infra.settings import WorkerSettings
from workers.infra.time_limits import BASE_S, FLOOR_FLOPS, derived_time_limit_s, trial_flops, trial_time_limit_s
from workers.query import api
from workers.studies.ledger import Ledger
from workers.studies.runner import Runner
from workers.tracking import Tracker

CONFIG = {"model": "tiny-0.1M", "batch_size": 8, "context_tokens": 16, "max_tokens": 15_000, "max_steps": None,
          "max_eval_fraction": 0.5, "data": {"vocab_size": 320}}


def queued_time_limits(home) -> list:
    """The (hard, soft) time limits of every message in the filesystem broker's queue (Celery's header)."""
    return [json.loads(p.read_text())["headers"]["timelimit"] for p in sorted((home / "broker" / "queue").glob("*"))]


def test_the_derived_limit_is_the_base_plus_the_budget_at_the_floor_rate():
    from cbscore.study.models import model_info

    per_token = model_info("tiny-0.1M", 16, 320)[1]
    assert trial_flops(CONFIG) == pytest.approx(15_000 * per_token * 1.5)
    assert derived_time_limit_s(CONFIG, "cpu") == round(BASE_S + 15_000 * per_token * 1.5 / FLOOR_FLOPS["cpu"])
    capped = {**CONFIG, "max_steps": 10}  # a step cap shortens the budget: 10 steps of 8 x 16 tokens
    assert trial_flops(capped) == pytest.approx(10 * 8 * 16 * per_token * 1.5)
    assert derived_time_limit_s(CONFIG, "gpu") < derived_time_limit_s(CONFIG, "cpu")


def test_the_operators_limit_replaces_the_derived_one():
    s = WorkerSettings.from_env({"CBS_TRIAL_TIME_LIMIT_S": "60"})
    assert trial_time_limit_s(s, CONFIG, "cpu") == 60.0
    assert trial_time_limit_s(WorkerSettings.from_env({}), CONFIG, "cpu") == derived_time_limit_s(CONFIG, "cpu")


def test_a_launched_trial_is_sent_with_its_derived_limit_and_so_is_a_resend(worker_env, tmp_path):
    api.launch_study(tiny_spec("tl"))
    [record] = api.study_records("tl")
    spec = json.loads(Tracker(WorkerSettings.from_env().tracking_uri).get_run(record.run_id).data.tags["trial_spec"])
    expected = derived_time_limit_s(spec["train_config"], "cpu")
    assert expected > BASE_S
    home = tmp_path / "home"
    assert [hard for hard, _ in queued_time_limits(home)] == [expected]
    Runner().send("tl", record.trial_id, 2, "cpu")  # a requeue: the limit read back from the run
    assert sorted(hard for hard, _ in queued_time_limits(home)) == [expected, expected]


def test_huge_tokens_with_force_are_refused_by_name_with_nothing_created(worker_env):
    """``tokens: 1e30`` with --force ended in ``ValueError: decay must be in (0, 1)`` from recipe.py."""
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        api.launch_study(tiny_spec_dict("huge", settings=[{"model": "tiny-0.1M", "tokens": 10**30}]), force=True)
    assert time.perf_counter() - start < 1.0 and err.value.field == "settings[0].tokens"
    s = WorkerSettings.from_env()
    assert Tracker(s.tracking_uri).client.get_experiment_by_name("huge") is None
    assert Ledger(s.ledger_url).leases("huge") == {} and queue_depth("cpu") == 0
