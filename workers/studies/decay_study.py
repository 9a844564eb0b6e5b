"""Where a ``schedule`` study keeps its stable runs' snapshots, and what the runner tells the planner.

As a local study's base runs (:mod:`workers.studies.local_study`), a stable run writes a read-only
snapshot at each decay-branch point; they are the study's artifacts, kept under
:func:`workers.studies.local_study.study_artifacts` as
``<root>/<study>/snapshots/b<B>.lr<lr>.s<seed>/tokens-<t>/`` until the study is deleted, and a
worker re-roots them at its own root (:func:`workers.studies.local_study.host_paths` keeps the
part below ``<study>/snapshots/``).
"""

from __future__ import annotations

from collections.abc import Sequence

from cbscore.study import StudySpec, TrialRecord
from cbscore.study.decay_plan import DecaySnapshots, decay_trials, run_keys, snapshot_folder, stable_trial_id, wsd_grid
from cbscore.train.checkpoint import checkpoint_path, snapshot_path
from workers.studies.local_study import study_artifacts


def snapshot_folders(spec: StudySpec) -> dict[str, str]:
    """Stable trial id → its snapshot folder on this host."""
    root = str(study_artifacts(spec.name) / "snapshots")
    return {stable_trial_id(spec, b, lr, s): snapshot_folder(root, b, lr, s) for b, lr, s in run_keys(spec)}


def decay_snapshots(spec: StudySpec, records: Sequence[TrialRecord]) -> DecaySnapshots:
    """The planner's input: each stable run's folder, and the branch points it has passed (progress
    tokens ≥ t, as MLflow last heard, or ended) whose snapshot is on disk."""
    by_id = {r.trial_id: r for r in records}
    folders = snapshot_folders(spec)
    ready: dict[str, frozenset[int]] = {}
    if "wsd" in spec.decay.schedules:
        for b, lr, s in run_keys(spec):
            sid = stable_trial_id(spec, b, lr, s)
            stable = by_id.get(sid)
            if stable is None:
                continue
            bt = b * spec.context_tokens
            ready[sid] = frozenset(p.branch_step * bt for p in wsd_grid(spec, b)
                                   if (stable.tokens >= p.branch_step * bt or stable.status == "finished")
                                   and checkpoint_path(snapshot_path(folders[sid], p.branch_step * bt)).exists())
    return DecaySnapshots(folders=folders, ready=ready)


def largest_trial(spec: StudySpec) -> tuple[int, str, int]:
    """Build every trial's ``TrainConfig`` (a bad one fails here, with the trainer's message) and
    return ``(tokens the longest trial reads, setting id, batch size)`` for the store check."""
    from cbscore.train.config import TrainConfig

    largest = (0, "", 0)
    for ts in decay_trials(spec, snapshot_folders(spec)):
        config = TrainConfig.from_dict(ts.train_config)
        largest = max(largest, (config.max_tokens - config.start_tokens, ts.setting_id, ts.batch_size))
    return largest
