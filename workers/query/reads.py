"""The reads of the workers' public API (:mod:`workers.query.api` re-exports every public name).

Every read comes from the ledger (who runs what now, and the read model of ended trials:
:mod:`workers.studies.read_model`) and MLflow (the record: the study's spec, the trials in flight,
and what the read model does not hold yet); nothing here imports torch. Reads are cheap enough
for pages that refresh every few seconds: the ended trials from one ledger query, MLflow asked for
the rest, metric histories only for the curves asked for, cached once a run has ended.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from cbscore.analysis import StepsRow
from cbscore.errors import ConfigError
from cbscore.local import LocalStudyReadout
from cbscore.study import TERMINAL, CellState, StudySpec, TrialRecord
from workers.infra.parse import as_float, as_int
from workers.infra.settings import WorkerSettings

#: Columns of :func:`study_table`: the ``cbs fit`` CSV first, then what the app links and colours by.
TABLE_COLUMNS = ("setting", "batch_size", "steps", "n_params", "tokens", "context", "outcome",
                 "trial_id", "role", "lr", "beta2", "tau", "seed", "run_id", "budget_steps", "steps_projected",
                 "stopped_by")
#: The columns ``cbs fit`` reads (``cbs study export``).
FIT_COLUMNS = ("setting", "batch_size", "steps", "n_params", "tokens", "context", "outcome", "seed", "budget_steps",
               "lr", "steps_projected")


@dataclass(frozen=True, kw_only=True)
class StudySummary:
    """One study as the studies list shows it."""

    name: str
    kind: str
    created_s: float
    """Creation time, Unix seconds."""
    status: str
    """``running``, ``done`` or ``cancelled``."""
    counts: Mapping[str, int]
    """Trials by status (``queued``, ``running``, ``reached``, ...), as of the runner's last pass."""
    n_trials: int
    """Trials created so far."""
    tokens_spent: int
    """Training tokens spent by every trial so far."""
    b_ref: int | None
    """B_ref of the spec (sequences)."""
    overhead: float | None
    """r of the 20% rule."""
    experiment_id: str
    run_id: str | None
    """The parent run holding the spec."""
    errors: tuple[str, ...] = ()
    """Settings that cannot go on (no reference run finished, ...)."""
    owner: str = ""
    """Who launched it (the signed-in user, ``local`` without sign-in, ``cli:<login>`` from the CLI)."""


@dataclass(frozen=True, kw_only=True)
class WorkerInfo:
    """A live worker."""

    hostname: str
    """Celery node name (``cpu-1234@host``, ``gpu0@host``)."""
    device: str
    """``cpu`` or ``cuda:<index>``."""
    queue: str
    concurrency: int
    pid: int
    started_s: float
    heartbeat_s: float
    current_trials: tuple[str, ...] = ()
    """Trial ids it runs now."""

    @property
    def current_trial(self) -> str | None:
        return self.current_trials[0] if self.current_trials else None


@dataclass(frozen=True, kw_only=True)
class StudyWallTime:
    """When a study's trials ran, by their MLflow runs' start and end times (``None`` until one ended)."""

    seconds: float | None
    """From the first trial's start to the last trial's end."""
    first_start: str | None
    """The first trial's start, ISO 8601 in UTC to the second."""
    last_end: str | None
    """The last trial's end, ISO 8601 in UTC to the second."""


@dataclass(frozen=True, kw_only=True)
class StudyStatus:
    """``cbs study status``: cells, trials by outcome, progress and tokens."""

    name: str
    status: str
    cells: tuple[CellState, ...]
    """Every cell's progress as the planner sees it (``cbs study status --json`` writes each as
    :func:`dataclasses.asdict` does)."""
    counts: Mapping[str, int]
    n_trials: int
    """Trials the study will run (grid; for Optuna cells the planned count)."""
    tokens_spent: int
    grid_tokens: int
    """Tokens the same study would spend at fixed budgets (every trial to its budget)."""
    targets: Mapping[str, float]
    errors: tuple[str, ...] = ()
    progress: float = 0.0
    """Fraction of trials ended (trials of skipped cells count as ended)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    costs: Any = None
    """:class:`cbscore.study.costs.StudyCosts`: spent against the fixed-budget grid, the grid stopped
    at the target and the oracle."""

    @property
    def tokens_saved(self) -> int:
        """Tokens not spent thanks to stopping at the target, pruning and step caps (once done)."""
        return max(0, self.grid_tokens - self.tokens_spent)


def worker_settings() -> WorkerSettings:
    """The workers' settings from this process's environment (``CBS_*``)."""
    return WorkerSettings.from_env()


def open_tracker():
    """The tracking client of :func:`worker_settings` (MLflow through :mod:`workers.tracking`)."""
    from workers.tracking import Tracker

    s = worker_settings()
    return Tracker(s.tracking_uri, s.artifact_root)


def open_ledger():
    """The ledger of :func:`worker_settings` (leases: who runs what now)."""
    from workers.studies.ledger import Ledger

    return Ledger(worker_settings().ledger_url)


def study_parent(tracker, name: str):
    """The study's parent run; a :class:`ConfigError` naming ``name`` when there is none."""
    parent = tracker.study_run(name)
    if parent is None:
        raise ConfigError("name", name, "names no study")
    return parent


def list_studies() -> list[StudySummary]:
    """Every study, newest first, with its counts by status and tokens spent (as of the runner's
    last pass over it: at most ``CBS_WATCH_PERIOD_S`` old while a runner watches)."""
    tracker = open_tracker()
    ledger = open_ledger()
    out = []
    for exp, parent in tracker.studies():
        if parent is None:
            continue
        tags = parent.data.tags
        if "counts" in tags and "tokens_spent" in tags:  # as of the runner's last pass (seconds ago)
            counts = json.loads(tags["counts"])
            tokens_spent = int(tags["tokens_spent"])
        else:  # a study no runner has passed over: count its trials
            records = _records(tracker, ledger, exp.name, parent, with_history=False)
            counts = {}
            for r in records:
                counts[r.status] = counts.get(r.status, 0) + 1
            tokens_spent = sum(r.tokens for r in records)
        errors = tuple(json.loads(tags["errors"])) if tags.get("errors") else ()
        out.append(StudySummary(
            name=exp.name, kind=tags.get("kind", ""), created_s=exp.creation_time / 1000.0,
            status=tags.get("status", ""), counts=counts, n_trials=sum(counts.values()),
            tokens_spent=tokens_spent,
            b_ref=as_int(tags.get("b_ref")), overhead=as_float(tags.get("overhead")),
            experiment_id=exp.experiment_id, run_id=parent.info.run_id, errors=errors, owner=tags.get("owner", "")))
    return out


def _runs_and_records(tracker, ledger, name: str, parent, spec: StudySpec, *,
                      with_history: bool | None = None) -> tuple[list, Any, list[TrialRecord]]:
    """``(trial runs, their histories, records)`` of study ``name``: the runs from the read model
    and MLflow (:func:`workers.studies.read_model.study_records`), the records of the cells ``spec``
    has (cells an extension dropped are hidden)."""
    from workers.studies.read_model import study_records
    from workers.studies.records import in_spec

    runs, _, histories, records = study_records(tracker, ledger, name, parent, with_history=with_history)
    return runs, histories, in_spec(spec, records)


def _records(tracker, ledger, name: str, parent, *, with_history: bool | None = None) -> list[TrialRecord]:
    spec = StudySpec.from_dict(tracker.study_spec(parent))
    return _runs_and_records(tracker, ledger, name, parent, spec, with_history=with_history)[2]


def study_spec(name: str) -> StudySpec:
    """The spec a study was launched with."""
    tracker = open_tracker()
    return StudySpec.from_dict(tracker.study_spec(study_parent(tracker, name)))


def study_records(name: str) -> list[TrialRecord]:
    """One TrialRecord per trial of ``name``, from MLflow (eval curves of reference and running trials)."""
    tracker = open_tracker()
    return _records(tracker, open_ledger(), name, study_parent(tracker, name))


def trial_curve(run_id: str) -> dict[str, tuple[list[float], list[float]]]:
    """Metric histories of one trial run: ``{"eval/loss_ewa": (steps, values), "train/loss": ...}``."""
    return {k: (list(s), list(v)) for k, (s, v) in open_tracker().curves(run_id).items()}


def study_eval_curves(name: str) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    """Every trial's held-out loss of the averaged weights, ``{trial_id: (steps, losses)}``: the
    curves the read model keeps of ended trials, MLflow's histories of the others."""
    tracker = open_tracker()
    parent = study_parent(tracker, name)
    spec = StudySpec.from_dict(tracker.study_spec(parent))
    runs, histories, records = _runs_and_records(tracker, open_ledger(), name, parent, spec, with_history=False)
    by_id = {r.info.run_id: r for r in runs}
    return {rec.trial_id: histories.history(by_id[rec.run_id], "eval/loss_ewa") for rec in records}


def study_table(name: str) -> list[StepsRow]:
    """The steps table of ``name``: one typed row per trial with an outcome
    (:class:`cbscore.analysis.StepsRow`; ``row.to_dict()`` is its line of the ``cbs fit`` CSV,
    :data:`FIT_COLUMNS`, with trial_id, role, lr, beta2, tau, seed and run_id beside).

    A reference trial's steps are its crossing of the setting's target (the best reference run
    reaches it at its last evaluation). Trials still queued or running are left out.
    """
    from cbscore.analysis import first_crossing
    from cbscore.study.targets import setting_targets

    tracker = open_tracker()
    parent = study_parent(tracker, name)
    spec = StudySpec.from_dict(tracker.study_spec(parent))
    runs, histories, records = _runs_and_records(tracker, open_ledger(), name, parent, spec)
    runs_by_id = {r.info.run_id: r for r in runs}
    # The planner's own targets, exact (the parent's target/ tags are for people browsing MLflow).
    targets, _ = setting_targets(spec, records)
    context = as_int(parent.data.params.get("context_tokens"))
    rows = []
    for rec in records:
        if rec.status not in TERMINAL:
            continue
        run = runs_by_id[rec.run_id]
        tags, metrics = run.data.tags, run.data.metrics
        outcome, steps = rec.status, rec.steps_to_target
        if rec.role == "reference" and outcome in ("finished", "censored", "reached"):
            target = targets.get(rec.setting_id)
            if target is None:
                continue
            steps = first_crossing(rec.eval_steps, rec.eval_losses, target) if rec.eval_steps else None
            outcome = "reached" if steps is not None else "censored"
        if outcome == "reached" and not (steps is not None and math.isfinite(steps) and steps > 0):
            outcome = "censored"
        taus = {k[len("eval/loss_ewa_"):]: v for k, v in metrics.items() if k.startswith("eval/loss_ewa_")}
        # The τ that made the crossing (recorded by the trainer), else the best at the end.
        best_tau = tags.get("target_tau") or (min(taus, key=taus.get) if taus else "")
        rows.append(StepsRow(
            setting=rec.setting_id, batch_size=rec.batch_size,
            steps=steps if outcome == "reached" else None,
            n_params=as_int(tags.get("n_params")), tokens=as_int(tags.get("setting_tokens")),
            context=as_int(tags.get("context_tokens")) or context, outcome=outcome,
            trial_id=rec.trial_id, role=rec.role, lr=rec.lr,
            beta2=as_float(tags.get("beta2")), tau=as_float(best_tau), seed=rec.seed, run_id=rec.run_id,
            # A censored trial is a lower bound: S > the steps it trained without reaching the target.
            budget_steps=rec.last_step if outcome == "censored" else None,
            # Which rule pruned it (cbscore.study.plan_result.STOP_RULES); blank for other outcomes.
            stopped_by=rec.stopped_by,
        ))
    if spec.experimental.prune_at_equal_tokens:  # the only rule whose stopped trials stand in by projection
        rows = _project_pruned_rows(rows, records, runs_by_id, histories)
    return rows


def _project_pruned_rows(rows: list[StepsRow], records, runs_by_id, histories) -> list[StepsRow]:
    """``rows`` with ``steps_projected`` of the trials stopped at equal tokens (``prune_at_equal_tokens``):
    their steps to target projected from their curve against their cell's leader
    (:func:`cbscore.analysis.steps_ratio`); one history read per pruned trial (ended: cached)."""
    from cbscore.analysis import steps_ratio

    if not any(r.outcome == "pruned" for r in rows):
        return rows
    by_id = {rec.trial_id: rec for rec in records}
    leaders: dict[tuple, StepsRow] = {}
    for r in rows:
        if r.outcome == "reached" and r.role == "trial":
            key = (r.setting, r.batch_size, r.seed)
            if key not in leaders or r.steps < leaders[key].steps:
                leaders[key] = r
    out = []
    for r in rows:
        lead = leaders.get((r.setting, r.batch_size, r.seed)) if r.outcome == "pruned" else None
        if lead is not None:
            lead_rec = by_id[lead.trial_id]
            steps, losses = histories.history(runs_by_id[r.run_id], "eval/loss_ewa")
            if lead_rec.eval_steps and len(steps) >= 2:
                c = steps_ratio(steps, losses, lead_rec.eval_steps, lead_rec.eval_losses)
                if c is not None:
                    r = dataclasses.replace(r, steps_projected=c * lead.steps)
        out.append(r)
    return out


def study_status(name: str) -> StudyStatus:
    """Cells, trials by outcome, progress and tokens of ``name`` (the planner's view; no writes)."""
    from cbscore.study import ended_trials, grid_tokens, grid_trials, plan, status_counts
    from cbscore.study.costs import study_costs

    tracker = open_tracker()
    parent = study_parent(tracker, name)
    spec = StudySpec.from_dict(tracker.study_spec(parent))
    records = _records(tracker, open_ledger(), name, parent)
    s = worker_settings()
    p = plan(spec, records, time.time(), stale_after_s=s.stale_after_s, max_attempts=s.max_attempts)
    counts = status_counts(records, p)
    # Planned trials from the planner's cells: re-runs and rates added past a grid edge included.
    n_trials = sum(c.n_trials for c in p.cells) or grid_trials(spec)
    # trials beside the plan (`cbs study retry`'s {id}.retry{k}) are trials too: progress never passes 100%
    n_trials = max(n_trials, len(records))
    ended = ended_trials(counts)
    return StudyStatus(name=name, status=parent.data.tags.get("status", ""), cells=p.cells, counts=counts,
                       n_trials=n_trials, tokens_spent=sum(r.tokens for r in records), grid_tokens=grid_tokens(spec),
                       targets=dict(p.targets), errors=tuple(p.errors),
                       progress=ended / n_trials if n_trials else 0.0, costs=study_costs(spec, records))


def study_forecast(name: str, *, with_fit: bool = True, analysis=None, bootstrap: int = 1000, seed: int = 0):
    """:class:`workers.studies.forecast.StudyForecast` of ``name``: the noise-scale forecast per setting from
    its best reference run, calibrated against the study's own fit (``with_fit``; ``analysis``
    reuses one already computed)."""
    from workers.studies.forecast import study_forecast as build

    tracker = open_tracker()
    parent = study_parent(tracker, name)
    spec = StudySpec.from_dict(tracker.study_spec(parent))
    run_list, histories, records = _runs_and_records(tracker, open_ledger(), name, parent, spec)
    runs = {r.info.run_id: r for r in run_list}
    if with_fit and analysis is None:
        from cbscore.errors import FitError

        try:
            analysis = study_fit(name, bootstrap=bootstrap, seed=seed)
        except FitError:
            analysis = None  # nothing fitted yet: forecasts only

    def history(run_id: str, key: str):
        return histories.history(runs[run_id], key)

    return build(spec, records, history, analysis, bootstrap=bootstrap, seed=seed)


def study_histories(name: str) -> dict:
    """Per setting, the :class:`cbscore.analysis.EvalHistory` of every ended trial of ``name``
    (held-out loss of the averaged weights at every evaluation, from MLflow): what the bootstrap
    needs to redraw the target and recompute every crossing (DESIGN.md §1, "Intervals"). One
    history read per trial."""
    from cbscore.analysis import EvalHistory
    from cbscore.study.budgets import RERUN_TAG

    tracker = open_tracker()
    parent = study_parent(tracker, name)
    spec = StudySpec.from_dict(tracker.study_spec(parent))
    out: dict[str, list] = {}
    for rec in _runs_and_records(tracker, open_ledger(), name, parent, spec, with_history=True)[2]:
        if rec.status in TERMINAL and rec.eval_steps:
            # A reference run re-run on to the target (planner.RERUN_TAG) is measured like a trial:
            # it does not set the target.
            role = "trial" if rec.trial_id.endswith("." + RERUN_TAG) else rec.role
            out.setdefault(rec.setting_id, []).append(EvalHistory(
                batch_size=rec.batch_size, steps=rec.eval_steps, losses=rec.eval_losses, lr=rec.lr,
                seed=rec.seed, outcome=rec.status, role=role))
    return out


def study_noise_scale_rows(name: str) -> list[dict]:
    """Every ended trial's logged ``gns/g2``, ``gns/trace_sigma`` and ``gns/b_simple`` by step, one
    row each with the trial's id, setting, batch size, role, lr, outcome and tokens at the step
    (MLflow; ``cbs study report``'s ``gns.csv``)."""
    from workers.studies.records import build_records

    tracker = open_tracker()
    parent = study_parent(tracker, name)
    runs = {r.info.run_id: r for r in tracker.trial_runs(parent.info.experiment_id, parent.info.run_id)}
    context = as_int(parent.data.params.get("context_tokens")) or 0
    rows = []
    for rec in build_records(list(runs.values()), open_ledger().leases(name), tracker, with_history=False):
        run = runs.get(rec.run_id)
        if rec.status not in TERMINAL or run is None or "gns/b_simple" not in run.data.metrics:
            continue
        series = {k: dict(zip(*tracker.history(run, f"gns/{k}"))) for k in ("g2", "trace_sigma", "b_simple")}
        for step in sorted(set().union(*series.values())):
            rows.append({"trial_id": rec.trial_id, "setting": rec.setting_id, "batch_size": rec.batch_size,
                         "role": rec.role, "lr": rec.lr, "outcome": rec.status, "step": int(step),
                         "tokens": int(step) * rec.batch_size * context,
                         **{k: series[k].get(step) for k in series}})
    return rows


def study_wall_time(name: str) -> StudyWallTime:
    """Seconds from the first trial's start to the last trial's end (MLflow run times)."""
    from datetime import datetime, timezone

    tracker = open_tracker()
    parent = study_parent(tracker, name)
    runs = tracker.trial_runs(parent.info.experiment_id, parent.info.run_id)
    starts = [r.info.start_time for r in runs if r.info.start_time]
    ends = [r.info.end_time for r in runs if r.info.end_time]
    if not starts or not ends:
        return StudyWallTime(seconds=None, first_start=None, last_end=None)
    iso = lambda ms: datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    return StudyWallTime(seconds=(max(ends) - min(starts)) / 1000.0, first_start=iso(min(starts)),
                         last_end=iso(max(ends)))


def study_local_fit(name: str) -> LocalStudyReadout:
    """A ``local`` study's readout: local CBS per checkpoint by both rules, their power law over
    tokens and the warm-up (:func:`workers.studies.local_fit.local_fit`; ``.to_json_dict()`` is the
    JSON of ``cbs study fit``)."""
    from workers.studies.local_fit import local_fit

    return local_fit(name)


def study_fit(name: str, *, bootstrap: int = 1000, seed: int = 0, free_alpha: bool = False,
              redraw_target: bool = True):
    """:func:`cbscore.analysis.analyze_table` of the study's table at its own B_ref and r; with
    ``redraw_target`` (and a bootstrap) the intervals carry the target's own uncertainty, from every
    trial's stored evaluations (:func:`study_histories`)."""
    from cbscore.analysis import analyze_table
    from cbscore.errors import FitError

    spec = study_spec(name)
    rows = study_table(name)
    if not rows:
        raise FitError(f"study {name!r} has no finished trials yet, so there is nothing to fit.")
    from cbscore.study import plan, skipped_cells

    # Cells the planner never ran are named in the notes (the CSV alone cannot say so).
    skipped = skipped_cells(plan(spec, study_records(name), time.time()))
    histories = study_histories(name) if (redraw_target and bootstrap) else None
    return analyze_table(rows, b_ref=spec.b_ref, overhead=spec.overhead, free_alpha=free_alpha,
                         bootstrap=bootstrap, seed=seed, skipped=skipped or None, histories=histories)


def study_table_fit(name: str, rows: Sequence[StepsRow], *, b_ref: int, overhead: float, bootstrap: int,
                    seed: int = 0, skipped: Mapping[str, tuple[int, ...]] | None = None):
    """:func:`cbscore.analysis.analyze_table` of ``rows``, study ``name``'s steps table (as
    :func:`study_table` gave it), kept in the read model: the pages of every host read one fit per
    table and settings (:func:`workers.studies.read_model.kept_fit`) instead of bootstrapping it again."""
    from cbscore.analysis import analyze_table
    from workers.studies.read_model import fit_key, keep_fit, kept_fit

    settings = {"b_ref": b_ref, "overhead": overhead, "bootstrap": bootstrap, "seed": seed,
                "skipped": {k: list(v) for k, v in sorted((skipped or {}).items())}}
    key = fit_key([row.to_dict() for row in rows], settings)
    ledger = open_ledger()
    fit = kept_fit(ledger, name, key)
    if fit is None:
        fit = analyze_table(rows, b_ref=b_ref, overhead=overhead, bootstrap=bootstrap, seed=seed,
                            skipped=dict(skipped) if skipped else None)
        try:
            keep_fit(ledger, name, key, fit)
        except SQLAlchemyError as exc:  # the fit stands; the next visit fits and keeps it
            logging.getLogger(__name__).warning("the fit of study %s could not be kept: %s", name, exc)
    return fit


def alive_workers() -> list[WorkerInfo]:
    """Workers whose heartbeat in the ledger is fresh, with the trials they run (works with any broker)."""
    s = worker_settings()
    ledger = open_ledger()
    out = []
    for w in ledger.workers(now_s=time.time(), stale_after_s=s.stale_after_s):
        trials = tuple(sorted(lease.trial_id for lease in ledger.running_on(w.nodename)))
        out.append(WorkerInfo(hostname=w.nodename, device=w.device, queue=w.queue, concurrency=w.concurrency,
                              pid=w.pid, started_s=w.started_s, heartbeat_s=w.heartbeat_s, current_trials=trials))
    return out


_UI_CACHE: dict[str, tuple[float, str | None]] = {}


def tracking_ui_base() -> str:
    """Base URL of the MLflow UI, answering or not: the tracking server, else ``CBS_TRACKING_UI_URL``
    (default ``http://127.0.0.1:5000``)."""
    import os

    s = worker_settings()
    if s.tracking_uri.startswith(("http://", "https://")):
        return s.tracking_uri.rstrip("/")
    return (os.environ.get("CBS_TRACKING_UI_URL") or "http://127.0.0.1:5000").rstrip("/")


def tracking_ui_url() -> str | None:
    """Base URL of an MLflow UI that answers (:func:`tracking_ui_base`), else None."""
    candidate = tracking_ui_base()
    now = time.time()
    cached = _UI_CACHE.get(candidate)
    if cached is not None and now - cached[0] < 30:
        return cached[1]
    try:
        with urllib.request.urlopen(f"{candidate}/health", timeout=0.5) as resp:
            ok = resp.status == 200
    except Exception:  # not served: the page shows "no link"
        ok = False
    _UI_CACHE[candidate] = (now, candidate if ok else None)
    return candidate if ok else None


def run_url(run_id: str) -> str | None:
    """Link to one run in the MLflow UI, or None when no UI answers."""
    base = tracking_ui_url()
    if base is None or not run_id:
        return None
    run = open_tracker().get_run(run_id)
    return f"{base}/#/experiments/{run.info.experiment_id}/runs/{run_id}"

