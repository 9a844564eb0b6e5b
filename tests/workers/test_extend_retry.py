"""Issue 25: a study grows (``cbs study extend``) and re-runs what failed (``cbs study retry``)
without training a finished trial again. Trials run in this process, one after another
(``run_trial_attempt``: the worker's own code), so every count is exact."""

from __future__ import annotations

import pytest

from cbs import main as cbs_main
from cbscore.errors import ConfigError
from tests.workers.conftest import tiny_spec
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.tracking import Tracker


def drain(name: str, limit: int = 40) -> list[str]:
    """Run every queued trial of ``name`` until none is left; returns the trial ids run, in order."""
    from workers.trials.trial import run_trial_attempt

    ran = []
    for _ in range(limit):
        queued = [r for r in api.study_records(name) if r.status == "queued"]
        if not queued:
            return ran
        for r in queued:
            run_trial_attempt(name, r.trial_id, r.attempt, worker="test")
            ran.append(r.trial_id)
    raise AssertionError(f"{name} still has queued trials after {limit} rounds")


def ended(name: str) -> dict[str, tuple[str, int]]:
    """``{trial_id: (run id, end time)}`` of every ended trial run: a trial trained again would change both."""
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    return {r.trial_id: (r.run_id, tracker.get_run(r.run_id).info.end_time) for r in api.study_records(name)
            if r.terminal}


def test_extending_a_finished_study_by_a_batch_size_and_a_seed_runs_only_the_new_trials(worker_env, token_store,
                                                                                     capsys, tmp_path):
    name = "ext1"
    api.launch_study(tiny_spec(name, batch_sizes=[4, 8, 16]))
    first = drain(name)
    assert len(first) == 3 and api.study_status(name).status == "done"
    before, table = ended(name), api.study_table(name)
    assert sorted(r.batch_size for r in table) == [4, 8, 16]

    patch = tmp_path / "patch.yaml"
    patch.write_text("batch_sizes: [4, 8, 16, 32]\nseeds: [0, 1]\n")
    assert cbs_main(["study", "extend", name, str(patch)]) == 0
    out = capsys.readouterr().out
    assert "batch_sizes: + [32]" in out and "seeds: + [1]" in out and "targets pinned: tiny-0.1M_D15K" in out
    assert api.study_status(name).status == "running"
    second = drain(name)
    # seed 1 in all four cells and seed 0 at the new B = 32: five trials, none of the first three again
    assert len(second) == 5 and not set(second) & set(first)
    assert sorted((t.split(".b")[1].split(".")[0], t[-2:]) for t in second) == \
        [("16", "s1"), ("32", "s0"), ("32", "s1"), ("4", "s1"), ("8", "s1")]
    after = ended(name)
    assert {t: after[t] for t in before} == before  # same runs, not ended again
    assert api.study_status(name).status == "done"
    table = api.study_table(name)
    assert sorted((r.batch_size, r.seed) for r in table) == [(b, s) for b in (4, 8, 16, 32) for s in (0, 1)]
    # the target stayed where the first version set it, and the spec history has both versions
    spec = api.study_spec(name)
    assert spec.seeds == (0, 1) and spec.pinned_targets is not None
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    parent = tracker.study_run(name)
    assert parent.data.tags["spec_version"] == "2"
    artifacts = {a.path for a in tracker.client.list_artifacts(parent.info.run_id, "spec-history")}
    assert artifacts == {"spec-history/v1.yaml", "spec-history/v2.yaml"}
    # the fit reads all eight trials
    fit = api.study_fit(name, bootstrap=0)
    assert sorted(p.batch_size for p in fit.settings[0].points) == [4, 8, 16, 32]


def test_an_extension_that_changes_what_ran_is_refused_and_changes_nothing(worker_env, token_store, capsys):
    name = "ext2"
    api.launch_study(tiny_spec(name, batch_sizes=[4, 8]))
    with pytest.raises(ConfigError, match="b_ref: decides what the trials already run measured"):
        api.extend_study(name, {"b_ref": 4})
    assert cbs_main(["study", "extend", name, "context_tokens: 32\n"]) == 2
    assert "context_tokens: decides what the trials already run measured" in capsys.readouterr().err
    assert api.study_spec(name) == tiny_spec(name, batch_sizes=[4, 8])
    assert "spec_version" not in Tracker(WorkerSettings.from_env().tracking_uri).study_run(name).data.tags


def test_retry_runs_exactly_the_failed_trials_again_as_new_trials(worker_env, token_store, monkeypatch, capsys):
    import cbscore.train.trainer as train_module

    name = "retry1"
    api.launch_study(tiny_spec(name, batch_sizes=[4, 8, 16]))
    real = train_module.train

    def broken(config, callbacks=()):
        if config.batch_size == 16:
            raise RuntimeError("a bad node")
        return real(config, callbacks)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(train_module, "train", broken)
        with pytest.raises(RuntimeError):
            drain(name)
        drain(name)  # the rest
    records = {r.trial_id: r for r in api.study_records(name)}
    [failed] = [t for t, r in records.items() if r.status == "failed"]
    assert ".b16." in failed and api.study_status(name).status == "done"
    before = ended(name)

    assert cbs_main(["study", "retry", name, "--failed"]) == 0
    assert f"{failed}.retry1" in capsys.readouterr().out
    assert drain(name) == [f"{failed}.retry1"]
    records = {r.trial_id: r for r in api.study_records(name)}
    assert records[failed].status == "failed" and records[f"{failed}.retry1"].status in ("reached", "censored")
    assert {t: v for t, v in ended(name).items() if t in before} == before
    run = Tracker(WorkerSettings.from_env().tracking_uri).get_run(records[f"{failed}.retry1"].run_id)
    assert run.data.tags["retry_of"] == failed and run.data.tags["retry_reason"].startswith("failed (RuntimeError: a bad node")
    assert sorted(r.batch_size for r in api.study_table(name) if r.outcome != "failed") == [4, 8, 16]
    # nothing failed any more: a second retry runs nothing
    assert api.retry_study(name) == []
    with pytest.raises(ConfigError, match="budget_factor"):
        api.retry_study(name, censored=True, budget_factor=1.0)
