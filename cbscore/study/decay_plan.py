"""The planner of a ``schedule`` study: stable runs, their decay branches, and cosine families.

Pure, like :func:`cbscore.study.local_plan.plan_local`: what is on disk comes in as data
(:class:`DecaySnapshots`, gathered by the runner), so the same inputs give the same plan.

Per cell ``(B, lr, seed)`` (:mod:`cbscore.study.decay_spec`, :mod:`cbscore.decay`):

1. with ``constant_ewa`` or ``wsd``, one *stable run* ``{study}.b{B}.{lr}.s{seed}.stable``: the
   ``constant`` schedule to the largest horizon, a read-only snapshot at each ``wsd`` branch point;
2. with ``wsd``, one *decay branch* per horizon ``H``, ``...s{seed}.wsd.h{H}``, startable once the
   stable run's snapshot at ``H − round(f·H)`` exists, while the stable run trains on;
3. with ``cosine``, one run per horizon, ``...s{seed}.cos.h{H}``, startable at once.

Every trial trains its whole budget (no target: the target is read afterwards, per schedule,
from the reference batch size's runs at D), so the plan is a fixed list and the cost is known
before launch: :func:`decay_grid_tokens` counts the stable runs, the decay branches and the
cosine runs, and :func:`describe_decay` prints them for ``cbs study launch --dry-run``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cbscore.study.local_plan import stale_trials
from cbscore.study.planner import CellState, Plan, build_train_config
from cbscore.study.spec import StudySpec
from cbscore.study.spec_parts import Setting
from cbscore.study.trials import TERMINAL, TrialRecord, TrialSpec, lr_tag


@dataclass(frozen=True, kw_only=True)
class DecaySnapshots:
    """What the runner found of the stable runs' snapshots (the planner reads no disk)."""

    folders: Mapping[str, str] = field(default_factory=dict)
    """Stable trial id → its snapshot folder (``TrainConfig.branch.snapshot_dir``) on the runner's host."""
    ready: Mapping[str, frozenset[int]] = field(default_factory=dict)
    """Stable trial id → branch points (tokens) whose snapshot exists and that the run has passed."""


def study_setting(spec: StudySpec) -> Setting:
    """The one setting of a schedule study."""
    [setting] = spec.resolve_settings()
    return setting


def stable_trial_id(spec: StudySpec, batch_size: int, lr: float, seed: int) -> str:
    return f"{spec.name}.b{batch_size}.{lr_tag(lr)}.s{seed}.stable"


def decay_trial_id(spec: StudySpec, batch_size: int, lr: float, seed: int, horizon_steps: int) -> str:
    return f"{spec.name}.b{batch_size}.{lr_tag(lr)}.s{seed}.wsd.h{horizon_steps}"


def cosine_trial_id(spec: StudySpec, batch_size: int, lr: float, seed: int, horizon_steps: int) -> str:
    return f"{spec.name}.b{batch_size}.{lr_tag(lr)}.s{seed}.cos.h{horizon_steps}"


def schedule_cell_id(setting: Setting, batch_size: int, schedule: str) -> str:
    """``{setting}.b{B}.{stable|wsd|cosine}``: the stable runs are ``constant_ewa``'s cell."""
    return f"{setting.setting_id}.b{batch_size}.{schedule}"


def snapshot_folder(root: str, batch_size: int, lr: float, seed: int) -> str:
    """A stable run's snapshot folder under the study's ``snapshots`` folder ``root``."""
    return f"{root}/b{batch_size}.{lr_tag(lr)}.s{seed}"


def _base(spec: StudySpec, batch_size: int, lr: float, seed: int):
    from cbscore.train.config import TrainConfig

    setting = study_setting(spec)
    return TrainConfig.from_dict(build_train_config(spec, setting, batch_size=batch_size, lr=lr, seed=seed,
                                                    max_tokens=setting.tokens, max_steps=None, target_loss=None))


def wsd_grid(spec: StudySpec, batch_size: int):
    """The decay branches of every stable run at ``batch_size`` (:class:`cbscore.decay.DecayPoint`)."""
    from cbscore.decay import horizon_tokens, wsd_points

    d, setting = spec.decay, study_setting(spec)
    base = _base(spec, batch_size, spec.search.lrs[0], spec.seeds[0])
    grid = horizon_tokens(setting.tokens, low=d.horizon_low, high=d.horizon_high, ratio=d.wsd_ratio)
    return wsd_points(grid, batch_tokens=base.batch_tokens, decay_fraction=d.decay_fraction,
                      warmup_steps=base.resolved_warmup_steps())


def cosine_grid(spec: StudySpec, batch_size: int) -> tuple[int, ...]:
    """The cosine family's horizons at ``batch_size``, steps."""
    from cbscore.decay import cosine_horizons, horizon_tokens

    d, setting = spec.decay, study_setting(spec)
    base = _base(spec, batch_size, spec.search.lrs[0], spec.seeds[0])
    high = d.horizon_high if d.cosine_high is None else d.cosine_high
    grid = horizon_tokens(setting.tokens, low=d.horizon_low, high=high, ratio=d.cosine_ratio)
    return cosine_horizons(grid, batch_tokens=base.batch_tokens, warmup_steps=base.resolved_warmup_steps())


def stable_steps(spec: StudySpec, batch_size: int) -> int:
    """The stable runs' length at ``batch_size``: the largest horizon, steps."""
    from cbscore.decay import horizon_tokens

    d, setting = spec.decay, study_setting(spec)
    grid = horizon_tokens(setting.tokens, low=d.horizon_low, high=d.horizon_high, ratio=d.wsd_ratio)
    points = wsd_grid(spec, batch_size) if "wsd" in d.schedules else ()
    return max([p.horizon_steps for p in points] + [round(grid[-1] / (batch_size * spec.context_tokens))])


def _trial(spec, tid, cell, role, batch_size, lr, seed, config) -> TrialSpec:
    setting = study_setting(spec)
    return TrialSpec(trial_id=tid, study=spec.name, setting_id=setting.setting_id, cell_id=cell, role=role,
                     model=setting.model, n_params=setting.n_params, setting_tokens=setting.tokens,
                     batch_size=batch_size, lr=float(lr), seed=seed, max_tokens=config.max_tokens, max_steps=None,
                     target_loss=None, train_config=config.to_dict())


def stable_config_of(spec: StudySpec, batch_size: int, lr: float, seed: int, folder: str):
    """The stable run's ``TrainConfig`` (:func:`cbscore.decay.stable_config`)."""
    from cbscore.decay import stable_config

    points = wsd_grid(spec, batch_size) if "wsd" in spec.decay.schedules else ()
    if not points:  # constant_ewa alone: no snapshots, the longest horizon
        end = stable_steps(spec, batch_size)
        return _base(spec, batch_size, lr, seed).replace(max_tokens=end * batch_size * spec.context_tokens)
    config = stable_config(_base(spec, batch_size, lr, seed), points, snapshot_dir=folder)
    end = stable_steps(spec, batch_size)
    return config.replace(max_tokens=end * config.batch_tokens) if end > points[-1].horizon_steps else config


def stable_trial(spec: StudySpec, batch_size: int, lr: float, seed: int, folder: str) -> TrialSpec:
    return _trial(spec, stable_trial_id(spec, batch_size, lr, seed),
                  schedule_cell_id(study_setting(spec), batch_size, "stable"), "stable", batch_size, lr, seed,
                  stable_config_of(spec, batch_size, lr, seed, folder))


def decay_trial(spec: StudySpec, batch_size: int, lr: float, seed: int, point, folder: str) -> TrialSpec:
    from cbscore.decay import decay_branch_config

    stable = stable_config_of(spec, batch_size, lr, seed, folder)
    config = decay_branch_config(stable, point, decay_fraction=spec.decay.decay_fraction,
                                 min_lr_ratio=spec.decay.min_lr_ratio)
    return _trial(spec, decay_trial_id(spec, batch_size, lr, seed, point.horizon_steps),
                  schedule_cell_id(study_setting(spec), batch_size, "wsd"), "decay", batch_size, lr, seed, config)


def cosine_trial(spec: StudySpec, batch_size: int, lr: float, seed: int, horizon_steps: int) -> TrialSpec:
    from cbscore.decay import cosine_config

    config = cosine_config(_base(spec, batch_size, lr, seed), horizon_steps, min_lr_ratio=spec.decay.min_lr_ratio)
    return _trial(spec, cosine_trial_id(spec, batch_size, lr, seed, horizon_steps),
                  schedule_cell_id(study_setting(spec), batch_size, "cosine"), "cosine", batch_size, lr, seed, config)


def same_rates_at_every_b(spec: StudySpec) -> bool:
    """Whether :func:`rates_at` runs ``search.lrs`` at every batch size (no ``decay.lr_exponent``)."""
    return not spec.decay.lr_exponent


def rates_at(spec: StudySpec, batch_size: int) -> tuple[float, ...]:
    """The learning rates run at ``batch_size``: ``search.lrs × (B / b_ref)^lr_exponent``
    (:attr:`DecaySpec.lr_exponent`), rounded to the three significant digits of a trial id."""
    if same_rates_at_every_b(spec):
        return tuple(spec.search.lrs)
    scale = (batch_size / spec.b_ref) ** spec.decay.lr_exponent
    return tuple(float(f"{lr * scale:.3g}") for lr in spec.search.lrs)


def run_keys(spec: StudySpec):
    """``(B, lr, seed)`` of every stable run / cosine family, batch-major."""
    return [(b, lr, s) for b in spec.batch_sizes for lr in rates_at(spec, b) for s in spec.seeds]


def decay_trials(spec: StudySpec, folders: Mapping[str, str]) -> list[TrialSpec]:
    """Every trial of the study: stable runs, their decay branches, the cosine families."""
    d, out = spec.decay, []
    for b, lr, s in run_keys(spec):
        folder = folders[stable_trial_id(spec, b, lr, s)]
        if d.needs_stable_runs:
            out.append(stable_trial(spec, b, lr, s, folder))
        if "wsd" in d.schedules:
            out += [decay_trial(spec, b, lr, s, p, folder) for p in wsd_grid(spec, b)]
        if "cosine" in d.schedules:
            out += [cosine_trial(spec, b, lr, s, h) for h in cosine_grid(spec, b)]
    return out


@dataclass(frozen=True, kw_only=True)
class ScheduleCost:
    """Training tokens of a ``schedule`` study by kind of run (the dry run prints them)."""

    stable_tokens: int
    """The stable runs (the ``constant_ewa`` reading and the decay branches' bases)."""
    decay_tokens: int
    """The ``wsd`` decay branches (each ``round(f·H)`` steps)."""
    cosine_tokens: int
    """The cosine families (each run its whole horizon)."""
    trials: int
    """Trials of every kind."""

    @property
    def total_tokens(self) -> int:
        return self.stable_tokens + self.decay_tokens + self.cosine_tokens


def schedule_cost(spec: StudySpec) -> ScheduleCost:
    d = spec.decay
    stable = decay = cosine = trials = 0
    for b in spec.batch_sizes:
        bt, n = b * spec.context_tokens, len(spec.search.lrs) * len(spec.seeds)
        if d.needs_stable_runs:
            stable += n * stable_steps(spec, b) * bt
            trials += n
        if "wsd" in d.schedules:
            points = wsd_grid(spec, b)
            decay += n * sum(p.decay_steps for p in points) * bt
            trials += n * len(points)
        if "cosine" in d.schedules:
            horizons = cosine_grid(spec, b)
            cosine += n * sum(horizons) * bt
            trials += n * len(horizons)
    return ScheduleCost(stable_tokens=stable, decay_tokens=decay, cosine_tokens=cosine, trials=trials)


def decay_grid_trials(spec: StudySpec) -> int:
    return schedule_cost(spec).trials


def decay_grid_tokens(spec: StudySpec) -> int:
    """Training tokens of the study: stable runs, decay branches and cosine runs together."""
    return schedule_cost(spec).total_tokens


def describe_decay(spec: StudySpec, human=lambda x: f"{x:,}") -> list[str]:
    """The dry run's lines: per batch size the stable runs, the decay branches and the cosine
    family with their horizons and tokens, and the tokens of each kind."""
    d, cost = spec.decay, schedule_cost(spec)
    n = len(spec.search.lrs) * len(spec.seeds)
    lines = [f"schedules {', '.join(d.schedules)}: per batch size × {len(spec.search.lrs)} learning rates × "
             f"{len(spec.seeds)} seeds ({n} runs per kind and horizon); horizons D×{d.horizon_low:g} … D×{d.horizon_high:g}"]
    if d.lr_exponent:
        lines.append(f"  learning rates × (B/{spec.b_ref})^{d.lr_exponent:g}: "
                     + "; ".join(f"B={b}: {', '.join(f'{lr:g}' for lr in rates_at(spec, b))}" for b in spec.batch_sizes))
    for b in spec.batch_sizes:
        bt = b * spec.context_tokens
        if d.needs_stable_runs:
            lines.append(f"  B={b}: stable run (constant) {stable_steps(spec, b):,} steps = "
                         f"{human(stable_steps(spec, b) * bt)} tokens")
        if "wsd" in d.schedules:
            points = wsd_grid(spec, b)
            lines.append(f"  B={b}: wsd decay branches (f = {d.decay_fraction:g} to {d.min_lr_ratio:g}·lr) at H = "
                         + ", ".join(f"{p.horizon_steps}" for p in points)
                         + f" steps, from steps {', '.join(str(p.branch_step) for p in points)}: "
                         + f"{human(sum(p.decay_steps for p in points) * bt)} tokens per stable run")
        if "cosine" in d.schedules:
            horizons = cosine_grid(spec, b)
            lines.append(f"  B={b}: cosine runs (to {d.min_lr_ratio:g}·lr) at H = {', '.join(map(str, horizons))} "
                         f"steps: {human(sum(horizons) * bt)} tokens per family")
    lines.append(f"tokens: stable runs {human(cost.stable_tokens)}, decay branches {human(cost.decay_tokens)}, "
                 f"cosine runs {human(cost.cosine_tokens)}; {human(cost.total_tokens)} in all, {cost.trials} trials")
    lines.append("targets: each schedule's own loss at D at B_ref (the best rate, mean over seeds), read after the runs")
    return lines


def plan_decay(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *, snapshots: DecaySnapshots | None,
               stale_after_s: float = 120.0, max_attempts: int = 3) -> Plan:
    """What to run next in a schedule study. Pure: same inputs, same plan."""
    snapshots = snapshots or DecaySnapshots()
    d, setting = spec.decay, study_setting(spec)
    by_id = {r.trial_id: r for r in records}
    lost, fail = stale_trials(records, now_s, stale_after_s=stale_after_s, max_attempts=max_attempts)
    start: list[TrialSpec] = []
    errors: list[str] = []
    cells: dict[str, list] = {}  # cell id -> [batch size, role, ids, blocked]

    def add(cell: str, b: int, role: str, tid: str, blocked: bool = False) -> None:
        entry = cells.setdefault(cell, [b, role, [], False])
        entry[2].append(tid)
        entry[3] = entry[3] or blocked

    for b, lr, s in run_keys(spec):
        sid = stable_trial_id(spec, b, lr, s)
        folder = snapshots.folders.get(sid)
        if d.needs_stable_runs:
            add(schedule_cell_id(setting, b, "stable"), b, "stable", sid)
            if sid not in by_id and folder is not None:
                start.append(stable_trial(spec, b, lr, s, folder))
        if "wsd" in d.schedules:
            stable = by_id.get(sid)
            ready = snapshots.ready.get(sid, frozenset())
            for p in wsd_grid(spec, b):
                tid = decay_trial_id(spec, b, lr, s, p.horizon_steps)
                blocked = False
                if tid not in by_id:
                    if folder is not None and p.branch_step * b * spec.context_tokens in ready:
                        start.append(decay_trial(spec, b, lr, s, p, folder))
                    elif stable is not None and stable.status in TERMINAL:
                        blocked = True
                        errors.append(f"decay branch {tid}: stable run {sid} ended {stable.status} before its "
                                      f"snapshot at step {p.branch_step}")
                add(schedule_cell_id(setting, b, "wsd"), b, "decay", tid, blocked)
        if "cosine" in d.schedules:
            for h in cosine_grid(spec, b):
                tid = cosine_trial_id(spec, b, lr, s, h)
                if tid not in by_id:
                    start.append(cosine_trial(spec, b, lr, s, h))
                add(schedule_cell_id(setting, b, "cosine"), b, "cosine", tid)

    states, done = [], True
    for cid, (b, role, ids, blocked) in cells.items():
        recs = [by_id[t] for t in ids if t in by_id]
        counts: dict[str, int] = {}
        for r in recs:
            counts[r.status] = counts.get(r.status, 0) + 1
        settled = all(r.status in TERMINAL for r in recs)
        state = ("done" if settled and len(recs) == len(ids) else "skipped" if settled and blocked
                 else "running" if recs else "waiting")
        done = done and state in ("done", "skipped")
        states.append(CellState(cell_id=cid, setting_id=setting.setting_id, batch_size=b, role=role, state=state,
                                n_trials=len(ids), counts=counts, steps_to_target=None, max_steps=None))
    done = done and not start and not lost and not any(r.status not in TERMINAL for r in records)
    return Plan(start=tuple(start), lost=tuple(lost), fail=tuple(fail), cells=tuple(states), errors=tuple(errors),
                done=done)
