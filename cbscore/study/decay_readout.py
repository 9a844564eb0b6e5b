"""The readout of a ``schedule`` study: steps to target, S(B), B_noise and B* per schedule.

Pure (records in, a :class:`ScheduleReadout` out, whose ``to_json_dict()`` is the JSON of
``cbs study fit NAME --json`` and of the report's ``schedules.json``); ``cbs study fit NAME`` reads the records from MLflow
(``workers.studies.schedule_fit``). Per schedule (:mod:`cbscore.study.decay_spec`):

- **target**: the schedule's own held-out loss at D at ``B_ref`` (``H_D = round(D / (B_ref·T))``
  steps), the best learning rate's mean over seeds, as DESIGN.md §1 sets a setting's target from
  its reference cell: ``constant_ewa`` reads the stable runs' EWA history at ``H_D``
  (interpolated in ln step between the evaluations around it), ``wsd`` the raw weights of the decay
  branch to ``H_D``, ``cosine`` the raw weights of the cosine run to ``H_D``. After a decay to
  the floor the raw weights are what WSD and cosine deliver (the decay does the averaging: Hägele
  et al. 2024, §4); the EWA of a decayed run is reported by the trainer but not read here.
- **steps to target of a run**: ``constant_ewa`` by the lab's crossing rule on the stable run's
  EWA history (:func:`cbscore.analysis.first_crossing`); ``wsd`` and ``cosine`` the first horizon
  whose decayed loss reaches the target, interpolated in ln H (:func:`cbscore.decay.steps_from_horizons`).
  A run that reaches it at no horizon is censored at the last one (a lower bound), one that is at
  the target at the first horizon already is read there (an upper bound, noted).
- **S(B), B_noise, B***: the steps table of each schedule (one row per ``(B, lr, seed)``, the rows
  ``cbs fit`` reads) through :func:`cbscore.analysis.analyze_table`: the same estimator, intervals
  (seeds resampled whole) and refusals as any study. The bootstrap holds each schedule's target
  fixed (the table carries no histories), and says so.
- **WSD's E(S)**: the classical and the revised forms (:func:`cbscore.analysis.fit_wsd_es`) on the
  per-``(B, seed)`` best steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cbscore.study.decay_plan import (
    cosine_grid,
    cosine_trial_id,
    decay_trial_id,
    rates_at,
    run_keys,
    stable_trial_id,
    study_setting,
    wsd_grid,
)
from cbscore.study.decay_spec import DecaySpec
from cbscore.study.spec import StudySpec
from cbscore.study.trials import TrialRecord

if TYPE_CHECKING:
    from cbscore.analysis import WsdEsAnalysis

#: Row columns of the steps table (``cbs fit``'s).
ROW_COLUMNS = ("setting", "batch_size", "steps", "n_params", "tokens", "context", "outcome", "seed", "budget_steps", "lr")


@dataclass(frozen=True, kw_only=True)
class ScheduleRun:
    """One ``(B, lr, seed)`` run of a schedule read against the schedule's target: a row of its
    steps table (the columns ``cbs fit`` reads, :data:`ROW_COLUMNS`)."""

    setting: str
    """``{setting}.{schedule}``: each schedule is a setting of its own in the steps table."""
    batch_size: int
    """Sequences per optimizer step."""
    n_params: int
    """Non-embedding parameters of the setting's model."""
    tokens: int
    """Training tokens of the setting (D)."""
    context_tokens: int
    """Tokens per sequence (the table's ``context`` column)."""
    seed: int
    """The run's seed."""
    lr: float
    """Peak learning rate."""
    steps: float | None
    """Steps to the target: the crossing where ``reached``, the last horizon (a lower bound) where
    ``censored``; ``None`` where ``diverged``."""
    outcome: str
    """``reached``, ``censored`` or ``diverged``."""
    budget_steps: float | None
    """Steps a censored run trained without reaching the target; ``None`` otherwise."""
    at_most: bool | None = None
    """A horizon reading (``wsd``, ``cosine``) that reached the target: whether it was there at the
    first horizon already (``steps`` an upper bound); ``None`` for the other rows (no such column)."""

    def to_json_dict(self) -> dict[str, Any]:
        out = {"setting": self.setting, "batch_size": self.batch_size, "n_params": self.n_params,
               "tokens": self.tokens, "context": self.context_tokens, "seed": self.seed, "lr": self.lr,
               "steps": self.steps, "outcome": self.outcome, "budget_steps": self.budget_steps}
        if self.at_most is not None:
            out["at_most"] = self.at_most
        return out

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> ScheduleRun:
        return cls(setting=data["setting"], batch_size=data["batch_size"], n_params=data["n_params"],
                   tokens=data["tokens"], context_tokens=data["context"], seed=data["seed"], lr=data["lr"],
                   steps=data["steps"], outcome=data["outcome"], budget_steps=data["budget_steps"],
                   at_most=data.get("at_most"))


@dataclass(frozen=True, kw_only=True)
class SchedulePoint:
    """S(B) at one batch size: the point the fit reads (:func:`cbscore.analysis.analyze_table`)."""

    batch_size: int
    """Sequences per optimizer step."""
    steps: float | None
    """Steps to target at this batch size (the best rate's, over seeds); ``None``: none measured."""
    n_trials: int
    """Runs read at this batch size."""
    n_censored: int
    """Of those, runs censored at their last horizon."""

    def to_json_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "steps": self.steps, "n_trials": self.n_trials,
                "n_censored": self.n_censored}


@dataclass(frozen=True, kw_only=True)
class StepsCurveFit:
    """S(B) = S_min + b/B fitted on log S, B_noise = b/S_min (McCandlish et al. 2018, arXiv
    1812.06162, eq. 2.11) and B* = the largest B with S(B) ≤ (1 + r)·S(B_ref)·B_ref/B (Zhang et al.
    2025, §2.2), with their 95% bootstrap intervals. Batch sizes are in sequences."""

    s_min_steps: float
    """S_min: the fewest steps to target, at an infinite batch size."""
    b_steps_sequences: float
    """b of S(B) = S_min + b/B (steps × sequences)."""
    b_noise: float
    """B_noise = b/S_min (sequences)."""
    cbs: float | None
    """B* of the fitted curve (sequences); ``None`` where the curve gives none."""
    cbs_ci: tuple[float, float] | None
    """B*'s 95% interval; ``None`` without a bootstrap."""
    cbs_empirical: float | None
    """B* read off the measured points (sequences); ``None`` where they give none."""
    b_noise_ci: tuple[float, float] | None
    """B_noise's 95% interval; ``None`` without a bootstrap."""

    def to_json_dict(self) -> dict[str, Any]:
        return {"s_min": self.s_min_steps, "b": self.b_steps_sequences, "b_noise": self.b_noise, "cbs": self.cbs,
                "cbs_ci": None if self.cbs_ci is None else list(self.cbs_ci), "cbs_empirical": self.cbs_empirical,
                "b_noise_ci": None if self.b_noise_ci is None else list(self.b_noise_ci)}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> StepsCurveFit:
        def pair(x):
            return None if x is None else (x[0], x[1])

        return cls(s_min_steps=data["s_min"], b_steps_sequences=data["b"], b_noise=data["b_noise"], cbs=data["cbs"],
                   cbs_ci=pair(data["cbs_ci"]), cbs_empirical=data["cbs_empirical"],
                   b_noise_ci=pair(data["b_noise_ci"]))


@dataclass(frozen=True, kw_only=True)
class ScheduleFit:
    """One schedule's readout: its target, its runs, S(B), the fit and B*, and under WSD the E(S) fits."""

    schedule: str
    """``constant_ewa``, ``cosine`` or ``wsd`` (:mod:`cbscore.study.decay_spec`)."""
    target_loss_nats: float | None
    """The schedule's own target: its held-out loss at D at B_ref (module docstring); ``None``: none yet."""
    runs: tuple[ScheduleRun, ...]
    """Every ended run read against the target: the schedule's steps table."""
    points: tuple[SchedulePoint, ...]
    """S(B) per batch size, ascending."""
    fit: StepsCurveFit | None
    """The fit of S(B); ``None`` where the points cannot give one (``errors`` says why)."""
    errors: tuple[str, ...]
    """Why a part is missing, and what the intervals leave out."""
    es_fit: WsdEsAnalysis | None = None
    """``wsd`` only: the classical and revised E(S) fits on each ``(B, seed)``'s fewest steps
    (:func:`cbscore.analysis.fit_wsd_es`); ``None`` with fewer than three points."""

    def es_points(self) -> tuple[list[float], list[float]]:
        """The ``(B, S)`` points the E(S) fits read, as ``cbs fit --es`` reads them from the runs."""
        return _es_points(self.runs)

    def to_json_dict(self) -> dict[str, Any]:
        out = {"target": self.target_loss_nats, "rows": [r.to_json_dict() for r in self.runs],
               "points": [p.to_json_dict() for p in self.points],
               "fit": None if self.fit is None else self.fit.to_json_dict(), "errors": list(self.errors)}
        if self.schedule == "wsd":  # the only schedule with E(S) fits: the key says it was tried
            out["es_fit"] = None if self.es_fit is None else self.es_fit.to_dict()
        return out

    @classmethod
    def from_json_dict(cls, schedule: str, data: Mapping[str, Any]) -> ScheduleFit:
        from cbscore.analysis import EsFit, WsdEsAnalysis

        es = data.get("es_fit")
        if es is not None:
            es = WsdEsAnalysis(**{**es, "notes": tuple(es["notes"]), **{
                form: None if es[form] is None else EsFit(**es[form]) for form in ("classical", "quadratic")}})
        return cls(schedule=schedule, target_loss_nats=data["target"],
                   runs=tuple(ScheduleRun.from_json_dict(r) for r in data["rows"]),
                   points=tuple(SchedulePoint(**p) for p in data["points"]),
                   fit=None if data["fit"] is None else StepsCurveFit.from_json_dict(data["fit"]),
                   errors=tuple(data["errors"]), es_fit=es)


@dataclass(frozen=True, kw_only=True)
class ScheduleReadout:
    """The readout of a ``schedule`` study (module docstring): ``cbs study fit NAME`` for ``kind: schedule``."""

    b_ref: int
    """The reference batch size (sequences) each schedule's target and B* are read at."""
    overhead: float
    """r of B*'s definition: the share of extra steps B* may take over perfect scaling from B_ref."""
    context_tokens: int
    """Tokens per sequence."""
    decay: DecaySpec
    """The study's schedules and horizons."""
    schedules: dict[str, ScheduleFit]
    """Each schedule's readout by its name, in the spec's order."""
    notes: tuple[str, ...]
    """The schedules with no target yet, and why."""
    comparison: tuple[str, ...]
    """One line per pair of fitted schedules: their B* ratio and whether the intervals overlap."""

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON of ``cbs study fit NAME --json`` and of the report's ``schedules.json``."""
        return {"kind": "schedule", "b_ref": self.b_ref, "overhead": self.overhead,
                "context_tokens": self.context_tokens, "decay": self.decay.to_dict(),
                "schedules": {name: e.to_json_dict() for name, e in self.schedules.items()},
                "notes": list(self.notes), "comparison": list(self.comparison)}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> ScheduleReadout:
        """The readout :meth:`to_json_dict` wrote (a report's ``schedules.json``)."""
        return cls(b_ref=data["b_ref"], overhead=data["overhead"], context_tokens=data["context_tokens"],
                   decay=DecaySpec.from_dict(data["decay"]),
                   schedules={name: ScheduleFit.from_json_dict(name, e) for name, e in data["schedules"].items()},
                   notes=tuple(data["notes"]), comparison=tuple(data["comparison"]))


def _at_step(steps: Sequence[float], losses: Sequence[float], step: float) -> float | None:
    """The loss at ``step`` on a straight line in ln step between the evaluations around it."""
    pts = [(s, x) for s, x in zip(steps, losses) if s > 0 and x is not None and math.isfinite(x)]
    for (s0, x0), (s1, x1) in zip(pts, pts[1:]):
        if s0 <= step <= s1:
            share = 0.0 if s1 == s0 else (math.log(step) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return x0 + share * (x1 - x0)
    return next((x for s, x in pts if s == step), None)


def _finished_loss(rec: TrialRecord | None) -> float | None:
    if rec is None or rec.status != "finished" or rec.final_raw_loss is None or not math.isfinite(rec.final_raw_loss):
        return None
    return float(rec.final_raw_loss)


def horizon_losses(spec: StudySpec, records: Sequence[TrialRecord]) -> dict:
    """``{schedule: {(B, lr, seed): ([horizons], [losses])}}`` for ``wsd`` and ``cosine``; a
    loss is ``None`` where the run has not finished (or diverged)."""
    by_id = {r.trial_id: r for r in records}
    out: dict = {}
    for b, lr, s in run_keys(spec):
        if "wsd" in spec.decay.schedules:
            points = wsd_grid(spec, b)
            out.setdefault("wsd", {})[(b, lr, s)] = (
                [p.horizon_steps for p in points],
                [_finished_loss(by_id.get(decay_trial_id(spec, b, lr, s, p.horizon_steps))) for p in points])
        if "cosine" in spec.decay.schedules:
            horizons = list(cosine_grid(spec, b))
            out.setdefault("cosine", {})[(b, lr, s)] = (
                horizons, [_finished_loss(by_id.get(cosine_trial_id(spec, b, lr, s, h))) for h in horizons])
    return out


def schedule_targets(spec: StudySpec, records: Sequence[TrialRecord]) -> tuple[dict, list[str]]:
    """Each schedule's target (module docstring) and the notes of those that have none yet."""
    by_id = {r.trial_id: r for r in records}
    setting = study_setting(spec)
    h_d = round(setting.tokens / (spec.b_ref * spec.context_tokens))
    losses = horizon_losses(spec, records)
    targets, notes = {}, []
    for schedule in spec.decay.schedules:
        per_lr = {}
        for lr in rates_at(spec, spec.b_ref):
            values = []
            for s in spec.seeds:
                if schedule == "constant_ewa":
                    rec = by_id.get(stable_trial_id(spec, spec.b_ref, lr, s))
                    values.append(None if rec is None or not rec.eval_steps else
                                  _at_step(rec.eval_steps, rec.eval_losses, h_d))
                else:
                    horizons, xs = losses[schedule][(spec.b_ref, lr, s)]
                    values.append(xs[horizons.index(h_d)] if h_d in horizons else None)
            if values and all(v is not None for v in values):
                per_lr[lr] = sum(values) / len(values)
        if per_lr:
            targets[schedule] = min(per_lr.values())
        else:
            notes.append(f"{schedule}: no target yet (no learning rate at B_ref = {spec.b_ref} has every seed's loss "
                         f"at D = {h_d} steps)")
    return targets, notes


def schedule_rows(spec: StudySpec, records: Sequence[TrialRecord], targets: dict) -> dict[str, list[ScheduleRun]]:
    """The steps table of each schedule with a target: one row per ended ``(B, lr, seed)``."""
    from cbscore.analysis import first_crossing
    from cbscore.decay import steps_from_horizons

    by_id = {r.trial_id: r for r in records}
    setting = study_setting(spec)
    losses = horizon_losses(spec, records)
    out: dict[str, list[ScheduleRun]] = {}
    for schedule, target in targets.items():
        rows = out.setdefault(schedule, [])
        for b, lr, s in run_keys(spec):
            base = dict(setting=f"{setting.setting_id}.{schedule}", batch_size=b, n_params=setting.n_params,
                        tokens=setting.tokens, context_tokens=spec.context_tokens, seed=s, lr=lr)
            if schedule == "constant_ewa":
                rec = by_id.get(stable_trial_id(spec, b, lr, s))
                if rec is None or rec.status not in ("finished", "diverged"):
                    continue
                if rec.status == "diverged":
                    rows.append(ScheduleRun(**base, steps=None, outcome="diverged", budget_steps=None))
                    continue
                steps = first_crossing(rec.eval_steps, rec.eval_losses, target) if rec.eval_steps else None
                budget = rec.eval_steps[-1] if rec.eval_steps else rec.last_step
                rows.append(ScheduleRun(**base, steps=steps if steps is not None else budget,
                                        outcome="reached" if steps is not None else "censored", budget_steps=budget))
                continue
            horizons, xs = losses[schedule][(b, lr, s)]
            ended = [by_id.get(tid) for tid in _ids(spec, schedule, b, lr, s, horizons)]
            if any(r is None or r.status not in ("finished", "diverged", "failed") for r in ended):
                continue  # not every horizon has ended: the crossing may still move
            if all(x is None for x in xs):
                rows.append(ScheduleRun(**base, steps=None, outcome="diverged", budget_steps=None))
                continue
            crossing = steps_from_horizons(horizons, xs, target)
            if crossing.censored:
                rows.append(ScheduleRun(**base, steps=crossing.bracket[0], outcome="censored",
                                        budget_steps=crossing.bracket[0]))
            else:
                rows.append(ScheduleRun(**base, steps=crossing.steps, outcome="reached", budget_steps=None,
                                        at_most=crossing.at_most))
    return out


def _ids(spec, schedule, b, lr, s, horizons):
    make = decay_trial_id if schedule == "wsd" else cosine_trial_id
    return [make(spec, b, lr, s, h) for h in horizons]


def schedule_readout(spec: StudySpec, records: Sequence[TrialRecord], *, bootstrap: int = 1000,
                     seed: int = 0) -> ScheduleReadout:
    """The readout of a schedule study (module docstring)."""
    targets, notes = schedule_targets(spec, records)
    rows = schedule_rows(spec, records, targets)
    schedules = {name: _schedule_fit(spec, name, targets.get(name), tuple(rows.get(name, [])), bootstrap=bootstrap,
                                     seed=seed)
                 for name in spec.decay.schedules}
    return ScheduleReadout(b_ref=spec.b_ref, overhead=spec.overhead, context_tokens=spec.context_tokens,
                           decay=spec.decay, schedules=schedules, notes=tuple(notes),
                           comparison=tuple(_compare(schedules)))


def _schedule_fit(spec: StudySpec, schedule: str, target: float | None, runs: tuple[ScheduleRun, ...], *,
                  bootstrap: int, seed: int) -> ScheduleFit:
    """One schedule's S(B), its fit and B*, and under WSD the E(S) fits, from its runs."""
    from cbscore.analysis import analyze_table, fit_wsd_es

    def done(points=(), fit=None, errors=(), es_fit=None):
        return ScheduleFit(schedule=schedule, target_loss_nats=target, runs=runs, points=tuple(points), fit=fit,
                           errors=tuple(errors), es_fit=es_fit)

    table = [{k: ("" if r.get(k) is None else r[k]) for k in ROW_COLUMNS} for r in (run.to_json_dict() for run in runs)]
    if not table:
        return done(errors=["no run has ended with a reading yet"])
    errors = []
    if any(r.at_most for r in runs):
        errors.append("some runs were at the target at their first horizon: their steps are upper bounds")
    analysis = analyze_table(table, b_ref=spec.b_ref, overhead=spec.overhead, bootstrap=bootstrap, seed=seed)
    # one setting per schedule: the scaling laws across settings have nothing to say here
    errors += [x for x in analysis.errors if not x.startswith(("scaling law", "joint scaling law"))]
    [setting] = analysis.settings
    points = [SchedulePoint(batch_size=p.batch_size, steps=p.steps, n_trials=p.n_trials, n_censored=p.n_censored)
              for p in setting.points]
    fit = None
    if setting.fit is not None:
        boot = setting.bootstrap
        fit = StepsCurveFit(s_min_steps=setting.fit.a, b_steps_sequences=setting.fit.b, b_noise=setting.fit.b_noise,
                            cbs=setting.cbs, cbs_ci=None if setting.cbs_ci is None else tuple(setting.cbs_ci),
                            cbs_empirical=setting.cbs_empirical,
                            b_noise_ci=None if boot is None else tuple(boot.b_noise_ci))
    es_fit = None
    if schedule == "wsd":  # the same points and fits as `cbs fit --es` on the exported table
        b, s = _es_points(runs)
        es_fit = fit_wsd_es(b, s) if len(s) >= 3 else None
    return done(points, fit, errors, es_fit)


def _es_points(runs: Sequence[ScheduleRun]) -> tuple[list[float], list[float]]:
    """Each ``(B, seed)``'s fewest steps over its reached runs (:func:`cbscore.analysis.es_points`)."""
    from cbscore.analysis import es_points

    return next(iter(es_points([r.to_json_dict() for r in runs]).values()), ([], []))


def _compare(schedules: Mapping[str, ScheduleFit]) -> list[str]:
    """One line per pair of schedules: do their B* intervals overlap?"""
    lines = []
    names = [n for n, e in schedules.items() if e.fit is not None and e.fit.cbs is not None]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            fa, fb = schedules[a].fit, schedules[b].fit
            ratio = fb.cbs / fa.cbs
            if fa.cbs_ci is None or fb.cbs_ci is None:
                verdict = "no intervals"
            elif fa.cbs_ci[1] < fb.cbs_ci[0] or fb.cbs_ci[1] < fa.cbs_ci[0]:
                verdict = "the 95% intervals do not overlap: they differ beyond the intervals"
            else:
                verdict = "the 95% intervals overlap: no difference beyond the intervals"
            lines.append(f"B*({b}) / B*({a}) = {ratio:.3g}; {verdict}")
    return lines


def format_schedule(fit: ScheduleReadout) -> str:
    """The text of ``cbs study fit`` for a schedule study."""
    out = [f"CBS per schedule: S(B) = a + b/B on log S, B* at r = {fit.overhead:g}, B_ref = {fit.b_ref}; "
           "each schedule against its own target (its loss at D at B_ref)"]
    for name, e in fit.schedules.items():
        target = "—" if e.target_loss_nats is None else f"{e.target_loss_nats:.4f} nats"
        out.append(f"\n{name}: target {target}; {len(e.runs)} runs read")
        for p in e.points:
            s = "—" if p.steps is None else f"{p.steps:.1f}"
            out.append(f"  B = {p.batch_size:>5}  S(B) = {s:>9}  ({p.n_trials} runs, {p.n_censored} censored)")
        f = e.fit
        if f is not None:
            ci = "" if f.cbs_ci is None else f" [{f.cbs_ci[0]:.3g}, {f.cbs_ci[1]:.3g}]"
            cbs = "—" if f.cbs is None else f"{f.cbs:.3g}"
            out.append(f"  S_min = {f.s_min_steps:.4g} steps, B_noise = {f.b_noise:.4g}, B* = {cbs}{ci}")
        es = e.es_fit
        if es is not None:
            def fmt(x):
                return "—" if x is None else f"{x:.4g}"

            out.append(f"  E(S) classical: B_noise = {fmt(es.b_noise)}; revised (quadratic stage, Zhou/Huang et al. "
                       f"2026): B_opt = {fmt(es.b_opt)}, B_min = {fmt(es.b_min)}; better: {es.better} "
                       f"({es.reason})")
            out.extend(f"  note: {n}" for n in es.notes)
        out.extend(f"  note: {x}" for x in e.errors)
    if fit.comparison:
        out.append("")
        out.extend(fit.comparison)
    out.extend(f"note: {n}" for n in fit.notes)
    return "\n".join(out)
