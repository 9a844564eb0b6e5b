"""Issue 22, finding 7: reports and exports are seen whole or not at all."""

from __future__ import annotations

import os
import stat

import pytest

from workers.infra import atomic_files


def test_a_folder_is_replaced_whole(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "old.csv").write_text("old")
    new = atomic_files.new_folder_beside(out)
    assert new.parent == tmp_path  # beside the target: one filesystem, one rename
    (new / "new.csv").write_text("new")
    atomic_files.replace_folder(new, out)
    assert [p.name for p in out.iterdir()] == ["new.csv"]
    assert [p.name for p in tmp_path.iterdir()] == ["report"]


def test_a_folder_is_put_in_place_where_none_was(tmp_path):
    new = atomic_files.new_folder_beside(tmp_path / "a" / "report")
    (new / "x").write_text("x")
    atomic_files.replace_folder(new, tmp_path / "a" / "report")
    assert (tmp_path / "a" / "report" / "x").read_text() == "x"


def test_a_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "steps.csv"
    path.write_text("old\n")
    atomic_files.write_text(path, "new\n")
    assert path.read_text() == "new\n" and stat.S_IMODE(path.stat().st_mode) == 0o644
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(OSError):
        atomic_files.write_text(path, "cut short\n")
    assert path.read_text() == "new\n"  # the old version, whole
    assert [p.name for p in tmp_path.iterdir()] == ["steps.csv"]


def test_export_writes_its_file_atomically(worker_env, tmp_path):
    from cbs import main as cbs_main
    from tests.app import store_seed
    from workers.infra.settings import WorkerSettings
    from workers.tracking import Tracker

    s = WorkerSettings.from_env()
    spec = store_seed.spec_for("exp1", n_settings=1, batch_sizes=(8, 16), lrs=(0.01,), b_ref=8)
    store_seed.seed_study(Tracker(s.tracking_uri, worker_env["CBS_ARTIFACT_ROOT"]), spec)
    out = tmp_path / "out" / "steps.csv"
    out.parent.mkdir()
    out.write_text("an earlier export, longer than the new one " * 100)
    assert cbs_main(["study", "export", "exp1", "-o", str(out)]) == 0
    assert out.read_text().startswith("setting,") and "earlier" not in out.read_text()
    assert [p.name for p in out.parent.iterdir()] == ["steps.csv"]


def test_the_hidden_folders_of_a_writer_killed_mid_write_are_removed_by_the_next(tmp_path):
    """Issue 42, finding 9: a report killed mid-write (SIGKILL) leaves its hidden folder; the next
    write of the same target removes it, and never the folder of a writer still running."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "rel"
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from workers.infra import atomic_files as a; "
        f"new = a.new_folder_beside({str(out)!r}); (new / 'half.csv').write_text('x'); "
        "print(new.name, flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    killed = child.stdout.readline().strip()
    assert killed.startswith(f".rel.{child.pid}-")
    mine = atomic_files.new_folder_beside(out)  # while the writer runs: its folder stays
    assert (tmp_path / killed).is_dir()
    child.send_signal(signal.SIGKILL)
    child.wait()
    legacy_old, legacy_new = tmp_path / ".rel.abcd1234", tmp_path / ".rel.old.wxyz5678"  # names before pids
    legacy_old.mkdir()
    legacy_new.mkdir()
    os.utime(legacy_old, (time.time() - 2 * atomic_files.LEFTOVER_AGE_S,) * 2)
    unrelated = tmp_path / ".rel.v2.abcd1234"  # another target's name, never touched
    unrelated.mkdir()
    os.utime(unrelated, (time.time() - 2 * atomic_files.LEFTOVER_AGE_S,) * 2)
    new = atomic_files.new_folder_beside(out)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert killed not in left and legacy_old.name not in left
    assert {mine.name, new.name, legacy_new.name, unrelated.name} <= set(left)  # live, fresh or not ours
