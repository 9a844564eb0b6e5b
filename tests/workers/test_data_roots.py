"""A spec's data paths are refused at launch with nothing created, and checked again by the worker
before it reads anything: a tampered ``trial_spec`` tag in MLflow cannot walk the server's files
(issue 21, findings 2 and 7)."""

from __future__ import annotations

import json
import time

import pytest

from cbscore.errors import ConfigError
from tests.workers.conftest import DATA, tiny_spec, tiny_spec_dict
from workers.infra.broker_queues import queue_depth
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.ledger import Ledger
from workers.tracking import Tracker


@pytest.mark.parametrize("data, field", [
    ({"source": "/"}, "data.source"),
    ({"source": "/etc/passwd"}, "data.source"),
    ({"source": "/root"}, "data.source"),
    ({"source": "hub:/etc", "max_documents": 10}, "data.source"),
    ({"source": "builtin", "store_dir": "/var/lib/other-lab/store"}, "data.store_dir"),
])
def test_a_data_path_outside_the_roots_is_refused_at_launch_with_nothing_created(worker_env, data, field):
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        api.launch_study(tiny_spec_dict("paths", data=data), force=True)
    assert time.perf_counter() - start < 1.0 and err.value.field == field
    s = WorkerSettings.from_env()
    assert Tracker(s.tracking_uri).client.get_experiment_by_name("paths") is None
    assert Ledger(s.ledger_url).leases("paths") == {} and queue_depth("cpu") == 0


def test_the_worker_refuses_a_tampered_source_before_reading_it(worker_env, token_store, monkeypatch):
    from pathlib import Path

    from workers.trials.trial import run_trial_attempt

    api.launch_study(tiny_spec("tampered"))
    [record] = api.study_records("tampered")
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    spec = json.loads(tracker.get_run(record.run_id).data.tags["trial_spec"])
    spec["train_config"]["data"] = {**DATA, "source": "/etc", "store_dir": None}
    tracker.set_tags(record.run_id, {"trial_spec": json.dumps(spec)})  # anyone who can write to MLflow

    rglob = Path.rglob

    def walked(self, *a, **k):
        # Only the tampered source may not be walked: the lab's own cache pruning under
        # CBS_HOME walks its folder every 50th save, whichever test that save falls in.
        if Path("/etc") in (self, *self.parents):
            raise AssertionError("the source was walked")
        return rglob(self, *a, **k)

    monkeypatch.setattr(Path, "rglob", walked)
    with pytest.raises(ConfigError):
        run_trial_attempt("tampered", record.trial_id, 1)
    run = tracker.get_run(record.run_id)
    assert run.data.tags["status"] == "failed"
    assert run.data.tags["stop_reason"].startswith("ConfigError: data.source: must be 'builtin'")


def test_a_spec_cannot_take_over_another_studys_store_at_launch_or_in_the_worker(worker_env, token_store):
    """Issue 41, finding 6: a spec naming the folder of a store another study reads, with other
    settings, is refused by field at launch (fast, nothing created), and the store stays as it was."""
    manifest = (token_store.path / "manifest.json").read_text()
    theirs = {**DATA, "store_dir": str(token_store.path), "vocab_size": 300}
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        api.launch_study(tiny_spec_dict("takeover", data=theirs), force=True)
    assert time.perf_counter() - start < 1.0
    assert err.value.field == "data.store_dir" and err.value.value == str(token_store.path)
    assert "holds a token store prepared with other settings" in err.value.reason
    s = WorkerSettings.from_env()
    assert Tracker(s.tracking_uri).client.get_experiment_by_name("takeover") is None and queue_depth("cpu") == 0
    # the worker's own check (a tampered trial_spec) refuses it too, before building anything
    from cbscore.data import DataConfig, prepare

    with pytest.raises(ConfigError, match="data.store_dir: holds a token store prepared with other settings"):
        prepare(DataConfig(**theirs))
    assert (token_store.path / "manifest.json").read_text() == manifest
    # the same settings share it, untouched
    api.launch_study(tiny_spec_dict("sharer", data={**DATA, "store_dir": str(token_store.path)}), force=True)
    assert (token_store.path / "manifest.json").read_text() == manifest


def test_a_store_dir_outside_the_labs_store_folder_or_named_as_another_settings_store_is_refused_at_launch(
        worker_env, monkeypatch):
    """Issue 41, finding 6 (rest): a store is written only inside the lab's store folder (never in a
    corpus root, though a corpus there may be read), and never under the name of other settings'
    default store, which a study of those settings has not prepared yet."""
    import os
    from pathlib import Path

    from cbscore.data import DataConfig
    from cbscore.paths import store_root

    monkeypatch.delenv("CBS_STORE_ROOTS", raising=False)
    home = Path(os.environ["CBS_HOME"])
    corpora = home / "corpora" / "mine"
    victim = DataConfig.from_dict({**DATA, "store_dir": None, "vocab_size": 512})
    squatted = store_root() / victim.key()
    for folder, reason in ((corpora, "must be a folder inside the lab's store folder"),
                           ("/tmp/elsewhere-store", "must be a folder inside the lab's store folder"),
                           (squatted, "is named as the default store of other settings")):
        start = time.perf_counter()
        with pytest.raises(ConfigError) as err:
            api.launch_study(tiny_spec_dict("stores", data={**DATA, "store_dir": str(folder)}), force=True)
        assert time.perf_counter() - start < 1.0, folder
        assert err.value.field == "data.store_dir" and err.value.value == str(folder) and reason in err.value.reason
    s = WorkerSettings.from_env()
    assert Tracker(s.tracking_uri).client.get_experiment_by_name("stores") is None and queue_depth("cpu") == 0
    assert not corpora.exists() and not squatted.exists()


def test_a_huge_vocabulary_is_refused_at_launch_naming_the_field_with_nothing_created(worker_env):
    """Issue 41, finding 9: the tokenizer trainer asked for 283 GB and aborted the trial process."""
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        api.launch_study(tiny_spec_dict("huge-vocab", data={**DATA, "vocab_size": 2**32 - 1}), force=True)
    assert time.perf_counter() - start < 1.0
    assert err.value.field == "vocab_size" and err.value.value == 2**32 - 1 and "at most 1,048,576" in err.value.reason
    s = WorkerSettings.from_env()
    assert Tracker(s.tracking_uri).client.get_experiment_by_name("huge-vocab") is None and queue_depth("cpu") == 0


def test_launch_takes_a_path_string_as_text_and_never_reads_the_file(worker_env, tmp_path):
    """Issue 41, finding 1: only the command line reads a spec file (``cbs study launch SPEC.yaml``)."""
    from cbscore.errors import shown

    secret = tmp_path / "hosts.yml"
    secret.write_text("name: leaked\nkind: custom\noauth_token: gho_notforpages\n")
    with pytest.raises(ConfigError) as err:
        api.launch_study(str(secret))
    assert (err.value.field, err.value.value) == ("spec", str(secret))
    assert str(err.value) == f"spec: must be a mapping of fields, but got {shown(str(secret))}."
    assert "gho_notforpages" not in str(err.value)
    with pytest.raises(ConfigError, match="unknown|not a study field"):  # the CLI's reading still opens it
        api.resolve_spec(str(secret))
