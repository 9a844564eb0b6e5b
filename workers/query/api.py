"""The workers' public API for the app and the CLI (docs/ARCHITECTURE.md, "Workers public API").

The writes (launch, extend, retry, cancel, delete, one runner pass) live here; the reads (studies,
their records, tables, status, fits, forecasts, workers, links) in :mod:`workers.query.reads`, and
every public name of both is reachable as ``api.NAME``. Bad input raises
:class:`~cbscore.errors.ConfigError` naming the field and the value, with nothing written.

This is the app's one door into the workers (``tests/test_layers.py`` checks that the app imports
no other workers module): the few constants, exceptions and helpers the pages and ``cbs study
report`` need are re-exported here. Those whose module brings MLflow or the trial loop
(:class:`StudyInFlight`) are imported on first use, so importing the
door stays as light as its reads.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cbscore.analysis import StepsRow
from cbscore.errors import ConfigError
from cbscore.local import LocalCheckpoint, LocalStudyReadout  # re-exported: what study_local_fit returns
from cbscore.study import StudySpec, load_preset
from cbscore.study.decay_readout import ScheduleFit, ScheduleReadout  # re-exported: what study_schedule_fit returns
from workers.infra.atomic_files import new_folder_beside, replace_folder  # re-exported: `cbs study report`
from workers.infra.settings import default_concurrency  # re-exported: `cbs up`'s trials at once
from workers.query.reads import (  # re-exported: the pages and the CLI read them as api.NAME
    FIT_COLUMNS,
    TABLE_COLUMNS,
    StudyStatus,
    StudySummary,
    StudyWallTime,
    WorkerInfo,
    alive_workers,
    list_studies,
    open_ledger,
    open_tracker,
    run_url,
    study_eval_curves,
    study_fit,
    study_forecast,
    study_histories,
    study_local_fit,
    study_noise_scale_rows,
    study_parent,
    study_records,
    study_spec,
    study_status,
    study_table,
    study_table_fit,
    study_wall_time,
    tracking_ui_base,
    tracking_ui_url,
    trial_curve,
    worker_settings,
)
from workers.studies.local_warmup import warmup_blocker  # re-exported: the Local CBS page's launch button
from workers.studies.stores import NO_STORE_PREFIX, OUT_OF_ROOM_PREFIX  # re-exported: the Studies page's notices

if TYPE_CHECKING:  # imported on first use by __getattr__ below (they bring MLflow, the trial loop)
    from workers.studies.delete import StudyInFlight

__all__ = [
    "FIT_COLUMNS",
    "NO_STORE_PREFIX",
    "OUT_OF_ROOM_PREFIX",
    "LocalCheckpoint",
    "LocalStudyReadout",
    "ScheduleFit",
    "ScheduleReadout",
    "StudyStatus",
    "StudyInFlight",
    "StudySummary",
    "StudyWallTime",
    "TABLE_COLUMNS",
    "WorkerInfo",
    "advance_study",
    "alive_workers",
    "apply_forecast_from",
    "cancel_study",
    "cancel_trial",
    "default_concurrency",
    "delete_study",
    "deletion_preview",
    "extend_study",
    "launch_local_warmup",
    "launch_study",
    "list_studies",
    "load_service_password",
    "new_folder_beside",
    "open_ledger",
    "open_tracker",
    "replace_folder",
    "resolve_spec",
    "retry_study",
    "set_study_owner",
    "run_url",
    "study_fit",
    "study_eval_curves",
    "study_forecast",
    "study_histories",
    "study_local_fit",
    "study_noise_scale_rows",
    "study_owner",
    "study_parent",
    "study_records",
    "study_schedule_fit",
    "study_schedule_table",
    "study_spec",
    "study_status",
    "study_table",
    "study_table_fit",
    "study_wall_time",
    "tracking_ui_base",
    "tracking_ui_url",
    "trial_curve",
    "warm_up",
    "warmup_blocker",
    "worker_settings",
]


def __getattr__(name: str) -> Any:
    """The door's names whose modules are heavy, imported when first asked for (PEP 562)."""
    if name == "StudyInFlight":  # the refusal of delete_study (its module brings MLflow)
        from workers.studies import delete

        return delete.StudyInFlight
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve_spec(spec: StudySpec | Mapping | str) -> StudySpec:
    """A StudySpec from a spec, a dict, YAML text, a ``.yaml`` path or a preset name: the command
    line's reading of its SPEC argument (a path is read here; :func:`launch_study` never reads one)."""
    if isinstance(spec, str) and "\n" not in spec and spec.endswith((".yaml", ".yml", ".json")):
        return StudySpec.from_yaml(Path(spec))  # a file named on the command line
    return _spec_of(spec)


def _spec_of(spec: StudySpec | Mapping | str) -> StudySpec:
    """A StudySpec from a spec, a dict, a preset name or YAML text; a string is never a path."""
    if isinstance(spec, StudySpec):
        return spec
    if isinstance(spec, Mapping):
        return StudySpec.from_dict(spec)
    if isinstance(spec, str):
        from cbscore.study import PRESET_NAMES

        return load_preset(spec) if spec in PRESET_NAMES else StudySpec.from_yaml(spec)
    raise ConfigError("spec", spec, "must be a StudySpec, a mapping, YAML text, a .yaml path or a preset name")


def launch_study(spec: StudySpec | Mapping | str, *, force: bool = False, owner: str = "") -> str:
    """Validate ``spec`` (a spec, a mapping, a preset name or YAML text, never a path), create the
    study's experiment and parent run, enqueue its first trials.

    Returns the study name. Bad input raises :class:`ConfigError` (field and value) with nothing
    created or enqueued; a study that exists with the same spec is resumed. ``owner`` is recorded
    as the study's ``owner`` tag (the app checks who may cancel against it).
    """
    from workers.studies.runner import Runner

    spec, _ = apply_forecast_from(_spec_of(spec))
    return Runner().launch(spec, force=force, owner=owner)


def warm_up() -> None:
    """Import what a launch needs (the runner with MLflow, Optuna and SQLAlchemy, Celery, the launch
    checks' data and trainer configs) and open the tracking store and the ledger, whose clients are
    kept per process. A long-lived process (the web app) calls it once as it starts, so that its
    first launch, or that launch's refusal, takes milliseconds instead of seconds of imports."""
    from cbscore.data import store  # noqa: F401  (the launch checks' store location and content)
    from cbscore.train import config  # noqa: F401  (the launch checks build each cell's TrainConfig)
    from workers.infra import broker  # noqa: F401  (Celery: where the launch sends the first trials)
    from workers.studies.runner import Runner

    Runner()


def study_owner(name: str) -> str:
    """Who launched ``name`` (its ``owner`` tag; ``""`` for a study launched before owners were kept)."""
    return study_parent(open_tracker(), name).data.tags.get("owner", "")


def set_study_owner(name: str, owner: str) -> str:
    """Give ``name`` the owner ``owner`` (its ``owner`` tag); returns the owner it had. The
    operator's migration (``cbs study owner NAME IDENTITY``) of a study owned under the old form
    ``oidc:<subject>``, which no sign-in matches: ``owner`` is a user as the web app
    names one, a verified e-mail or ``oidc:<issuer>#<subject>``, never the old form."""
    owner = owner.strip()
    if not owner or any(c.isspace() or c == "," for c in owner) or (owner.startswith("oidc:") and "#" not in owner):
        raise ConfigError("owner", owner, "must be a user as the web app names one: a verified e-mail, or "
                                          "oidc:<issuer>#<subject> as the sidebar's 'Signed in as' shows it")
    tracker = open_tracker()
    parent = study_parent(tracker, name)
    tracker.set_tags(parent.info.run_id, {"owner": owner})
    return parent.data.tags.get("owner", "")


def apply_forecast_from(spec: StudySpec):
    """``(spec, ForecastRange | None)``: with ``forecast_from: OTHER``, the spec's batch sizes
    chosen around OTHER's calibrated noise-scale forecast (:mod:`workers.studies.forecast`); an unknown
    or uncalibrated OTHER is a :class:`ConfigError` naming the field and the value."""
    if spec.forecast_from is None:
        return spec, None
    from workers.studies.forecast import forecast_spec

    tracker = open_tracker()
    if tracker.study_run(spec.forecast_from) is None:
        raise ConfigError("forecast_from", spec.forecast_from, "names no study in the tracking store")
    from cbscore.errors import FitError

    try:
        source = study_forecast(spec.forecast_from, with_fit=True)
    except FitError as exc:
        raise ConfigError("forecast_from", spec.forecast_from, f"cannot be fitted yet ({exc})") from None
    return forecast_spec(spec, source)


def extend_study(name: str, patch: Mapping | str, *, author: str = "", force: bool = False) -> tuple[StudySpec, list[str]]:
    """Grow study ``name`` by ``patch`` (a mapping or YAML text; the rules are
    :mod:`cbscore.study.extend`): only new cells and trials run; returns the new spec and the
    changes in words. Bad input raises ``ConfigError`` naming the field, with nothing changed.

    A string is always the patch's text, never a path: the web app passes what a user typed here,
    and a file is read only by the command line (``cbs study extend NAME PATCH.yaml``)."""
    from workers.studies.runner import Runner

    if isinstance(patch, str):
        from cbscore.study.safe_yaml import load_yaml

        patch = load_yaml(patch, field="patch")
    return Runner().extend(name, patch, author=author, force=force)


def launch_local_warmup(name: str, *, rule: str = "merrill", author: str = "", force: bool = False):
    """Train local study ``name``'s fitted warm-up beside its small- and large-batch controls
    (:func:`workers.studies.local_warmup.launch_warmup`); returns ``(new spec, changes)``."""
    from workers.studies.local_warmup import launch_warmup

    return launch_warmup(name, rule=rule, author=author, force=force)


def retry_study(name: str, *, failed: bool = True, censored: bool = False, budget_factor: float = 2.0,
                author: str = "") -> list[str]:
    """Run ``name``'s failed trials again, and its censored cells at ``budget_factor``× their cap
    (:meth:`workers.studies.runner.Runner.retry`); returns the new trial ids."""
    from workers.studies.runner import Runner

    return Runner().retry(name, failed=failed, censored=censored, budget_factor=budget_factor, author=author)


def cancel_study(name: str) -> int:
    """Cancel every unfinished trial of ``name`` and end the study; returns how many were stopped."""
    from workers.studies.runner import Runner

    return Runner().cancel_study(name)


def cancel_trial(trial_id: str) -> str:
    """Stop one trial (``stopped`` if it was queued; ``stopping`` if running: it stops within a heartbeat)."""
    from workers.studies.runner import Runner

    return Runner().cancel_trial(trial_id)


def delete_study(name: str, *, force: bool = False, wait_s: float | None = None):
    """Delete study ``name`` as a whole: its MLflow runs (soft-deleted), ledger rows, Optuna
    studies, checkpoints and kept artifacts; refused while trials are queued or running unless
    ``force`` (which cancels it and waits for them to stop). Re-running finishes a half-done
    delete; studies that reused its trials keep their copies. :func:`workers.studies.delete.delete_study`
    (who may is the caller's check); returns its :class:`~workers.studies.delete.DeletionReport`."""
    from workers.studies.delete import delete_study as delete

    return delete(name, force=force, wait_s=wait_s)


def deletion_preview(name: str):
    """What deleting ``name`` would delete, and the trials in flight that stand in the way
    (:class:`workers.studies.delete.DeletionPreview`; nothing changes)."""
    from workers.studies.delete import deletion_preview as preview

    return preview(name)


def advance_study(name: str):
    """One idempotent runner pass over ``name`` (:meth:`workers.studies.runner.Runner.advance`)."""
    from workers.studies.runner import Runner

    return Runner().advance(name)


def study_schedule_fit(name: str, *, bootstrap: int = 1000, seed: int = 0) -> ScheduleReadout:
    """A ``schedule`` study's readout: each schedule's target, steps table, S(B), B_noise and
    B* with intervals, and WSD's E(S) fits (:func:`workers.studies.schedule_fit.schedule_fit`;
    ``.to_json_dict()`` is the JSON of ``cbs study fit``), for the Curves and Scaling laws pages."""
    from workers.studies.schedule_fit import schedule_fit

    return schedule_fit(name, bootstrap=bootstrap, seed=seed)


def study_schedule_table(name: str) -> list[StepsRow]:
    """A ``schedule`` study's steps table, every schedule's in one (``setting`` = ``{setting}.{schedule}``;
    :func:`workers.studies.schedule_fit.schedule_table`), typed: ``row.to_dict()`` is its line of
    the CSV ``cbs fit`` reads."""
    from workers.studies.schedule_fit import schedule_table

    return [StepsRow.from_mapping(row, f"study {name!r} row {i}") for i, row in enumerate(schedule_table(name), 1)]


def load_service_password(env: MutableMapping[str, str] | None = None) -> None:
    """The lab's MLflow service account password from ``CBS_TRACKING_PASSWORD_FILE`` into
    ``MLFLOW_TRACKING_PASSWORD`` unless set (:func:`workers.tracking.load_service_password`; the web
    app's MLflow proxy signs in with it)."""
    from workers.tracking import load_service_password as load

    load(env)
