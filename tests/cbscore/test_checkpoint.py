"""Checkpoints that cannot be read restart the trial; a cut save leaves no litter (issue 12)."""

from __future__ import annotations

import pytest
import torch

from cbscore.train.checkpoint import load_checkpoint, save_checkpoint


def test_round_trip_and_leftover_temporary_files_are_removed(tmp_path):
    save_checkpoint(tmp_path, {"step": 7, "w": torch.ones(3)})
    (tmp_path / ".checkpoint-abc.tmp").write_bytes(b"half a save")  # a SIGKILL between mkstemp and replace
    ckpt = load_checkpoint(tmp_path)
    assert ckpt["step"] == 7 and torch.equal(ckpt["w"], torch.ones(3))
    assert not list(tmp_path.glob(".checkpoint-*.tmp"))


def test_a_corrupt_checkpoint_is_moved_aside_and_the_trial_starts_over(tmp_path):
    save_checkpoint(tmp_path, {"step": 7})
    data = (tmp_path / "checkpoint.pt").read_bytes()
    (tmp_path / "checkpoint.pt").write_bytes(data[: len(data) // 2])  # truncated
    with pytest.warns(RuntimeWarning, match="restarts from step 0"):
        assert load_checkpoint(tmp_path) is None
    assert (tmp_path / "checkpoint.pt.corrupt").exists() and not (tmp_path / "checkpoint.pt").exists()
    assert load_checkpoint(tmp_path) is None  # and stays a fresh start


def test_no_folder_means_no_checkpoint(tmp_path):
    assert load_checkpoint(tmp_path / "missing") is None


def test_a_folder_removed_under_a_save_is_not_made_again(tmp_path, monkeypatch):
    # A holder overtaken by a newer attempt: that attempt clears the folder while the old holder
    # is writing (between its last ledger check and the rename). Nothing saved, nothing recreated.
    import os
    import shutil

    from cbscore.train import checkpoint

    folder = tmp_path / "trial"
    assert save_checkpoint(folder, {"step": 1}) == folder / "checkpoint.pt"
    fsync = os.fsync
    monkeypatch.setattr(checkpoint.os, "fsync", lambda fd: (fsync(fd), shutil.rmtree(folder)))
    assert save_checkpoint(folder, {"step": 2}, create=False) is None
    assert not folder.exists()
    monkeypatch.setattr(checkpoint.os, "fsync", fsync)
    assert save_checkpoint(folder, {"step": 3}, create=False) is None  # gone before: not made again
    assert not folder.exists()
    assert save_checkpoint(folder, {"step": 4}) is not None  # a first save makes it


def test_a_save_is_durable_in_order_file_then_rename_then_folder(tmp_path, monkeypatch):
    # On a shared mount (CBS_CHECKPOINT_DIR on NFS) another host's next attempt reads what the
    # folder says after the writer dies: the file's bytes must be on disk before its name
    # changes, and the rename before the save returns.
    import os
    import stat

    from cbscore.train import checkpoint

    events = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd):
        events.append(("fsync", "folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"))
        fsync(fd)

    def recording_replace(src, dst):
        events.append(("replace", os.path.basename(dst)))
        replace(src, dst)

    monkeypatch.setattr(checkpoint.os, "fsync", recording_fsync)
    monkeypatch.setattr(checkpoint.os, "replace", recording_replace)
    folder = tmp_path / "trials" / "t1"
    save_checkpoint(folder, {"step": 1})  # a new folder: its name made durable in its parent first
    assert events == [("fsync", "folder"), ("fsync", "file"), ("replace", "checkpoint.pt"), ("fsync", "folder")]
    events.clear()
    save_checkpoint(folder, {"step": 2}, create=False)
    assert events == [("fsync", "file"), ("replace", "checkpoint.pt"), ("fsync", "folder")]
    assert load_checkpoint(folder)["step"] == 2 and sorted(p.name for p in folder.iterdir()) == ["checkpoint.pt"]
