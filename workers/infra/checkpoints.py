"""Where a trial's checkpoint lives, and its removal at every terminal transition.

A trial resumes from ``<checkpoint root>/<trial_id>`` across attempts, so the folder belongs to the
trial, not to an attempt. The root is ``CBS_CHECKPOINT_DIR`` (a folder on a filesystem every host
mounts, so an attempt on another host resumes from it), else ``$CBS_HOME/checkpoints``
(:func:`cbscore.paths.checkpoint_root`). Whoever ends the trial (the holder at its outcome, the runner
failing a lost trial or repairing a cancelled study, a cancel of a queued trial) removes it.
``sweep`` removes the folders of trials whose lease is done, which also catches a superseded
holder that wrote one more checkpoint after the winner deleted the folder.

``CBS_KEEP_CHECKPOINTS=1`` keeps them (for debugging a trial).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cbscore import paths


def checkpoint_dir(trial_id: str) -> str:
    """The trial's checkpoint folder (not created here; its root is)."""
    return str(paths.checkpoint_root() / trial_id)


def remove_checkpoint(trial_id: str) -> bool:
    """Delete the trial's checkpoint folder; True when one was there."""
    if os.environ.get("CBS_KEEP_CHECKPOINTS"):
        return False
    path = Path(checkpoint_dir(trial_id))
    if not path.exists():
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


def sweep(done_trial_ids) -> list[str]:
    """Remove the checkpoint folders of these ended trials that still have one; returns them."""
    return [tid for tid in done_trial_ids if remove_checkpoint(tid)]
