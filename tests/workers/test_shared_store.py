"""Issue 22, finding 5: several hosts share one checkpoint folder and one token store.

``CBS_CHECKPOINT_DIR`` and ``CBS_STORE_DIR`` move the two folders out of ``$CBS_HOME``. A study's
first trial pins its store's digest in the ledger; a host that cannot see that store, or whose
copy differs, gives the attempt back (no attempt spent, never failed for it) instead of
preparing a store of its own. Here one process plays both hosts by switching ``CBS_STORE_DIR``
(the real two-host run is ``test_two_hosts.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cbscore.data import DataConfig
from cbscore.data.store import check_store_location, content_digest
from cbscore.errors import ConfigError
from tests.workers.conftest import DATA, tiny_spec
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.ledger import Ledger
from workers.tracking import Tracker

#: The tests' small store settings, with no ``store_dir``: the store is ``<CBS_STORE_DIR>/<key>``.
SHARED = {k: v for k, v in DATA.items() if k != "store_dir"}


def test_checkpoints_and_stores_live_under_their_shared_folders(worker_env, tmp_path, monkeypatch):
    from cbscore.data.roots import data_roots
    from workers.infra.checkpoints import checkpoint_dir

    home = Path(worker_env["CBS_HOME"])
    assert Path(checkpoint_dir("t1")) == home.resolve() / "checkpoints" / "t1"  # the default
    assert DataConfig(**SHARED).store_path() == home.resolve() / "data" / DataConfig(**SHARED).key()
    monkeypatch.setenv("CBS_CHECKPOINT_DIR", str(tmp_path / "nfs" / "checkpoints"))
    monkeypatch.setenv("CBS_STORE_DIR", str(tmp_path / "nfs" / "stores"))
    monkeypatch.delenv("CBS_DATA_ROOTS")
    monkeypatch.delenv("CBS_STORE_ROOTS", raising=False)
    assert Path(checkpoint_dir("t1")) == (tmp_path / "nfs" / "checkpoints" / "t1").resolve()
    config = DataConfig(**SHARED)
    assert config.store_path() == (tmp_path / "nfs" / "stores").resolve() / config.key()
    # the store root replaces $CBS_HOME/data as a data root: a host's own folder is not shared
    assert data_roots() == [(tmp_path / "nfs" / "stores").resolve(), home.resolve() / "corpora"]
    with pytest.raises(ConfigError, match="must be a folder inside the lab's store folder"):
        check_store_location(home / "data" / "mine")
    check_store_location(tmp_path / "nfs" / "stores" / "mine")
    monkeypatch.setenv("CBS_STORE_ROOTS", str(tmp_path / "nfs"))  # the store root inside another root
    with pytest.raises(ConfigError, match="the folder of all token stores"):
        check_store_location(tmp_path / "nfs" / "stores")


def test_a_store_never_overlaps_the_checkpoints(worker_env, tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_STORE_ROOTS", str(tmp_path))
    monkeypatch.setenv("CBS_CHECKPOINT_DIR", str(tmp_path / "shared" / "checkpoints"))
    for bad in (tmp_path / "shared" / "checkpoints", tmp_path / "shared" / "checkpoints" / "s", tmp_path / "shared"):
        with pytest.raises(ConfigError, match="CBS_CHECKPOINT_DIR"):
            check_store_location(bad)
    check_store_location(tmp_path / "shared" / "store")


def test_the_first_pin_of_a_study_holds(worker_env):
    ledger = Ledger(WorkerSettings.from_env().ledger_url)
    assert ledger.store_pin("s") is None
    first = ledger.pin_store("s", path="/a", digest="d1", host="h1", now_s=1.0)
    second = ledger.pin_store("s", path="/b", digest="d2", host="h2", now_s=2.0)
    assert (first.path, first.digest, first.host) == ("/a", "d1", "h1") and second == first


@pytest.fixture
def shared_stores(worker_env, tmp_path, monkeypatch):
    """Host A's view: ``CBS_STORE_DIR`` is the shared folder (empty: the first trial prepares it)."""
    folder = tmp_path / "shared-stores"
    monkeypatch.setenv("CBS_STORE_DIR", str(folder))
    return folder


def launch(name: str, **changes):
    api.launch_study(tiny_spec(name, batch_sizes=[8], data=dict(SHARED), **changes))
    return api.study_records(name)


def test_the_first_trial_prepares_the_shared_store_and_pins_it(shared_stores):
    from workers.trials.trial import run_trial_attempt

    [record] = launch("pin1")
    out = run_trial_attempt("pin1", record.trial_id, 1, worker="a")
    assert out["outcome"] == "finished"
    store = shared_stores / DataConfig(**SHARED).key()
    pin = Ledger(WorkerSettings.from_env().ledger_url).store_pin("pin1")
    assert (Path(pin.path), pin.digest) == (store.resolve(), content_digest(store))


def assert_given_back_for_the_store(name: str, record, out: dict, *words: str) -> None:
    lease = Ledger(WorkerSettings.from_env().ledger_url).lease(record.trial_id)
    assert (lease.state, lease.attempt, lease.outcome) == ("queued", 1, None)  # no attempt spent
    run = Tracker(WorkerSettings.from_env().tracking_uri).get_run(record.run_id)
    assert run.info.status == "SCHEDULED"
    reason = run.data.tags["given_back"]
    assert reason.startswith("this host cannot use the token store at ") and all(w in reason for w in words), reason
    assert all(w in out["requeued"] for w in words)
    [again] = [r for r in api.study_records(name) if r.trial_id == record.trial_id]
    assert again.status == "queued" and again.note.startswith("this host cannot use")
    from app.study_view import waiting_notices  # the Studies page's banner

    [notice] = waiting_notices(api.study_records(name))
    assert notice.startswith("1 trial(s) wait for a host that can see the study's token store: this host cannot "
                             "use the token store at ") and all(w in notice for w in words), notice


def test_a_host_that_cannot_see_the_store_gives_the_attempt_back_and_builds_none(shared_stores, tmp_path,
                                                                                 monkeypatch):
    """Host B has no mount where the shared store should be (an empty local folder): its attempts go
    back, naming the path and the setting, hold the slot for the back-off, never count against
    CBS_MAX_GIVE_BACKS, and build nothing; on a host that sees the store the trial finishes."""
    import workers.trials.trial as trial
    from workers.trials.trial import run_trial_attempt

    first, second = launch("pin2", seeds=[0, 1])
    assert run_trial_attempt("pin2", first.trial_id, 1, worker="a")["outcome"] == "finished"  # pins the store
    held = []
    monkeypatch.setattr(trial, "hold_slot", held.append)
    monkeypatch.setenv("CBS_MAX_GIVE_BACKS", "1")
    host_b = tmp_path / "host-b-stores"
    monkeypatch.setenv("CBS_STORE_DIR", str(host_b))
    missing = str(host_b.resolve() / DataConfig(**SHARED).key())
    for _ in range(2):  # past CBS_MAX_GIVE_BACKS: still given back, not failed
        out = run_trial_attempt("pin2", second.trial_id, 1, worker="b")
        assert_given_back_for_the_store("pin2", second, out, f"the token store at {missing}: set CBS_STORE_DIR")
    assert held == [15.0, 30.0]  # the back-off's waits (CBS_HEARTBEAT_S = 1: 15 s, then twice that)
    assert sorted(p.name for p in host_b.iterdir()) == []  # nothing prepared on host B
    monkeypatch.setenv("CBS_STORE_DIR", str(shared_stores))  # host A
    done = run_trial_attempt("pin2", second.trial_id, 1, worker="a")
    assert (done["outcome"], done["attempt"]) == ("finished", 1)


def test_a_copy_built_from_another_corpus_version_is_refused_and_an_identical_one_used(shared_stores, tmp_path,
                                                                                      monkeypatch):
    """Host B keeps its own copy of the store (rsync): a copy whose source fingerprint differs (made
    from another version of the built-in corpus) is refused, untouched; an identical copy (only its
    build time differs) is the same store."""
    import workers.trials.trial as trial
    from workers.trials.trial import run_trial_attempt

    first, second = launch("pin3", seeds=[0, 1])
    assert run_trial_attempt("pin3", first.trial_id, 1, worker="a")["outcome"] == "finished"
    monkeypatch.setattr(trial, "hold_slot", lambda s: None)
    key = DataConfig(**SHARED).key()
    copy = tmp_path / "host-b-stores" / key
    shutil.copytree(shared_stores / key, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["source_fingerprint"]["packages"]["pythonbible"] = "0.0.1"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("CBS_STORE_DIR", str(copy.parent))
    out = run_trial_attempt("pin3", second.trial_id, 1, worker="b")
    assert_given_back_for_the_store("pin3", second, out, f"the token store at {copy.resolve()}: set CBS_STORE_DIR")
    assert "another version of the corpus" in out["requeued"]
    assert json.loads((copy / "manifest.json").read_text()) == manifest  # not rebuilt
    shutil.rmtree(copy)
    shutil.copytree(shared_stores / key, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["created"] = "2000-01-01T00:00:00.000+00:00"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    done = run_trial_attempt("pin3", second.trial_id, 1, worker="b")
    assert (done["outcome"], done["attempt"]) == ("finished", 1)
