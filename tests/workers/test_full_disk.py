"""Issue 22, finding 2: a full disk is an outage, not the trial's fault.

ENOSPC on a checkpoint write gives the same attempt back (it used to end the trial ``failed`` and
S(B) came silently from the other learning rates), with the reason on the run and the Studies
page; nothing is written into the checkpoint folder before ``release`` (the give-back count used
to be, and on a full disk the lease stayed ``running``); when there is room again the trial ends
as if nothing had happened.
"""

from __future__ import annotations

import errno
import os
import pathlib
import subprocess
from pathlib import Path

import pytest

import cbscore.train.checkpointer as checkpointer_module
from tests.workers.conftest import tiny_spec
from workers.infra.checkpoints import checkpoint_dir
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.ledger import Ledger
from workers.tracking import Tracker, is_out_of_resources, is_transient


def test_resource_errors_are_outages():
    full = OSError(errno.ENOSPC, "No space left on device")
    wrapped = RuntimeError("PytorchStreamWriter failed writing file")
    wrapped.__context__ = full
    for exc in (full, wrapped, OSError(errno.EDQUOT, "Disk quota exceeded"), OSError(errno.EMFILE, "Too many")):
        assert is_out_of_resources(exc) and is_transient(exc)
    assert not is_out_of_resources(OSError(errno.EACCES, "Permission denied"))
    assert not is_transient(FileNotFoundError(errno.ENOENT, "gone"))


def launch(name: str):
    api.launch_study(tiny_spec(name, batch_sizes=[8]))
    [record] = api.study_records(name)
    return record


def assert_given_back(name: str, record, out: dict) -> None:
    assert "No space left on device" in out["requeued"]
    lease = Ledger(WorkerSettings.from_env().ledger_url).lease(record.trial_id)
    assert (lease.state, lease.attempt, lease.outcome) == ("queued", 1, None)  # released, no attempt spent
    run = Tracker(WorkerSettings.from_env().tracking_uri).get_run(record.run_id)
    assert run.info.status == "SCHEDULED" and run.data.tags["given_back"].startswith("out of resources")
    [again] = api.study_records(name)
    assert again.status == "queued" and "No space left on device" in again.note
    from app.study_view import waiting_notices  # the Studies page's banner

    [notice] = waiting_notices([again])
    assert notice.startswith("1 trial(s) wait for room on a worker's host: out of resources on this host") and \
        "No space left on device" in notice, notice


def test_a_full_disk_at_a_checkpoint_gives_the_attempt_back(worker_env, token_store):
    """Injected: every write into the checkpoint folders fails with ENOSPC (the checkpoint and the
    give-back count alike); the lease is released all the same."""
    from workers.trials.trial import run_trial_attempt

    record = launch("full1")
    folders = str(Path(checkpoint_dir(record.trial_id)).parent)

    def full(what):
        def refuse(self, *args, **kwargs):
            if str(self).startswith(folders):
                raise OSError(errno.ENOSPC, "No space left on device", str(self))
            return what(self, *args, **kwargs)

        return refuse

    def no_room(folder, payload, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(folder))

    with pytest.MonkeyPatch.context() as disk:
        disk.setattr(checkpointer_module, "save_checkpoint", no_room)
        disk.setattr(pathlib.Path, "write_text", full(pathlib.Path.write_text))
        disk.setattr(pathlib.Path, "mkdir", full(pathlib.Path.mkdir))
        out = run_trial_attempt("full1", record.trial_id, 1, worker="test")
    assert_given_back("full1", record, out)
    # room again
    done = run_trial_attempt("full1", record.trial_id, 1, worker="test")
    assert (done["outcome"], done["attempt"]) == ("finished", 1)
    assert api.study_records("full1")[0].note == ""


@pytest.fixture
def full_filesystem(worker_env):
    """``$CBS_HOME/checkpoints`` on a small tmpfs made here and filled to the last byte (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    folder = Path(worker_env["CBS_HOME"]) / "checkpoints"
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    filler = folder / "filler"
    try:
        with open(filler, "wb") as handle:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    try:
        yield filler
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_real_full_disk_fails_nothing_for_good(worker_env, token_store, full_filesystem):
    from workers.trials.trial import run_trial_attempt

    record = launch("full2")
    out = run_trial_attempt("full2", record.trial_id, 1, worker="test")
    assert_given_back("full2", record, out)
    full_filesystem.unlink()  # room again
    done = run_trial_attempt("full2", record.trial_id, 1, worker="test")
    assert (done["outcome"], done["attempt"]) == ("finished", 1)
