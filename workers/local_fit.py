"""The readout of a ``local`` study from MLflow: ``cbs study fit NAME --json`` for ``kind: local``.

Per checkpoint, both rules of :mod:`cbscore.local` over the branches that ended ``finished``:

* Merrill et al. 2025 (arXiv 2505.23971, §3): the *smoothed training loss after Δ* (the mean of
  the last ``smooth_fraction`` of a branch's logged ``train/loss``, :func:`cbscore.local.window_end_loss`),
  one ``ε`` (``local.epsilon``) for every pair;
* the lab's noise-aware rule: the held-out EWA loss at the window's end
  (``summary/final_eval_loss``), each pair's tolerance ``max(ε, z·SE)`` with the standard error
  from the seeds (paired by base run) or, with one seed, from each branch's own window spread.

Then the power law of the local CBS over tokens for each rule (:func:`cbscore.local.fit_local_cbs_curve`)
and the batch-size warm-up it recommends, with the steps it saves (:func:`cbscore.local.plan_warmup`).
Everything is recomputed from MLflow alone; where the data cannot support a number the JSON says
why (``notes``) and holds ``null``.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

from cbscore.errors import CbsError
from cbscore.study import StudySpec, TrialRecord
from cbscore.study.local_plan import branch_trial_id, study_checkpoints

RULES = ("merrill", "noise_aware")


def local_readout(spec: StudySpec, records: Sequence[TrialRecord],
                  train_losses: Callable[[TrialRecord], Sequence[float]],
                  b_simple: Mapping[int, tuple[Sequence[float], Sequence[float]]] | None = None) -> dict:
    """The fit JSON of a local study; ``train_losses(record)`` gives a branch's logged training
    losses in step order (from MLflow in :func:`local_fit`, from anything in a test), and
    ``b_simple`` each seed's base-run noise scale ``(tokens, B_simple)`` where its probe ran
    (McCandlish et al. 2018, :mod:`cbscore.gns`; drawn beside the local CBS). Pure."""
    from cbscore.local import (fit_local_cbs_curve, merrill_local_cbs, noise_aware_local_cbs, plan_warmup,
                               window_end_loss)

    local = spec.local
    by_id = {r.trial_id: r for r in records}
    out_checkpoints, notes = [], []
    for c in study_checkpoints(spec):
        entry: dict = {"tokens": c.tokens, "window_tokens": c.window_tokens, "multipliers": [], "seeds": list(spec.seeds),
                       "train_loss": [], "train_loss_se": [], "eval_loss": [], "merrill": None, "noise_aware": None,
                       "notes": []}
        for k in c.multipliers:
            recs = [by_id.get(branch_trial_id(spec, c.tokens, k, s)) for s in spec.seeds]
            if any(r is None or not r.terminal for r in recs):
                entry["notes"].append(f"k = {k:g}: not every seed's branch has ended")
                continue
            if any(r.status != "finished" for r in recs):
                # A diverged (or failed) k bounds the local CBS below it: stop the grid there.
                entry["notes"].append(f"k = {k:g}: " + ", ".join(sorted({r.status for r in recs}))
                                      + "; larger k are not read")
                break
            windows = [window_end_loss(train_losses(r), fraction=local.smooth_fraction) for r in recs]
            evals = [r.final_eval_loss for r in recs]
            if any(e is None or not math.isfinite(e) for e in evals):
                entry["notes"].append(f"k = {k:g}: no held-out loss at the window's end")
                break
            entry["multipliers"].append(k)
            entry["train_loss"].append([w.mean for w in windows])
            entry["train_loss_se"].append([w.standard_error for w in windows])
            entry["eval_loss"].append([float(e) for e in evals])
        if len(entry["multipliers"]) >= 2:
            ks, b0 = entry["multipliers"], local.base_batch_size
            entry["merrill"] = merrill_local_cbs(ks, entry["train_loss"], base_batch_size=b0,
                                                 epsilon=local.epsilon).to_dict()
            if len(spec.seeds) >= 2:
                noise = noise_aware_local_cbs(ks, entry["eval_loss"], base_batch_size=b0, epsilon_floor=local.epsilon,
                                              z=local.z)
            else:  # one seed: each branch's own spread over its window's end (0 where one value was logged)
                se = [0.0 if not math.isfinite(row[0]) else row[0] for row in entry["train_loss_se"]]
                noise = noise_aware_local_cbs(ks, entry["eval_loss"], base_batch_size=b0, epsilon_floor=local.epsilon,
                                              z=local.z, standard_errors=se)
            entry["noise_aware"] = noise.to_dict()
        else:
            entry["notes"].append("fewer than two multipliers ended: no local CBS at this checkpoint")
        entry["train_loss_se"] = [[None if not math.isfinite(x) else x for x in row] for row in entry["train_loss_se"]]
        out_checkpoints.append(entry)

    curves: dict = {}
    warmups: dict = {}
    for rule in RULES:
        read = [(e["tokens"], e[rule]) for e in out_checkpoints if e[rule] is not None]
        curves[rule] = warmups[rule] = None
        if len(read) < 2:
            notes.append(f"{rule}: a power law over tokens needs a local CBS at two checkpoints or more "
                         f"(got {len(read)})")
            continue
        try:
            curve = fit_local_cbs_curve([t for t, _ in read], [r["local_cbs"] for _, r in read],
                                        lower_bounds=[r["lower_bound"] for _, r in read])
        except CbsError as exc:
            notes.append(f"{rule}: {exc}")
            continue
        curves[rule] = {"coef": curve.coef, "exponent": curve.exponent,
                        "coef_ci": None if curve.coef_ci is None else list(curve.coef_ci),
                        "exponent_ci": None if curve.exponent_ci is None else list(curve.exponent_ci),
                        "tokens": list(curve.tokens), "local_cbs": list(curve.local_cbs), "r2": curve.r2,
                        "level": curve.level, "notes": list(curve.notes)}
        top = int(max(local.all_multipliers()) * local.base_batch_size)
        plan = plan_warmup(curve, base_batch_size=local.base_batch_size, context_tokens=spec.context_tokens,
                           total_tokens=spec.tokens[0], max_batch_size=top,
                           lr_rule=local.lr_rule)
        warmups[rule] = {"batch_schedule": [list(e) for e in plan.batch_schedule], "steps": plan.steps,
                         "constant_steps": plan.constant_steps, "large_batch_steps": plan.large_batch_steps,
                         "steps_saved": plan.steps_saved, "fraction_saved": plan.fraction_saved,
                         "final_batch_size": plan.final_batch_size, "max_batch_size": top, "notes": list(plan.notes)}
    return {"study": spec.name, "kind": "local", "model": spec.models[0], "total_tokens": spec.tokens[0],
            "context_tokens": spec.context_tokens, "base_batch_size": local.base_batch_size, "base_lr": local.base_lr,
            "lr_rule": local.lr_rule, "epsilon": local.epsilon, "z": local.z, "checkpoints": out_checkpoints,
            "curve": curves, "warmup": warmups, "notes": notes,
            "base_b_simple": [{"seed": seed, "tokens": [float(t) for t in tokens], "b_simple": [float(v) for v in values]}
                              for seed, (tokens, values) in sorted((b_simple or {}).items()) if len(tokens)]}


def local_fit(name: str) -> dict:
    """:func:`local_readout` of study ``name`` from MLflow and the ledger (as ``workers.api`` reads a
    study; :func:`workers.api.study_local_fit` is this, for the pages)."""
    from cbscore.errors import ConfigError
    from workers.ledger import Ledger
    from workers.records import build_records, in_spec
    from workers.settings import WorkerSettings
    from workers.tracking import Tracker

    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri, s.artifact_root)
    parent = tracker.study_run(name)
    if parent is None:
        raise ConfigError("name", name, "names no study")
    spec = StudySpec.from_dict(tracker.study_spec(parent))
    if spec.kind != "local":
        raise ConfigError("name", name, f"names a {spec.kind} study, not a local one")
    runs = tracker.trial_runs(parent.info.experiment_id, parent.info.run_id)
    records = in_spec(spec, build_records(runs, Ledger(s.ledger_url).leases(name), tracker))
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


def format_local(fit: dict) -> str:
    """The text of ``cbs study fit`` for a local study."""
    lines = [f"local CBS of {fit['study']} ({fit['model']}, B0 = {fit['base_batch_size']}, T = {fit['context_tokens']}, "
             f"ε = {fit['epsilon']:g} nats; Merrill et al. 2025):"]
    for c in fit["checkpoints"]:
        cells = []
        for rule in RULES:
            r = c[rule]
            cells.append(f"{rule} —" if r is None else
                         f"{rule} {r['local_cbs']:g}{'+' if r['lower_bound'] else ''}"
                         + (" (ε decides)" if r["tolerance_decides"] else ""))
        lines.append(f"  t = {c['tokens']:>12,}  Δ = {c['window_tokens']:>10,}  " + "  ".join(cells))
    for rule in RULES:
        curve, warm = fit["curve"][rule], fit["warmup"][rule]
        if curve is not None:
            lines.append(f"{rule}: B*(t) = {curve['coef']:.4g}·t^{curve['exponent']:.3g} (R² {curve['r2']:.3f}); "
                         f"warm-up {warm['steps']:,} vs {warm['constant_steps']:,} steps "
                         f"({100 * warm['fraction_saved']:.1f}% fewer), switches {warm['batch_schedule']}")
    lines += [f"note: {n}" for n in fit["notes"]]
    return "\n".join(lines)
