"""The readout of a ``schedule`` study: steps to target, S(B), B_noise and B* per schedule.

Pure (records in, a JSON-safe dict out); ``cbs study fit NAME`` reads the records from MLflow
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
from collections.abc import Sequence

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
from cbscore.study.spec import StudySpec
from cbscore.study.trials import TrialRecord

#: Row columns of the steps table (``cbs fit``'s).
ROW_COLUMNS = ("setting", "batch_size", "steps", "n_params", "tokens", "context", "outcome", "seed", "budget_steps", "lr")


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


def schedule_rows(spec: StudySpec, records: Sequence[TrialRecord], targets: dict) -> dict[str, list[dict]]:
    """The steps table of each schedule with a target: one row per ended ``(B, lr, seed)``."""
    from cbscore.analysis import first_crossing
    from cbscore.decay import steps_from_horizons

    by_id = {r.trial_id: r for r in records}
    setting = study_setting(spec)
    losses = horizon_losses(spec, records)
    out: dict[str, list[dict]] = {}
    for schedule, target in targets.items():
        rows = out.setdefault(schedule, [])
        for b, lr, s in run_keys(spec):
            base = {"setting": f"{setting.setting_id}.{schedule}", "batch_size": b, "n_params": setting.n_params,
                    "tokens": setting.tokens, "context": spec.context_tokens, "seed": s, "lr": lr}
            if schedule == "constant_ewa":
                rec = by_id.get(stable_trial_id(spec, b, lr, s))
                if rec is None or rec.status not in ("finished", "diverged"):
                    continue
                if rec.status == "diverged":
                    rows.append({**base, "steps": None, "outcome": "diverged", "budget_steps": None})
                    continue
                steps = first_crossing(rec.eval_steps, rec.eval_losses, target) if rec.eval_steps else None
                budget = rec.eval_steps[-1] if rec.eval_steps else rec.last_step
                rows.append({**base, "steps": steps if steps is not None else budget,
                             "outcome": "reached" if steps is not None else "censored", "budget_steps": budget})
                continue
            horizons, xs = losses[schedule][(b, lr, s)]
            ended = [by_id.get(tid) for tid in _ids(spec, schedule, b, lr, s, horizons)]
            if any(r is None or r.status not in ("finished", "diverged", "failed") for r in ended):
                continue  # not every horizon has ended: the crossing may still move
            if all(x is None for x in xs):
                rows.append({**base, "steps": None, "outcome": "diverged", "budget_steps": None})
                continue
            crossing = steps_from_horizons(horizons, xs, target)
            if crossing.censored:
                rows.append({**base, "steps": crossing.bracket[0], "outcome": "censored",
                             "budget_steps": crossing.bracket[0]})
            else:
                rows.append({**base, "steps": crossing.steps, "outcome": "reached", "budget_steps": None,
                             "at_most": crossing.at_most})
    return out


def _ids(spec, schedule, b, lr, s, horizons):
    make = decay_trial_id if schedule == "wsd" else cosine_trial_id
    return [make(spec, b, lr, s, h) for h in horizons]


def schedule_readout(spec: StudySpec, records: Sequence[TrialRecord], *, bootstrap: int = 1000, seed: int = 0) -> dict:
    """The fit JSON of a schedule study (module docstring)."""
    from cbscore.analysis import analyze_table, es_points, fit_wsd_es

    targets, notes = schedule_targets(spec, records)
    rows = schedule_rows(spec, records, targets)
    out: dict = {"kind": "schedule", "b_ref": spec.b_ref, "overhead": spec.overhead,
                 "context_tokens": spec.context_tokens, "decay": spec.decay.to_dict(), "schedules": {},
                 "notes": notes}
    for schedule in spec.decay.schedules:
        entry: dict = {"target": targets.get(schedule), "rows": rows.get(schedule, []), "points": [], "fit": None,
                       "errors": []}
        out["schedules"][schedule] = entry
        table = [{k: ("" if r.get(k) is None else r[k]) for k in ROW_COLUMNS} for r in entry["rows"]]
        if not table:
            entry["errors"].append("no run has ended with a reading yet")
            continue
        if any(r.get("at_most") for r in entry["rows"]):
            entry["errors"].append("some runs were at the target at their first horizon: their steps are upper bounds")
        analysis = analyze_table(table, b_ref=spec.b_ref, overhead=spec.overhead, bootstrap=bootstrap, seed=seed)
        # one setting per schedule: the scaling laws across settings have nothing to say here
        entry["errors"] += [x for x in analysis.errors if not x.startswith(("scaling law", "joint scaling law"))]
        [setting] = analysis.settings
        entry["points"] = [{"batch_size": p.batch_size, "steps": p.steps, "n_trials": p.n_trials,
                            "n_censored": p.n_censored} for p in setting.points]
        if setting.fit is not None:
            boot = setting.bootstrap
            entry["fit"] = {"s_min": setting.fit.a, "b": setting.fit.b, "b_noise": setting.fit.b_noise,
                            "cbs": setting.cbs, "cbs_ci": None if setting.cbs_ci is None else list(setting.cbs_ci),
                            "cbs_empirical": setting.cbs_empirical,
                            "b_noise_ci": None if boot is None else list(boot.b_noise_ci)}
        if schedule == "wsd":  # the same points and fits as `cbs fit --es` on the exported table
            b, s = next(iter(es_points(entry["rows"]).values()), ([], []))
            entry["es_fit"] = fit_wsd_es(b, s).to_dict() if len(s) >= 3 else None
    out["comparison"] = _compare(out["schedules"])
    return out


def _compare(schedules: dict) -> list[str]:
    """One line per pair of schedules: do their B* intervals overlap?"""
    lines = []
    names = [n for n, e in schedules.items() if e["fit"] is not None and e["fit"]["cbs"] is not None]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            fa, fb = schedules[a]["fit"], schedules[b]["fit"]
            ratio = fb["cbs"] / fa["cbs"]
            if fa["cbs_ci"] is None or fb["cbs_ci"] is None:
                verdict = "no intervals"
            elif fa["cbs_ci"][1] < fb["cbs_ci"][0] or fb["cbs_ci"][1] < fa["cbs_ci"][0]:
                verdict = "the 95% intervals do not overlap: they differ beyond the intervals"
            else:
                verdict = "the 95% intervals overlap: no difference beyond the intervals"
            lines.append(f"B*({b}) / B*({a}) = {ratio:.3g}; {verdict}")
    return lines


def format_schedule(fit: dict) -> str:
    """The text of ``cbs study fit`` for a schedule study."""
    out = [f"CBS per schedule: S(B) = a + b/B on log S, B* at r = {fit['overhead']:g}, B_ref = {fit['b_ref']}; "
           "each schedule against its own target (its loss at D at B_ref)"]
    for name, e in fit["schedules"].items():
        target = "—" if e["target"] is None else f"{e['target']:.4f} nats"
        out.append(f"\n{name}: target {target}; {len(e['rows'])} runs read")
        for p in e["points"]:
            s = "—" if p["steps"] is None else f"{p['steps']:.1f}"
            out.append(f"  B = {p['batch_size']:>5}  S(B) = {s:>9}  ({p['n_trials']} runs, {p['n_censored']} censored)")
        f = e["fit"]
        if f is not None:
            ci = "" if f["cbs_ci"] is None else f" [{f['cbs_ci'][0]:.3g}, {f['cbs_ci'][1]:.3g}]"
            cbs = "—" if f["cbs"] is None else f"{f['cbs']:.3g}"
            out.append(f"  S_min = {f['s_min']:.4g} steps, B_noise = {f['b_noise']:.4g}, B* = {cbs}{ci}")
        es = e.get("es_fit")
        if es is not None:
            def fmt(x):
                return "—" if x is None else f"{x:.4g}"

            out.append(f"  E(S) classical: B_noise = {fmt(es['b_noise'])}; revised (quadratic stage, Zhou/Huang et al. "
                       f"2026): B_opt = {fmt(es['b_opt'])}, B_min = {fmt(es['b_min'])}; better: {es['better']} "
                       f"({es['reason']})")
            out.extend(f"  note: {n}" for n in es["notes"])
        out.extend(f"  note: {x}" for x in e["errors"])
    if fit["comparison"]:
        out.append("")
        out.extend(fit["comparison"])
    out.extend(f"note: {n}" for n in fit["notes"])
    return "\n".join(out)
