"""The planner of a ``local`` study: base runs first, then each branch once its snapshot exists.

Pure, like :func:`cbscore.study.plan` (which hands ``kind: local`` specs here): what is on disk
comes in as data (:class:`LocalSnapshots`, gathered by the runner), so the same inputs give the
same plan and a pass can be re-run after any failure.

Order of work (Merrill et al. 2025, arXiv 2505.23971, §3):

1. one *base run* per seed, ``{study}.base.s{seed}``: batch ``B0``, rate ``η0``, D tokens, keeping a
   read-only snapshot at every checkpoint (``TrainConfig.branch.snapshot_tokens``);
2. from base ``s``'s snapshot at ``t`` tokens, one *branch* per ``k``,
   ``{study}.t{t}.k{k}.s{seed}``: ``k·B0`` sequences at ``f(k)·η0`` for ``Δ`` tokens
   (:func:`cbscore.local.branch_config`), startable as soon as that snapshot exists, while the
   base run trains on. A branch is an ordinary trial: leased, tracked, resumed from its own
   checkpoint after a crash; it only reads the snapshot.

A base run that ended (failed, diverged) before a checkpoint leaves that checkpoint's branches
unstartable: the plan names them in ``errors`` and the study can still end.

3. with ``local.warmup_run`` (an opt-in phase, usually added by an extension once the curve is
   fitted: :mod:`workers.studies.local_warmup`), three *arms* per seed at equal tokens, startable at once:
   ``{study}.warmup.s{seed}`` on ``local.warmup_schedule``, ``{study}.control-small.s{seed}`` at
   ``B0``/``η0`` and ``{study}.control-large.s{seed}`` at the final batch and rate (Merrill et al.
   2025, Table 1; :func:`cbscore.local.warmup_arms`). They are trials of this study, not of a
   linked one: they answer the study's own question (does its curve's schedule pay?), are read
   beside its curve by the same fit (``cbs study fit``), and reuse its spec, data, recipe, seeds,
   ledger and MLflow parent, so an extension adds them like any cell and a kill -9 costs what it
   costs any trial.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cbscore.study.local_spec import Checkpoint, checkpoints
from cbscore.study.planner import CellState, Plan, build_train_config
from cbscore.study.spec import StudySpec
from cbscore.study.spec_parts import Setting
from cbscore.study.trials import TERMINAL, TrialRecord, TrialSpec


@dataclass(frozen=True, kw_only=True)
class LocalSnapshots:
    """What the runner found of the base runs' snapshots (the planner reads no disk)."""

    folders: Mapping[int, str] = field(default_factory=dict)
    """Seed → the base run's snapshot folder (``TrainConfig.branch.snapshot_dir``) on the runner's host."""
    ready: Mapping[int, frozenset[int]] = field(default_factory=dict)
    """Seed → checkpoint token counts whose snapshot exists and that the base run has passed."""


def base_trial_id(spec: StudySpec, seed: int) -> str:
    return f"{spec.name}.base.s{seed}"


def branch_trial_id(spec: StudySpec, tokens: int, multiplier: float, seed: int) -> str:
    return f"{spec.name}.t{tokens}.k{multiplier:g}.s{seed}"


def branch_cell_id(setting: Setting, tokens: int, multiplier: float) -> str:
    return f"{setting.setting_id}.t{tokens}.k{multiplier:g}"


def study_checkpoints(spec: StudySpec) -> tuple[Checkpoint, ...]:
    """The checkpoints of a local study (positions, windows, grids)."""
    return checkpoints(spec.local, total_tokens=spec.tokens[0], context_tokens=spec.context_tokens)


def _setting(spec: StudySpec) -> Setting:
    [setting] = spec.resolve_settings()
    return setting


def base_train_config(spec: StudySpec, seed: int, snapshot_dir: str) -> dict:
    """The base run's ``TrainConfig.to_dict()``: the study's recipe at ``B0``/``η0`` over D tokens,
    with a snapshot at every checkpoint."""
    setting, local = _setting(spec), spec.local
    config = build_train_config(spec, setting, batch_size=local.base_batch_size, lr=local.base_lr, seed=seed,
                                max_tokens=setting.tokens, max_steps=None, target_loss=None)
    from cbscore.train.branch_config import BranchConfig

    snapshots = BranchConfig(snapshot_dir=snapshot_dir, snapshot_tokens=tuple(c.tokens for c in study_checkpoints(spec)))
    return {**config, "branch": snapshots.to_dict()}


def base_trial(spec: StudySpec, seed: int, snapshot_dir: str) -> TrialSpec:
    setting, local = _setting(spec), spec.local
    return TrialSpec(
        trial_id=base_trial_id(spec, seed), study=spec.name, setting_id=setting.setting_id,
        cell_id=f"{setting.setting_id}.base", role="base", model=setting.model, n_params=setting.n_params,
        setting_tokens=setting.tokens, batch_size=local.base_batch_size, lr=float(local.base_lr), seed=seed,
        max_tokens=setting.tokens, max_steps=None, target_loss=None,
        train_config=base_train_config(spec, seed, snapshot_dir))


def branch_trial(spec: StudySpec, checkpoint: Checkpoint, multiplier: float, seed: int, snapshot_dir: str) -> TrialSpec:
    """Branch ``k = multiplier`` of ``checkpoint`` from base ``seed``'s snapshot in ``snapshot_dir``."""
    from cbscore.local import BranchSpec, branch_config
    from cbscore.train.config import TrainConfig

    setting, local = _setting(spec), spec.local
    base = TrainConfig.from_dict(base_train_config(spec, seed, snapshot_dir))
    config = branch_config(base, BranchSpec(checkpoint_tokens=checkpoint.tokens, multiplier=multiplier,
                                            window_tokens=checkpoint.window_tokens, lr_rule=local.lr_rule,
                                            averaging=local.averaging),
                           snapshot_dir=snapshot_dir)
    return TrialSpec(
        trial_id=branch_trial_id(spec, checkpoint.tokens, multiplier, seed), study=spec.name,
        setting_id=setting.setting_id, cell_id=branch_cell_id(setting, checkpoint.tokens, multiplier), role="branch",
        model=setting.model, n_params=setting.n_params, setting_tokens=setting.tokens, batch_size=config.batch_size,
        lr=float(config.lr), seed=seed, max_tokens=config.max_tokens, max_steps=None, target_loss=None,
        train_config=config.to_dict())


def arm_trial_id(spec: StudySpec, role: str, seed: int) -> str:
    return f"{spec.name}.{role}.s{seed}"


def arm_cell_id(setting: Setting, role: str) -> str:
    return f"{setting.setting_id}.{role}"


def study_arms(spec: StudySpec):
    """The warm-up and its controls (:class:`cbscore.local.WarmupArm`, :data:`cbscore.local.ARM_ROLES`
    order), or ``()`` without ``local.warmup_run``."""
    from cbscore.local import warmup_arms

    local = spec.local
    if not local.warmup_run:
        return ()
    return warmup_arms(base_batch_size=local.base_batch_size, base_lr=local.base_lr,
                       context_tokens=spec.context_tokens, total_tokens=spec.tokens[0],
                       batch_schedule=local.warmup_schedule)


def arm_trial(spec: StudySpec, arm, seed: int) -> TrialSpec:
    """One arm of the warm-up comparison for ``seed``: the base run's config (its recipe, warm-up in
    tokens and seed, so its data order and initialisation) at the arm's batch, rate and schedule,
    with the learning-rate schedule anchored on the base's (``schedule_batch_size = B0``, the arms'
    common ``D_eq`` as its length), so that all three read the same rate at each token but for the
    arm's multiplier; its weight averages decay per ``B0·T`` tokens (``ewa_batch_size = B0``:
    ``τ^(B/B0)`` per step of ``B``), so the three arms' averaged losses weigh the same tokens alike
    (per step, as before issue 39, with ``local.averaging: carry``); no snapshots, no target."""
    from cbscore.train.branch_config import BranchConfig
    from cbscore.train.config import TrainConfig

    setting, local = _setting(spec), spec.local
    base = TrainConfig.from_dict(build_train_config(
        spec, setting, batch_size=local.base_batch_size, lr=local.base_lr, seed=seed, max_tokens=setting.tokens,
        max_steps=None, target_loss=None))
    batches = [arm.batch_size, *(b for _, b, _ in arm.batch_schedule)]

    def divides(micro: int | None) -> int | None:  # a micro-batch that splits every batch of the arm, or chosen anew
        return micro if micro is not None and all((b // base.devices) % micro == 0 for b in batches) else None

    config = base.replace(
        batch_size=arm.batch_size, lr=arm.lr, branch=BranchConfig(batch_schedule=arm.batch_schedule),
        max_tokens=arm.max_tokens,
        micro_batch_size=divides(base.micro_batch_size), gns_micro_batch_size=None,
        beta2=base.resolved_beta2(), ewa_taus=base.resolved_ewa_taus(), warmup_tokens=base.resolved_warmup_tokens(),
        ewa_batch_size=None if local.averaging == "carry" else local.base_batch_size,
        schedule_batch_size=local.base_batch_size, schedule_tokens=arm.max_tokens)
    return TrialSpec(
        trial_id=arm_trial_id(spec, arm.role, seed), study=spec.name, setting_id=setting.setting_id,
        cell_id=arm_cell_id(setting, arm.role), role=arm.role, model=setting.model, n_params=setting.n_params,
        setting_tokens=setting.tokens, batch_size=arm.batch_size, lr=float(arm.lr), seed=seed,
        max_tokens=arm.max_tokens, max_steps=None, target_loss=None, train_config=config.to_dict())


def local_trials(spec: StudySpec, folders: Mapping[int, str]) -> list[TrialSpec]:
    """Every trial of the study: the base runs, each checkpoint's branches (seed-major), then the
    warm-up's arms where ``local.warmup_run`` asks for them."""
    out = [base_trial(spec, s, folders[s]) for s in spec.seeds]
    for c in study_checkpoints(spec):
        out += [branch_trial(spec, c, k, s, folders[s]) for k in c.multipliers for s in spec.seeds]
    out += [arm_trial(spec, arm, s) for arm in study_arms(spec) for s in spec.seeds]
    return out


def local_grid_trials(spec: StudySpec) -> int:
    """Trials of a local study: a base run per seed, a branch per checkpoint, ``k`` and seed, and
    three arms per seed with ``local.warmup_run``."""
    arms = 3 if spec.local.warmup_run else 0
    return len(spec.seeds) * (1 + sum(len(c.multipliers) for c in study_checkpoints(spec)) + arms)


def local_grid_tokens(spec: StudySpec) -> int:
    """Training tokens of a local study: D per base run, ``Δ`` per branch, ``D_eq`` per arm."""
    per_seed = spec.tokens[0] + sum(len(c.multipliers) * c.window_tokens for c in study_checkpoints(spec))
    per_seed += sum(arm.max_tokens for arm in study_arms(spec))
    return len(spec.seeds) * per_seed


def stale_trials(records: Sequence[TrialRecord], now_s: float, *, stale_after_s: float,
                 max_attempts: int) -> tuple[list[str], list[str]]:
    """``(to run again, to fail)``: the trials lost or running with a heartbeat older than
    ``stale_after_s`` seconds at ``now_s`` (their worker is gone); one whose attempts spent
    (:attr:`TrialRecord.attempts_spent`) are below ``max_attempts`` runs again
    from its own checkpoint, the rest fail (as :func:`cbscore.study.planner.plan` triages)."""
    lost, fail = [], []
    for r in records:
        stale = r.status == "running" and r.heartbeat_s is not None and now_s - r.heartbeat_s > stale_after_s
        if stale or r.status == "lost":
            (lost if r.attempts_spent < max_attempts else fail).append(r.trial_id)
    return lost, fail


def plan_local(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *, snapshots: LocalSnapshots | None,
               stale_after_s: float = 120.0, max_attempts: int = 3) -> Plan:
    """What to run next in a local study. Pure: same inputs, same plan."""
    snapshots = snapshots or LocalSnapshots()
    by_id = {r.trial_id: r for r in records}
    lost, fail = stale_trials(records, now_s, stale_after_s=stale_after_s, max_attempts=max_attempts)
    setting = _setting(spec)
    start: list[TrialSpec] = []
    cells: list[CellState] = []
    errors: list[str] = []
    done = True

    def cell(cell_id: str, batch_size: int, role: str, ids: list[str], blocked: bool) -> None:
        nonlocal done
        recs = [by_id[t] for t in ids if t in by_id]
        counts: dict[str, int] = {}
        for r in recs:
            counts[r.status] = counts.get(r.status, 0) + 1
        settled = all(r.status in TERMINAL for r in recs)
        if settled and len(recs) == len(ids):
            state = "done"
        elif settled and blocked:
            state = "skipped"  # what ran has ended; the rest can never start
        else:
            state = "running" if recs else "waiting"
        done = done and state in ("done", "skipped")
        cells.append(CellState(cell_id=cell_id, setting_id=setting.setting_id, batch_size=batch_size, role=role,
                               state=state, n_trials=len(ids), counts=counts, steps_to_target=None, max_steps=None))

    base_ids = [base_trial_id(spec, s) for s in spec.seeds]
    start += [base_trial(spec, s, snapshots.folders[s]) for s in spec.seeds
              if base_trial_id(spec, s) not in by_id and s in snapshots.folders]
    cell(f"{setting.setting_id}.base", spec.local.base_batch_size, "base", base_ids, blocked=False)
    for c in study_checkpoints(spec):
        for k in c.multipliers:
            ids, blocked = [], False
            for s in spec.seeds:
                tid = branch_trial_id(spec, c.tokens, k, s)
                ids.append(tid)
                if tid in by_id:
                    continue
                base = by_id.get(base_trial_id(spec, s))
                if c.tokens in snapshots.ready.get(s, frozenset()) and s in snapshots.folders:
                    start.append(branch_trial(spec, c, k, s, snapshots.folders[s]))
                elif base is not None and base.status in TERMINAL:
                    blocked = True  # the base ended without this snapshot: nothing will make it
                    errors.append(f"branch {tid}: base run {base.trial_id} ended {base.status} before its "
                                  f"snapshot at {c.tokens} tokens")
            cell(branch_cell_id(setting, c.tokens, k), int(round(k * spec.local.base_batch_size)), "branch", ids,
                 blocked)
    for arm in study_arms(spec):  # the warm-up and its controls: nothing to wait for
        ids = [arm_trial_id(spec, arm.role, s) for s in spec.seeds]
        start += [arm_trial(spec, arm, s) for s, tid in zip(spec.seeds, ids) if tid not in by_id]
        cell(arm_cell_id(setting, arm.role), arm.batch_size, arm.role, ids, blocked=False)
    done = done and not start and not lost and not any(r.status not in TERMINAL for r in records)
    return Plan(start=tuple(start), lost=tuple(lost), fail=tuple(fail), cells=tuple(cells), errors=tuple(errors),
                done=done)
