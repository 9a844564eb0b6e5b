"""The readout of a ``local`` study from MLflow, as typed rows (:class:`cbscore.local.LocalStudyReadout`,
whose ``to_json_dict()`` is ``cbs study fit NAME --json`` for ``kind: local``).

Per checkpoint, both rules of :mod:`cbscore.local` over the branches that ended ``finished``:

* Merrill et al. 2025 (arXiv 2505.23971, §3): the *smoothed training loss after Δ* (the mean of
  the last ``smooth_fraction`` of a branch's logged ``train/loss``, :func:`cbscore.local.window_end_loss`),
  one ``ε`` (``local.epsilon``) for every pair;
* the lab's noise-aware rule: the held-out EWA loss at the window's end
  (``summary/final_eval_loss``), each pair's tolerance ``max(ε, z·SE)`` with the standard error
  from the seeds (paired by base run) or, with one seed, from each branch's own window spread;
  the same rule on the raw weights' held-out loss (``summary/final_raw_loss``) beside it
  (``noise_aware_raw``), and whether the noise, not the floor ``ε``, ever decided a comparison
  (``noise_decides`` per checkpoint, ``noise_ever_decided`` over them: where it never did, the
  rule is Merrill's with one ε on the held-out loss).

Which average the held-out loss is read on (``averaging``: from the branch in tokens by default,
:data:`cbscore.local.AVERAGING`) and which window rule gave ``Δ`` (``window_rule``: ``fixed`` or
``growing``, :mod:`cbscore.study.local_spec`) are named in the JSON and the text.

Then the power law of the local CBS over tokens for each rule (:func:`cbscore.local.fit_local_cbs_curve`)
and the batch-size warm-up it recommends, with the steps it saves (:func:`cbscore.local.plan_warmup`).
With ``local.warmup_run``, the warm-up run and its two controls (``arms``, :func:`arms_readout`):
per arm the final held-out loss over seeds with an interval, the steps taken and the tokens,
and whether the warm-up matched the small-batch control's loss in fewer steps (Merrill et al.
2025, Table 1). Everything is recomputed from MLflow alone; where the data cannot support a
number the JSON says why (``notes``) and holds ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from cbscore.errors import CbsError
from cbscore.local import ArmComparison, ArmReadout, ArmSeed, ArmsReadout, LocalStudyReadout, SeedInterval
from cbscore.study import StudySpec, TrialRecord
from cbscore.study.local_plan import branch_trial_id, study_checkpoints

RULES = ("merrill", "noise_aware")
AVERAGING_LABELS = {
    "branch": "averaged from the branch (EWA reset at the branch, τ per B0·T tokens)",
    "tokens": "the base's average carried on at τ^k per step (equal horizons in tokens)",
    "carry": "the base's average carried on at τ per step (before issue 39: reads more of the base's past at larger k)",
}
WINDOW_LABELS = {"fixed": "fixed Δ in tokens (Merrill et al. 2025)", "growing": "growing Δ = window_fraction·t"}


def local_readout(spec: StudySpec, records: Sequence[TrialRecord],
                  train_losses: Callable[[TrialRecord], Sequence[float]],
                  b_simple: Mapping[int, tuple[Sequence[float], Sequence[float]]] | None = None) -> LocalStudyReadout:
    """The readout of a local study (``.to_json_dict()``: its fit JSON); ``train_losses(record)`` gives a
    branch's logged training losses in step order (from MLflow in :func:`local_fit`, from anything in a
    test), and ``b_simple`` each seed's base-run noise scale ``(tokens, B_simple)`` where its probe ran
    (McCandlish et al. 2018, :mod:`cbscore.train.gns`; drawn beside the local CBS). Pure."""
    from cbscore.local import (
        BaseNoiseScale,
        LocalCheckpoint,
        LocalWarmup,
        fit_local_cbs_curve,
        merrill_local_cbs,
        noise_aware_local_cbs,
        plan_warmup,
        window_end_loss,
    )

    local = spec.local
    by_id = {r.trial_id: r for r in records}
    out_checkpoints: list[LocalCheckpoint] = []
    notes: list[str] = []
    branches = [by_id.get(branch_trial_id(spec, c.tokens, k, s))
                for c in study_checkpoints(spec) for k in c.multipliers for s in spec.seeds]
    pending = sum(1 for r in branches if r is None or not r.terminal)  # the curve may still move
    for c in study_checkpoints(spec):
        ks: list[float] = []
        train, train_se, evals_read, raws, c_notes = [], [], [], [], []
        for k in c.multipliers:
            recs = [by_id.get(branch_trial_id(spec, c.tokens, k, s)) for s in spec.seeds]
            if any(r is None or not r.terminal for r in recs):
                c_notes.append(f"k = {k:g}: not every seed's branch has ended")
                continue
            if any(r.status != "finished" for r in recs):
                # A diverged (or failed) k bounds the local CBS below it: stop the grid there.
                c_notes.append(f"k = {k:g}: " + ", ".join(sorted({r.status for r in recs})) + "; larger k are not read")
                break
            windows = [window_end_loss(train_losses(r), fraction=local.smooth_fraction) for r in recs]
            evals = [r.final_eval_loss for r in recs]
            if any(e is None or not math.isfinite(e) for e in evals):
                c_notes.append(f"k = {k:g}: no held-out loss at the window's end")
                break
            ks.append(k)
            train.append([w.mean for w in windows])
            train_se.append([w.standard_error for w in windows])
            evals_read.append([float(e) for e in evals])
            raws.append([r.final_raw_loss for r in recs])
        merrill = aware = aware_raw = decides = None
        if len(ks) >= 2:
            b0 = local.base_batch_size
            merrill = merrill_local_cbs(ks, train, base_batch_size=b0, epsilon=local.epsilon)

            def noise_aware(losses):
                if len(spec.seeds) >= 2:
                    return noise_aware_local_cbs(ks, losses, base_batch_size=b0, epsilon_floor=local.epsilon, z=local.z)
                # one seed: each branch's own spread over its window's end (0 where one value was logged)
                se = [0.0 if not math.isfinite(row[0]) else row[0] for row in train_se]
                return noise_aware_local_cbs(ks, losses, base_batch_size=b0, epsilon_floor=local.epsilon, z=local.z,
                                             standard_errors=se)

            aware = noise_aware(evals_read)
            if all(x is not None and math.isfinite(x) for row in raws for x in row):
                aware_raw = noise_aware(raws)
            else:
                c_notes.append("a branch logged no raw-weights loss at the window's end: no raw reading")
            decides = {rule: r.noise_decides for rule, r in (("noise_aware", aware), ("noise_aware_raw", aware_raw))
                       if r is not None}
        else:
            c_notes.append("fewer than two multipliers ended: no local CBS at this checkpoint")
        out_checkpoints.append(LocalCheckpoint(
            tokens=c.tokens, window_tokens=c.window_tokens, multipliers=tuple(ks), seeds=tuple(spec.seeds),
            train_loss_nats=tuple(tuple(row) for row in train),
            train_loss_se_nats=tuple(tuple(None if not math.isfinite(x) else x for x in row) for row in train_se),
            eval_loss_nats=tuple(tuple(row) for row in evals_read), raw_loss_nats=tuple(tuple(row) for row in raws),
            merrill=merrill, noise_aware=aware, noise_aware_raw=aware_raw, noise_decides=decides,
            notes=tuple(c_notes)))

    curves: dict = {}
    warmups: dict = {}
    for rule in RULES:
        read = [(e.tokens, e.rule(rule)) for e in out_checkpoints if e.rule(rule) is not None]
        curves[rule] = warmups[rule] = None
        if len(read) < 2:
            notes.append(f"{rule}: a power law over tokens needs a local CBS at two checkpoints or more "
                         f"(got {len(read)})")
            continue
        try:
            curve = fit_local_cbs_curve([t for t, _ in read], [r.local_cbs for _, r in read],
                                        lower_bounds=[r.lower_bound for _, r in read])
        except CbsError as exc:
            notes.append(f"{rule}: {exc}")
            continue
        curves[rule] = curve
        top = int(max(local.all_multipliers()) * local.base_batch_size)
        plan = plan_warmup(curve, base_batch_size=local.base_batch_size, context_tokens=spec.context_tokens,
                           total_tokens=spec.tokens[0], max_batch_size=top,
                           lr_rule=local.lr_rule)
        warmups[rule] = LocalWarmup(plan=plan, max_batch_size=top)
    read = [e for e in out_checkpoints if e.noise_decides]
    ever = {rule: any(e.noise_decides.get(rule, False) for e in read)
            for rule in ("noise_aware", "noise_aware_raw") if any(rule in e.noise_decides for e in read)}
    for rule, decided in ever.items():
        if not decided:
            notes.append(f"{rule}: the noise never decided a comparison (the floor ε = {local.epsilon:g} did at every "
                         f"one of {len(read)} checkpoints): this rule is Merrill's one ε on the held-out loss here")
    return LocalStudyReadout(
        study=spec.name, model=spec.models[0], total_tokens=spec.tokens[0], context_tokens=spec.context_tokens,
        base_batch_size=local.base_batch_size, base_lr=local.base_lr, lr_rule=local.lr_rule, epsilon=local.epsilon,
        z=local.z, window_rule=local.window_rule, window_label=WINDOW_LABELS[local.window_rule],
        averaging=local.averaging, averaging_label=AVERAGING_LABELS[local.averaging], noise_ever_decided=ever,
        checkpoints=tuple(out_checkpoints), curve=curves, warmup=warmups, notes=tuple(notes), branches_pending=pending,
        warmup_run=local.warmup_run, arms=arms_readout(spec, records),
        base_b_simple=tuple(BaseNoiseScale(seed=seed, tokens=tuple(float(t) for t in tokens),
                                           b_simple=tuple(float(v) for v in values))
                            for seed, (tokens, values) in sorted((b_simple or {}).items()) if len(tokens)))


def seed_interval(values: Sequence[float], level: float = 0.95) -> SeedInterval:
    """Mean of per-seed values and its interval: ``mean ± t·SE`` (Student's t at ``level``,
    ``n − 1`` degrees of freedom, ``SE = sd/√n``) with three seeds or more, the range ``[min, max]``
    with two (a t-interval on one degree of freedom is ±12.7·SE: no information), none with one."""
    from scipy import stats

    n = len(values)
    if n == 0:
        return SeedInterval(mean=None, interval=None, interval_kind=None, n=0)
    mean = float(sum(values) / n)
    if n == 1:
        return SeedInterval(mean=mean, interval=None, interval_kind="one seed", n=1)
    if n == 2:
        return SeedInterval(mean=mean, interval=(float(min(values)), float(max(values))), interval_kind="range", n=2)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df=n - 1)) * sd / math.sqrt(n)
    return SeedInterval(mean=mean, interval=(mean - half, mean + half), interval_kind=f"t{round(100 * level)}", n=n)


def arms_readout(spec: StudySpec, records: Sequence[TrialRecord]) -> ArmsReadout | None:
    """The warm-up run against its controls at equal tokens (``None`` without ``local.warmup_run``).

    Per arm (:data:`cbscore.local.ARM_ROLES`): per seed the status, final held-out loss (EWA
    weights, best τ: ``summary/final_eval_loss``), steps taken and tokens trained, and over the seeds
    that finished the mean loss with :func:`seed_interval`. ``comparison``: the warm-up against the
    small-batch control, paired by seed (the same initialisation and data order): the mean
    difference ``d̄ = L_warmup − L_small`` and its tolerance ``max(ε, z·SE(d))`` (the noise-aware
    rule's, Student 1908; ``ε`` alone with one seed); *matched* when ``d̄`` is within it (one-sided:
    lower is never worse), with the steps saved. Pure."""
    from cbscore.local import ArmReadout, ArmSeed, ArmsReadout
    from cbscore.study.local_plan import arm_trial_id, study_arms

    arms = study_arms(spec)
    if not arms:
        return None
    local = spec.local
    by_id = {r.trial_id: r for r in records}
    labels = {"warmup": "warm-up", "control-small": "small-batch control", "control-large": "large-batch control"}
    out, finished = [], {}
    for arm in arms:
        seeds = []
        for seed in spec.seeds:
            r = by_id.get(arm_trial_id(spec, arm.role, seed))
            loss = None if r is None or r.final_eval_loss is None or not math.isfinite(r.final_eval_loss) \
                else float(r.final_eval_loss)
            raw = None if r is None or r.status != "finished" else r.final_raw_loss
            seeds.append(ArmSeed(seed=seed, status="not started" if r is None else r.status,
                                 final_eval_loss_nats=loss if r is not None and r.status == "finished" else None,
                                 final_raw_loss_nats=raw,
                                 steps=None if r is None else r.last_step, tokens=None if r is None else r.tokens))
        done = [e for e in seeds if e.status == "finished" and e.final_eval_loss_nats is not None]
        finished[arm.role] = {e.seed: e for e in done}
        steps, tokens = sorted({e.steps for e in done}), sorted({e.tokens for e in done})
        out.append(ArmReadout(
            role=arm.role, label=labels[arm.role], batch_size=arm.batch_size, final_batch_size=arm.final_batch_size,
            lr=arm.lr, final_lr=arm.final_lr(), batch_schedule=tuple(tuple(e) for e in arm.batch_schedule),
            planned_steps=arm.steps, planned_tokens=arm.max_tokens, seeds=tuple(seeds), finished=len(done),
            final_eval_loss=seed_interval([e.final_eval_loss_nats for e in done]),
            final_raw_loss=seed_interval([e.final_raw_loss_nats for e in done if e.final_raw_loss_nats is not None]),
            steps=tuple(steps) or None, tokens=tuple(tokens) or None))
    comparison = _compare(finished, local.epsilon, local.z)
    raw = _compare({role: {s: replace(e, final_eval_loss_nats=e.final_raw_loss_nats) for s, e in seeds.items()
                           if e.final_raw_loss_nats is not None} for role, seeds in finished.items()},
                   local.epsilon, local.z)
    return ArmsReadout(rule="paired by seed: matched when L_warmup − L_small ≤ max(ε, z·SE)", epsilon=local.epsilon,
                       z=local.z, total_tokens=arms[0].max_tokens,
                       averaging="per B0·T tokens (τ^(B/B0) per step of B)" if local.averaging != "carry" else "per step",
                       arms=tuple(out), comparison=comparison, comparison_raw=raw,
                       verdict=_verdict({a.role: a for a in out}, comparison))


def _compare(finished: Mapping[str, Mapping[int, ArmSeed]], epsilon: float, z: float) -> ArmComparison | None:
    """The warm-up against the small-batch control over the seeds where both finished."""
    from cbscore.local import ArmComparison

    warm, small = finished.get("warmup", {}), finished.get("control-small", {})
    paired = sorted(set(warm) & set(small))
    if not paired:
        return None
    diffs = [warm[s].final_eval_loss_nats - small[s].final_eval_loss_nats for s in paired]
    n = len(diffs)
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) / math.sqrt(n) if n > 1 else None
    tolerance = max(epsilon, z * se) if se is not None else epsilon
    steps_warm = sum(warm[s].steps for s in paired) / n
    steps_small = sum(small[s].steps for s in paired) / n
    return ArmComparison(seeds=tuple(paired), loss_difference_nats=mean, difference_se_nats=se,
                         tolerance_nats=tolerance, matched=bool(mean <= tolerance), steps_warmup=steps_warm,
                         steps_small=steps_small, steps_saved=steps_small - steps_warm,
                         fraction_saved=1.0 - steps_warm / steps_small if steps_small else None,
                         fewer_steps=bool(steps_warm < steps_small),
                         tokens_equal=len({e.tokens for role in finished.values() for e in role.values()}) == 1)


def _verdict(by_role: Mapping[str, ArmReadout], c: ArmComparison | None) -> str | None:
    """One sentence: did the warm-up match the small-batch control's loss with fewer steps?"""
    if c is None:
        return None
    warm, small, large = (by_role[r].final_eval_loss.mean for r in ("warmup", "control-small", "control-large"))
    saved = c.fraction_saved or 0.0
    steps = (f"{c.steps_warmup:,.0f} steps against {c.steps_small:,.0f} "
             f"({100 * abs(saved):.1f}% {'fewer' if saved >= 0 else 'more'})")
    seeds = f"{len(c.seeds)} seed{'s' if len(c.seeds) != 1 else ''}"
    head = (f"The warm-up matched the small-batch control's held-out loss ({warm:.4f} against {small:.4f} nats, "
            f"difference {c.loss_difference_nats:+.4f} within the tolerance {c.tolerance_nats:.4f}) in {steps}"
            if c.matched else
            f"The warm-up did not match the small-batch control's held-out loss ({warm:.4f} against {small:.4f} nats, "
            f"difference {c.loss_difference_nats:+.4f} above the tolerance {c.tolerance_nats:.4f}); it took {steps}")
    tail = "" if large is None else f"; the large-batch control ended at {large:.4f} nats"
    return f"{head}{tail} ({seeds}, equal tokens)." if c.tokens_equal else \
        f"{head}{tail} ({seeds}; the arms did not train equal tokens)."


def kind_records(name: str, kind: str, *, with_history: bool | None = None):
    """``(spec, records, tracker)`` of study ``name``, which must be of kind ``kind`` (``local``,
    ``schedule``): its spec and its trials' records from MLflow and the ledger (with their evaluation
    histories when ``with_history``; where the planner needs them when ``None``, as
    :func:`workers.studies.records.build_records`), and the tracker they were read with."""
    from cbscore.errors import ConfigError
    from cbscore.study.kinds import require_kind
    from workers.infra.settings import WorkerSettings
    from workers.studies.ledger import Ledger
    from workers.studies.records import build_records, in_spec
    from workers.tracking import Tracker

    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri, s.artifact_root)
    parent = tracker.study_run(name)
    if parent is None:
        raise ConfigError("name", name, "names no study")
    spec = StudySpec.from_dict(tracker.study_spec(parent))
    require_kind(name, spec, kind)
    runs = tracker.trial_runs(parent.info.experiment_id, parent.info.run_id)
    leases = Ledger(s.ledger_url).leases(name)
    return spec, in_spec(spec, build_records(runs, leases, tracker, with_history=with_history)), tracker


def local_fit(name: str) -> LocalStudyReadout:
    """:func:`local_readout` of study ``name`` from MLflow and the ledger (as ``workers.query.api`` reads a
    study; :func:`workers.query.api.study_local_fit` is this, for the pages)."""
    spec, records, tracker = kind_records(name, "local")
    cache: dict[str, Sequence[float]] = {}

    def train_losses(record: TrialRecord) -> Sequence[float]:
        if record.run_id not in cache:
            cache[record.run_id] = tracker.history(tracker.get_run(record.run_id), "train/loss")[1]
        return cache[record.run_id]

    from cbscore.study.local_plan import base_trial_id

    by_id = {r.trial_id: r for r in records}
    noise = {}
    step_tokens = spec.local.base_batch_size * spec.context_tokens
    for seed in spec.seeds:
        base = by_id.get(base_trial_id(spec, seed))
        if base is not None and base.run_id is not None:
            steps, values = tracker.history(tracker.get_run(base.run_id), "gns/b_simple")
            keep = [(st * step_tokens, v) for st, v in zip(steps, values) if math.isfinite(v) and v > 0]
            noise[seed] = ([t for t, _ in keep], [v for _, v in keep])
    return local_readout(spec, records, train_losses, noise)


def format_local(fit: LocalStudyReadout) -> str:
    """The text of ``cbs study fit`` for a local study."""
    lines = [f"local CBS of {fit.study} ({fit.model}, B0 = {fit.base_batch_size}, T = {fit.context_tokens}, "
             f"ε = {fit.epsilon:g} nats; Merrill et al. 2025):",
             f"  window: {fit.window_label}; held-out loss {fit.averaging_label}"]
    for c in fit.checkpoints:
        cells = []
        for rule in (*RULES, "noise_aware_raw"):
            r = c.rule(rule)
            cells.append(f"{rule} —" if r is None else
                         f"{rule} {r.local_cbs:g}{'+' if r.lower_bound else ''}"
                         + (" (ε decides)" if r.tolerance_decides else "")
                         + ("" if rule == "merrill" else " (noise decided)" if r.noise_decides else " (floor ε)"))
        lines.append(f"  t = {c.tokens:>12,}  Δ = {c.window_tokens:>10,}  " + "  ".join(cells))
    for rule in RULES:
        curve, warm = fit.curve[rule], fit.warmup[rule]
        if curve is not None:
            lines.append(f"{rule}: B*(t) = {curve.coef:.4g}·t^{curve.exponent:.3g} (R² {curve.r2:.3f}); "
                         f"warm-up {warm.plan.steps:,} vs {warm.plan.constant_steps:,} steps "
                         f"({100 * warm.plan.fraction_saved:.1f}% fewer), switches "
                         f"{[list(e) for e in warm.plan.batch_schedule]}")
    arms = fit.arms
    if arms is not None:
        lines.append(f"warm-up against its controls at {arms.total_tokens:,} tokens each (Merrill et al. 2025, "
                     "Table 1):")
        for a in arms.arms:
            loss = a.final_eval_loss
            read = "—" if loss.mean is None else f"{loss.mean:.4f}" + (
                "" if loss.interval is None else f" [{loss.interval[0]:.4f}, {loss.interval[1]:.4f}] "
                                                 f"({loss.interval_kind})")
            lines.append(f"  {a.label:<20} B {a.batch_size}→{a.final_batch_size}  loss {read}  steps "
                         f"{list(a.steps or ()) or a.planned_steps}  finished {a.finished}/{len(a.seeds)}")
        if arms.verdict:
            lines.append(f"  {arms.verdict}")
    lines += [f"note: {n}" for n in fit.notes]
    return "\n".join(lines)
