"""The tracker: studies and trials in one MLflow tracking store."""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag, ViewType
from mlflow.exceptions import MlflowException

from cbscore.errors import ConfigError
from workers.tracking._base import (
    _MAX_TAG,
    _SPEC_TAG,
    CURVE_PREFIXES,
    EVAL_CURVE_TAG,
    RUN_STATUS,
    TERMINAL_RUN_STATUSES,
    _ms,
    client,
    flatten,
    retrying,
)
from workers.tracking._disk_cache import _curve_bytes, _disk_load, _disk_save


# ---------------------------------------------------------------------------- the tracker
class Tracker:
    """Studies and trials in one MLflow tracking store."""

    def __init__(self, tracking_uri: str, artifact_root: str | None = None):
        self.uri = tracking_uri
        self.artifact_root = artifact_root
        self.client = client(tracking_uri)

    # -------------------------------------------------------------- studies
    def experiment(self, study: str):
        """The study's experiment, or None (deleted experiments are reported as an error)."""
        exp = self.client.get_experiment_by_name(study)
        if exp is not None and exp.lifecycle_stage == "deleted":
            raise ConfigError("name", study, "names a deleted MLflow experiment; restore or purge it, or pick another name")
        return exp

    def create_study(self, study: str, *, spec_dict: Mapping[str, Any], spec_yaml: str,
                     params: Mapping[str, Any], tags: Mapping[str, str]) -> tuple[str, str]:
        """Experiment + parent run holding the spec; returns ``(experiment_id, parent_run_id)``."""
        location = None if self.artifact_root is None else f"{self.artifact_root.rstrip('/')}/{study}"
        # mlflow.experimentKind: MLflow 3's UI opens the experiment on its training runs, not the GenAI overview
        exp_id = self.client.create_experiment(study, artifact_location=location,
                                               tags={"cbs.study": "1", "cbs.kind": str(spec_dict.get("kind", "")),
                                                     "mlflow.experimentKind": "custom_model_development"})
        spec_json = json.dumps(dict(spec_dict), sort_keys=True)
        run_tags = {"role": "study", "study": study, "status": "running", **tags,
                    "mlflow.runName": study}
        if len(spec_json) <= _MAX_TAG:
            run_tags[_SPEC_TAG] = spec_json
        run = self.client.create_run(exp_id, tags=run_tags, run_name=study)
        run_id = run.info.run_id
        self.client.log_batch(run_id, params=[Param(k, v) for k, v in flatten(params).items()])
        self.client.log_text(run_id, spec_yaml, "spec.yaml")
        self.client.set_experiment_tag(exp_id, "cbs.parent_run_id", run_id)
        return exp_id, run_id

    def study_run(self, study: str):
        """The study's parent run, or None."""
        exp = self.experiment(study)
        if exp is None:
            return None
        run_id = exp.tags.get("cbs.parent_run_id")
        if run_id:
            return self.client.get_run(run_id)
        runs = self.client.search_runs([exp.experiment_id], "tags.role = 'study'", max_results=1)
        return runs[0] if runs else None

    def study_spec(self, parent_run) -> dict:
        """The spec dict stored with a study's parent run."""
        text = parent_run.data.tags.get(_SPEC_TAG)
        if text:
            return json.loads(text)
        path = self.client.download_artifacts(parent_run.info.run_id, "spec.yaml")
        import yaml

        return yaml.safe_load(Path(path).read_text())

    def studies(self) -> list:
        """``[(experiment, parent run or None)]`` of every CBS study, newest first."""
        out, token = [], None
        while True:
            page = self.client.search_experiments(filter_string="tags.`cbs.study` = '1'", max_results=1000,
                                                  order_by=["creation_time DESC"], page_token=token)
            out.extend(page)
            token = page.token
            if not token:
                break
        runs = []
        for exp in out:
            run_id = exp.tags.get("cbs.parent_run_id")
            try:
                runs.append((exp, self.client.get_run(run_id) if run_id else None))
            except MlflowException:
                runs.append((exp, None))
        return runs

    def update_study_spec(self, parent_run, *, spec_dict: Mapping[str, Any], spec_yaml: str, author: str,
                          changes: list[str], now_s: float) -> int:
        """Store a new version of a study's spec (``cbs study extend``); returns its number.

        The parent run's spec tag and ``spec.yaml`` become the new version; every version is kept as
        ``spec-history/v{n}.yaml`` with its time, author and changes, and listed in the ``spec_history``
        tag (newest last; the oldest entries drop out past MLflow's tag length, the files stay)."""
        run_id = parent_run.info.run_id
        tags = parent_run.data.tags
        version = int(tags.get("spec_version") or 1)
        history = json.loads(tags.get("spec_history") or "[]")
        if version == 1 and not history:  # the launch's version, kept before the first extension
            history.append({"version": 1, "time_s": parent_run.info.start_time / 1000.0,
                            "author": tags.get("owner", ""), "changes": ["launched"]})
            import yaml

            self.client.log_text(run_id, yaml.safe_dump(self.study_spec(parent_run), sort_keys=False),
                                 "spec-history/v1.yaml")
        version += 1
        entry = {"version": version, "time_s": round(now_s, 3), "author": author, "changes": list(changes)}
        history.append(entry)
        header = "".join(f"# {line}\n" for line in [f"version {version}, by {author or 'unknown'} at {now_s:.0f} "
                                                     "(Unix time)", *changes])
        self.client.log_text(run_id, header + spec_yaml, f"spec-history/v{version}.yaml")
        self.client.log_text(run_id, spec_yaml, "spec.yaml")
        spec_json = json.dumps(dict(spec_dict), sort_keys=True)
        listed = json.dumps(history)
        while len(listed) > _MAX_TAG and len(history) > 1:
            history.pop(0)
            listed = json.dumps(history)
        new_tags = {"spec_version": str(version), "spec_history": listed}
        if len(spec_json) <= _MAX_TAG:
            new_tags[_SPEC_TAG] = spec_json
        elif _SPEC_TAG in tags:  # too long for a tag: spec.yaml holds it, and a stale tag must not win
            self.client.delete_tag(run_id, _SPEC_TAG)
        self.set_tags(run_id, new_tags)
        return version

    def reopen_study(self, parent_run_id: str) -> None:
        """A done study that was extended runs again: status ``running``, the parent run RUNNING."""
        self.client.set_tag(parent_run_id, "status", "running")
        self.client.update_run(parent_run_id, status="RUNNING")

    def set_study_status(self, parent_run_id: str, status: str, *, end: str | None = None) -> None:
        """Tag the study ``status`` (``running``, ``done``, ``cancelled``); end the parent run if asked."""
        self.client.set_tag(parent_run_id, "status", status)
        if end is not None:
            self.client.set_terminated(parent_run_id, status=end)

    # -------------------------------------------------------------- trials
    def create_trial(self, experiment_id: str, parent_run_id: str, *, trial_id: str, tags: Mapping[str, str],
                     params: Mapping[str, Any]) -> str:
        """A child run for one trial, ``SCHEDULED``; returns its run id."""
        run = self.client.create_run(experiment_id, run_name=trial_id, tags={
            "mlflow.parentRunId": parent_run_id, "trial_id": trial_id, "status": "queued", "attempt": "1", **tags})
        run_id = run.info.run_id
        flat = list(flatten(params).items())
        for i in range(0, len(flat), 100):
            self.client.log_batch(run_id, params=[Param(k, v) for k, v in flat[i:i + 100]])
        self.client.update_run(run_id, status="SCHEDULED")
        return run_id

    def find_trial(self, experiment_id: str, trial_id: str):
        """The run of ``trial_id`` (None if none was created)."""
        runs = self.client.search_runs([experiment_id], f"tags.trial_id = '{trial_id}'", max_results=2)
        return runs[0] if runs else None

    def runs(self, experiment_id: str, flt: str = "", *, deleted_too: bool = False) -> list:
        """Every run of an experiment that matches ``flt`` (an MLflow filter), page by page; with
        ``deleted_too`` the soft-deleted runs as well."""
        view = ViewType.ALL if deleted_too else ViewType.ACTIVE_ONLY
        out, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], flt, run_view_type=view, max_results=1000,
                                           page_token=token)
            out.extend(page)
            token = page.token
            if not token:
                return out

    def experiments_tagged(self, tag: str, value: str, *, deleted: bool = False, max_results: int = 1000) -> list:
        """The active (or, with ``deleted``, the soft-deleted) experiments whose tag ``tag`` is ``value``."""
        return self.client.search_experiments(view_type=ViewType.DELETED_ONLY if deleted else ViewType.ACTIVE_ONLY,
                                              max_results=max_results, filter_string=f"tags.`{tag}` = '{value}'")

    #: Ended trial runs per (store, parent run), and when they were last fetched (Unix ms).
    _ENDED: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
    _ENDED_LOCK = threading.Lock()
    #: A run that ended up to this long before the last fetch is fetched again (clock skew).
    ENDED_SLACK_MS = 30_000

    def trial_runs(self, experiment_id: str, parent_run_id: str) -> list:
        """Every trial run of a study. The first call reads them all; later calls read only the
        runs still scheduled or running and those ended since (an ended run never changes), so a
        page refresh costs what is active, not the whole study. The ended runs are also kept on
        disk (:meth:`_load_ended`), so a new process (the web app after a restart) starts from
        them too."""
        base = f"tags.`mlflow.parentRunId` = '{parent_run_id}'"
        key = (self.uri, parent_run_id)
        now_ms = _ms()
        with Tracker._ENDED_LOCK:
            if key not in Tracker._ENDED:
                loaded = self._load_ended(parent_run_id)
                if loaded is not None:
                    Tracker._ENDED[key] = loaded
            ended, since_ms = Tracker._ENDED.get(key, ({}, None))
            ended = dict(ended)
        n_before = len(ended)
        if since_ms is None:
            fresh = self.runs(experiment_id, base)
        else:
            fresh = (self.runs(experiment_id, f"{base} and attributes.status = 'RUNNING'")
                     + self.runs(experiment_id, f"{base} and attributes.status = 'SCHEDULED'")
                     + self.runs(experiment_id, f"{base} and attributes.end_time >= {since_ms - self.ENDED_SLACK_MS}"))
        active = {}
        for run in fresh:
            if run.info.status in TERMINAL_RUN_STATUSES:
                ended[run.info.run_id] = run
            else:
                active[run.info.run_id] = run
        for run_id in active:
            ended.pop(run_id, None)
        with Tracker._ENDED_LOCK:
            Tracker._ENDED[key] = (ended, now_ms)
        if since_ms is None or len(ended) != n_before:  # new ended runs (the rest is refetched anyway)
            self._save_ended(parent_run_id, ended, now_ms)
        return list(ended.values()) + list(active.values())

    def _cache_path(self, kind: str, name: str) -> Path:
        """``$CBS_HOME/cache/<kind>/<store>-<name>.pickle`` (one namespace per tracking store)."""
        import hashlib

        from cbscore import paths

        folder = paths.subdir("cache") / kind
        folder.mkdir(exist_ok=True)
        return folder / f"{hashlib.sha1(self.uri.encode()).hexdigest()[:12]}-{name}.pickle"

    def _load_ended(self, parent_run_id: str) -> tuple[dict[str, Any], int] | None:
        """The ended runs of a study as this host last read them, and when (or ``None``)."""
        saved = _disk_load(self._cache_path("mlflow-runs", parent_run_id))
        return None if saved is None else (dict(saved["runs"]), int(saved["since_ms"]))

    def _save_ended(self, parent_run_id: str, ended: Mapping[str, Any], since_ms: int) -> None:
        _disk_save(self._cache_path("mlflow-runs", parent_run_id), {"since_ms": since_ms, "runs": dict(ended)})

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        """Set several tags of a run in one call."""
        self.client.log_batch(run_id, tags=[RunTag(k, "" if v is None else str(v)) for k, v in tags.items()])

    def log_text(self, run_id: str, text: str, path: str) -> None:
        self.client.log_text(run_id, text, path)

    def get_run(self, run_id: str):
        return self.client.get_run(run_id)

    def set_trial_status(self, run_id: str, status: str, **tags: Any) -> None:
        """Tag the trial's ``status`` (and more tags) and move the MLflow run status to match."""
        all_tags = {"status": status, **{k: "" if v is None else str(v) for k, v in tags.items()}}
        run_status = RUN_STATUS[status]

        def write() -> None:  # idempotent, so a retry after a write that landed is harmless
            self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in all_tags.items()])
            if run_status in TERMINAL_RUN_STATUSES:
                self.client.set_terminated(run_id, status=run_status)
            else:
                self.client.update_run(run_id, status=run_status)

        retrying(write, what=f"setting the status of run {run_id}")

    def end_trial(self, run_id: str, outcome: str, **tags: Any) -> None:
        """End a trial run with ``outcome`` (tags ``status`` and ``outcome``; FINISHED/KILLED/FAILED)."""
        self.set_trial_status(run_id, outcome, outcome=outcome, **tags)

    #: Metrics per ``log_batch`` call (MLflow's limit).
    METRICS_PER_BATCH = 1000

    def log_metrics(self, run_id: str, metrics: Iterable[Metric], *, fence: Callable[[], None] | None = None,
                    attempts: int | None = None) -> None:
        """Log ``metrics`` in batches of 1000, each retried on a transient error (:func:`retrying`,
        up to ``attempts`` tries). A batch logged twice (a retry after a write that did land) is
        harmless: the history keeps the latest value per step. ``fence`` is called right before each
        batch and raises to stop the writes (a trial that lost its lease: ``MlflowCallback``)."""
        batch = list(metrics)
        n = self.METRICS_PER_BATCH
        for i in range(0, len(batch), n):
            chunk = batch[i:i + n]
            if fence is not None:
                fence()
            retrying(lambda: self.client.log_batch(run_id, metrics=chunk), what=f"logging metrics of run {run_id}",
                     attempts=attempts)

    # -------------------------------------------------------------- histories (cached when ended)
    _HISTORY: OrderedDict[tuple[str, str, str], tuple[tuple[float, ...], tuple[float, ...]]] = OrderedDict()
    #: Bytes the in-memory history cache may hold (``CBS_HISTORY_CACHE_MB``, default 256): a curve
    #: of n points costs about 64·n bytes (two tuples of float objects), so the cap is in bytes,
    #: not entries (20,000 curves of 100k points would be 128 GB).
    _HISTORY_MAX_BYTES = int(float(os.environ.get("CBS_HISTORY_CACHE_MB") or 256) * 2**20)
    _HISTORY_BYTES = 0

    @staticmethod
    def _remember(cache_key, curve) -> None:
        """Keep ``curve`` in the in-memory cache, dropping the least recently used beyond the cap."""
        if cache_key in Tracker._HISTORY:
            Tracker._HISTORY_BYTES -= _curve_bytes(Tracker._HISTORY.pop(cache_key))
        Tracker._HISTORY[cache_key] = curve
        Tracker._HISTORY_BYTES += _curve_bytes(curve)
        while Tracker._HISTORY_BYTES > Tracker._HISTORY_MAX_BYTES and len(Tracker._HISTORY) > 1:
            _, old = Tracker._HISTORY.popitem(last=False)
            Tracker._HISTORY_BYTES -= _curve_bytes(old)

    def history(self, run, key: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """``(steps, values)`` of one metric, one value per step (the latest write wins: a resumed
        attempt may log a step again). Cached for ended runs."""
        run_id = run.info.run_id
        ended = run.info.status in TERMINAL_RUN_STATUSES
        cache_key = (self.uri, run_id, key)
        if ended and cache_key in Tracker._HISTORY:
            Tracker._HISTORY.move_to_end(cache_key)
            return Tracker._HISTORY[cache_key]
        if ended and key == "eval/loss_ewa" and run.data.tags.get(EVAL_CURVE_TAG):
            # the whole curve came with the run (its result's tag): no history call
            steps_i, values_l = json.loads(run.data.tags[EVAL_CURVE_TAG])
            curve = (tuple(float(x) for x in steps_i), tuple(float(v) for v in values_l))
            Tracker._remember(cache_key, curve)
            return curve
        on_disk: dict = {}
        if ended:  # read by an earlier process on this host?
            on_disk = (_disk_load(self._cache_path("mlflow-history", run_id)) or {}).get("curves", {})
            if key in on_disk:
                Tracker._remember(cache_key, on_disk[key])
                return on_disk[key]
        points: dict[int, tuple[int, float]] = {}
        for m in self.client.get_metric_history(run_id, key):
            if m.step not in points or m.timestamp >= points[m.step][0]:
                points[m.step] = (m.timestamp, m.value)
        steps = tuple(float(s) for s in sorted(points))
        values = tuple(points[int(s)][1] for s in steps)
        if ended:
            Tracker._remember(cache_key, (steps, values))
            _disk_save(self._cache_path("mlflow-history", run_id), {"curves": {**on_disk, key: (steps, values)}})
        return steps, values

    def curves(self, run_id: str) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
        """Every curve metric of a run: ``{key: (steps, values)}``."""
        run = self.client.get_run(run_id)
        keys = sorted(k for k in run.data.metrics if k.startswith(CURVE_PREFIXES))
        return {k: self.history(run, k) for k in keys}
