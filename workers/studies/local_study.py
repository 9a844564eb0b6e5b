"""Where a ``local`` study keeps its base runs' snapshots, and what the runner tells the planner.

A base run writes a read-only snapshot at each checkpoint (``TrainConfig.branch.snapshot_dir``); the
branches start from them. They are the study's artifacts, not a trial's checkpoint: a trial's
checkpoint folder (``<checkpoint root>/<trial_id>``, :mod:`workers.infra.checkpoints`) is removed when
the trial ends, and a snapshot there would vanish under the branches still to run. So they live
under :func:`cbscore.paths.snapshot_root` (``CBS_SNAPSHOT_DIR`` on a filesystem every host
mounts, else ``$CBS_HOME/artifacts``) as ``<root>/<study>/snapshots/s<seed>/tokens-<t>/``, kept
when the study ends and removed only by :func:`delete_study_artifacts`.

Paths in a trial's config are the launching host's; a worker re-roots them at its own
:func:`snapshot_dir` (:func:`host_paths`; both are operational fields of ``TrainConfig``, so a
resume on another host is the same trial).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from cbscore import paths
from cbscore.errors import ConfigError
from cbscore.study import LocalSnapshots, StudySpec, TrialRecord
from cbscore.study.local_plan import base_trial_id, local_trials, study_checkpoints
from cbscore.train.checkpoint import checkpoint_path, snapshot_path
from workers.studies.local_fit import AVERAGING_LABELS, WINDOW_LABELS


def study_artifacts(study: str) -> Path:
    """The study's kept-artifacts folder (not created here)."""
    if not study or "/" in study or study in (".", ".."):
        raise ConfigError("study", study, "must be a study name")
    return paths.snapshot_root() / study


def snapshot_dir(study: str, seed: int) -> str:
    """The folder of base run ``seed``'s snapshots (``TrainConfig.branch.snapshot_dir``)."""
    return str(study_artifacts(study) / "snapshots" / f"s{int(seed)}")


def local_snapshots(spec: StudySpec, records: Sequence[TrialRecord]) -> LocalSnapshots:
    """The planner's input: each seed's snapshot folder, and the checkpoints its base run has
    passed (progress tokens ≥ t, as MLflow last heard) whose snapshot is on disk."""
    by_id = {r.trial_id: r for r in records}
    folders = {s: snapshot_dir(spec.name, s) for s in spec.seeds}
    ready: dict[int, frozenset[int]] = {}
    for s in spec.seeds:
        base = by_id.get(base_trial_id(spec, s))
        if base is None:
            continue
        ready[s] = frozenset(c.tokens for c in study_checkpoints(spec)
                             if (base.tokens >= c.tokens or base.status == "finished")
                             and checkpoint_path(snapshot_path(folders[s], c.tokens)).exists())
    return LocalSnapshots(folders=folders, ready=ready)


def host_paths(study: str, train_config: Mapping) -> dict:
    """``snapshot_dir`` / ``branch_from`` of a local or schedule study's trial on this host (empty
    for others), as fields to lay over ``train_config``: the part of the path below
    ``<study>/snapshots/`` kept under this host's root (a local study's ``s<seed>``, a schedule
    study's ``b<B>.lr<lr>.s<seed>``, :mod:`workers.studies.decay_study`). A trial stored before
    ``TrainConfig.branch`` holds them flat, and gets them flat (:mod:`cbscore.train.branch_config`)."""
    nested = "branch" in train_config
    branch = (train_config.get("branch") or {}) if nested else train_config
    out: dict = {}
    seed = int(train_config.get("seed", 0))
    if branch.get("snapshot_dir"):
        out["snapshot_dir"] = _rerooted(study, branch["snapshot_dir"]) or snapshot_dir(study, seed)
    if branch.get("branch_from") and branch.get("branch_tokens") is not None:
        out["branch_from"] = (_rerooted(study, branch["branch_from"])
                              or str(snapshot_path(snapshot_dir(study, seed), int(branch["branch_tokens"]))))
    return {"branch": {**branch, **out}} if nested and out else out


def _rerooted(study: str, path) -> str | None:
    """``path``'s part below ``<study>/snapshots/`` under this host's :func:`study_artifacts`, or
    ``None`` where it has no such part (or one that climbs out with ``..``)."""
    parts = Path(str(path)).parts
    for i in range(len(parts) - 2):
        if parts[i] == study and parts[i + 1] == "snapshots":
            tail = parts[i + 2:]
            if tail and ".." not in tail and "." not in tail:
                return str(study_artifacts(study).joinpath("snapshots", *tail))
    return None


def largest_trial(spec: StudySpec) -> tuple[int, str, int]:
    """Build every trial's ``TrainConfig`` (a bad one fails here, with the trainer's message) and
    return ``(tokens the longest trial reads, setting id, batch size)`` for the store check."""
    from cbscore.train.config import TrainConfig

    largest = (0, "", 0)
    for ts in local_trials(spec, {s: snapshot_dir(spec.name, s) for s in spec.seeds}):
        config = TrainConfig.from_dict(ts.train_config)
        read = config.max_tokens - config.start_tokens
        largest = max(largest, (read, ts.setting_id, ts.batch_size))
    return largest


def delete_study_artifacts(study: str) -> bool:
    """Remove the study's kept artifacts (its base runs' snapshots); True when there were any.
    For deleting a study, never for ending one: branches may still be run from them
    (``cbs study extend``, a retry)."""
    folder = study_artifacts(study)
    if not folder.exists():
        return False
    shutil.rmtree(folder)
    return True


def describe_local(spec: StudySpec) -> list[str]:
    """The dry run's lines of a local study: its base runs, each checkpoint's window and branches,
    and the recipe every branch carries over from its base run."""
    from cbscore.study.local_plan import base_train_config

    local = spec.local
    base = base_train_config(spec, spec.seeds[0], snapshot_dir(spec.name, spec.seeds[0]))
    lines = [f"first wave: {len(spec.seeds)} base run(s) at B0 = {local.base_batch_size}, η0 = {local.base_lr:g} "
             f"to D = {spec.tokens[0]:,} tokens, a snapshot at each checkpoint under {study_artifacts(spec.name)}"]
    for c in study_checkpoints(spec):
        lines.append(f"  t = {c.tokens:>12,}  Δ = {c.window_tokens:>10,}  branches k = "
                     + ", ".join(f"{k:g}" for k in c.multipliers) + f" (lr × f(k), f = {local.lr_rule})")
    lines.append(f"recipe: the base run's β2 {base['beta2']:g} and τ {', '.join(f'{t:g}' for t in base['ewa_taus'])}, "
                 "carried over by every branch (with its warm-up and schedule, read in tokens)")
    lines.append(f"window: {WINDOW_LABELS[local.window_rule]}; held-out loss {AVERAGING_LABELS[local.averaging]}, "
                 "and on the raw weights")
    if local.warmup_run:  # the warm-up and its controls, from the start (Merrill et al. 2025, Table 1)
        lines.append("and per seed the warm-up and its controls at equal tokens:")
        lines.extend(describe_arms(spec))
    return lines


def describe_arms(spec) -> list[str]:
    """The lines of ``cbs study warmup --dry-run``: each arm's batch, rate, tokens and steps."""
    from cbscore.study.local_plan import study_arms

    lines = []
    for arm in study_arms(spec):
        switches = ", ".join(f"{b} at {t:,} (lr ×{m:.3g})" for t, b, m in arm.batch_schedule) or "none"
        lines.append(f"  {arm.role:<14} B = {arm.batch_size:>5} → {arm.final_batch_size:<5} lr {arm.lr:.4g} → "
                     f"{arm.final_lr():.4g}  {arm.max_tokens:,} tokens in {arm.steps:,} steps; switches: {switches}")
    return lines
