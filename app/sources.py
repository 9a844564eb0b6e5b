"""Where the pages' data comes from: the workers' public API, behind bounded caches.

Every read and write goes through :mod:`workers.query.api` (docs/ARCHITECTURE.md, "Workers public
API for the app"), called by name inside :func:`reachable`, and every read is cached with a short ``ttl`` and a ``max_entries`` bound, so a page that refreshes
every second or two costs one MLflow query per period, whatever the number of open tabs. A
service that does not answer becomes :class:`~app.failures.Unavailable` with the command that
starts it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import streamlit as st

from app.failures import Unavailable
from cbscore.errors import CbsError, masked_url

if TYPE_CHECKING:
    from cbscore.analysis import StepsRow
    from cbscore.study.decay_readout import ScheduleReadout

# A page fails fast when a tracking server is down, instead of retrying for a minute (these are
# MLflow's own settings, read by its HTTP client in this process only).
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")

#: Seconds a live read (a study's records, the workers) is reused: the Studies page refresh period.
#: A running trial sends its metrics every ``CBS_HEARTBEAT_S`` (5 s), so a faster refresh shows
#: nothing new; at 2 s an open Studies tab cost about a third of a core (server and browser) on
#: the two cores that were training the demo.
LIVE_TTL_S = 5.0
#: Seconds the studies list, a running trial's metric histories and a steps table (the input of
#: the fits) are reused: each costs a query over every run of a study, and none needs to be newer.
SLOW_TTL_S = 10.0


@contextmanager
def installed() -> Iterator[None]:
    """Around ``from workers.query import api`` (imported on first use: it brings SQLAlchemy, and
    MLflow with the first read): a workers package that is not installed becomes :class:`Unavailable`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("workers"):
            raise Unavailable("The workers package is not installed here, so studies cannot be read or "
                              "launched. Install CBS Lab with `make install`.") from exc
        raise


def tracking_uri() -> str:
    """The MLflow tracking URI the workers use (for messages)."""
    try:
        from workers.query import api

        return api.worker_settings().tracking_uri
    except Exception:  # only used to word a message
        return "the configured MLflow tracking URI"


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says that a server or a database did not answer."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return True
        text = f"{type(exc).__name__}: {exc}"
        if any(s in text for s in ("Connection refused", "Max retries exceeded", "Failed to establish",
                                   "unable to open database", "OperationalError", "ConnectionError")):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


@contextmanager
def reachable() -> Iterator[None]:
    """Around a call of :mod:`workers.query.api` (and its import, :func:`installed`): a store that
    does not answer becomes :class:`Unavailable` with the command that starts it; a ``CbsError``
    (bad input, a refusal) passes as it is. Every function below calls the API inside it::

        with reachable():
            from workers.query import api

            return api.cancel_trial(trial_id)
    """
    try:
        with installed():
            yield
    except (CbsError, Unavailable):
        raise
    except Exception as exc:
        if _unreachable(exc):
            raise Unavailable(f"The tracking store is unreachable at `{masked_url(tracking_uri())}` — start it with "
                              "`cbs tracking` (or everything with `cbs up`), then reload.") from exc
        raise


def warm_up() -> None:
    """:func:`workers.query.api.warm_up`; a store that does not answer raises as it is (the caller logs it)."""
    with installed():
        from workers.query import api
    api.warm_up()


# --------------------------------------------------------------------------- cached reads
@st.cache_data(ttl=SLOW_TTL_S, max_entries=4, show_spinner=False)
def studies() -> list:
    """Every study with its progress (``StudySummary``), newest first."""
    with reachable():
        from workers.query import api

        return list(api.list_studies())


@st.cache_data(ttl=LIVE_TTL_S, max_entries=16, show_spinner=False)
def records(study: str) -> list:
    """One ``TrialRecord`` per trial of ``study``."""
    with reachable():
        from workers.query import api

        return list(api.study_records(study))


@st.cache_data(ttl=SLOW_TTL_S, max_entries=64, show_spinner=False)
def curve(run_id: str) -> dict:
    """Metric histories of one run: ``{metric: (steps, values)}`` (a query per metric)."""
    with reachable():
        from workers.query import api

        return dict(api.trial_curve(run_id))


@st.cache_data(ttl=SLOW_TTL_S, max_entries=8, show_spinner=False)
def eval_curves(study: str) -> dict:
    """Every trial's held-out loss curve: ``{trial_id: (steps, losses)}`` (one read for the study)."""
    with reachable():
        from workers.query import api

        return dict(api.study_eval_curves(study))


@st.cache_data(ttl=600, max_entries=16, show_spinner=False)
def spec(study: str):
    """The ``StudySpec`` a study was launched with (it never changes)."""
    with reachable():
        from workers.query import api

        return api.study_spec(study)


@st.cache_data(ttl=SLOW_TTL_S, max_entries=16, show_spinner=False)
def table(study: str) -> list[StepsRow]:
    """The steps table of ``study``: one typed row per ended trial (the ``cbs fit`` columns plus
    trial_id, role, lr, beta2, tau, run_id)."""
    with reachable():
        from workers.query import api

        return list(api.study_table(study))


@st.cache_data(ttl=SLOW_TTL_S, max_entries=16, show_spinner=False)
def forecast(study: str):
    """The noise-scale forecast of every setting of ``study`` (``workers.studies.forecast.StudyForecast``,
    without calibration: the pages calibrate against their own fit)."""
    with reachable():
        from workers.query import api

        return api.study_forecast(study, with_fit=False)


@st.cache_data(ttl=SLOW_TTL_S, max_entries=8, show_spinner=False)
def local_fit(study: str):
    """A local study's readout (``api.LocalStudyReadout``; ``cbs study fit NAME`` for ``kind: local``)."""
    with reachable():
        from workers.query import api

        return api.study_local_fit(study)


@st.cache_data(ttl=SLOW_TTL_S, max_entries=16, show_spinner=False)
def study_fit(study: str):
    """``cbs study fit NAME``'s fit of a global study (:class:`cbscore.analysis.TableAnalysis`),
    without intervals (the Local CBS page sets its B* beside a local study's curve)."""
    with reachable():
        from workers.query import api

        return api.study_fit(study, bootstrap=0)


@st.cache_data(ttl=LIVE_TTL_S, max_entries=2, show_spinner=False)
def alive_workers() -> list:
    """Workers that answer, with what each runs."""
    with reachable():
        from workers.query import api

        return list(api.alive_workers())


@st.cache_data(ttl=30.0, max_entries=2, show_spinner=False)
def tracking_ui_url() -> str | None:
    """Base URL of the MLflow UI, or ``None`` when no tracking server serves one: the web app's
    own ``/mlflow`` when it serves MLflow to signed-in users (:mod:`app.mlflow_proxy`), else the
    tracking server's."""
    from app.mlflow_proxy import link

    try:
        with reachable():
            from workers.query import api

            return link(api.tracking_ui_url())
    except Exception:  # a link is a convenience; its absence is shown as "no link"
        return None


@st.cache_data(ttl=30.0, max_entries=4096, show_spinner=False)
def run_url(run_id: str) -> str | None:
    """Link to one MLflow run in the UI (where :func:`tracking_ui_url` says), or ``None``."""
    from app.mlflow_proxy import link

    if not run_id:
        return None
    try:
        with reachable():
            from workers.query import api

            return link(api.run_url(run_id))
    except Exception:  # a link is a convenience; its absence is shown as "no link"
        return None


def experiment_url(experiment_id: str) -> str | None:
    """Link to a study's experiment in the MLflow UI, or ``None``."""
    base = tracking_ui_url()
    return f"{base}/#/experiments/{experiment_id}" if base and experiment_id else None


def run_links(experiment_id: str, run_ids: list[str]) -> dict[str, str]:
    """Links to many runs of one experiment at once (``run_url`` asks MLflow for each run's
    experiment; here it is known). Empty when no UI is served."""
    base = experiment_url(experiment_id)
    return {r: f"{base}/runs/{r}" for r in run_ids if r} if base else {}


# --------------------------------------------------------------------------- uncached reads and writes
def study_spec(name: str):
    """The ``StudySpec`` of ``name`` as it is now, uncached (an extension changes it; :func:`spec` keeps it 10 min)."""
    with reachable():
        from workers.query import api

        return api.study_spec(name)


def study_owner(name: str) -> str:
    """Who launched ``name`` (:func:`workers.query.api.study_owner`)."""
    with reachable():
        from workers.query import api

        return api.study_owner(name)


def study_table_fit(name: str, rows: Sequence[StepsRow], *, b_ref: int, overhead: float, bootstrap: int, seed: int = 0,
                    skipped: Mapping[str, tuple[int, ...]] | None = None):
    """The fit of study ``name``'s steps table ``rows``, kept in the lab's read model
    (:func:`workers.query.api.study_table_fit`)."""
    with reachable():
        from workers.query import api

        return api.study_table_fit(name, rows, b_ref=b_ref, overhead=overhead, bootstrap=bootstrap, seed=seed,
                                   skipped=skipped)


def study_schedule_fit(name: str, *, bootstrap: int = 1000) -> ScheduleReadout:
    """A ``schedule`` study's readout (:func:`workers.query.api.study_schedule_fit`)."""
    with reachable():
        from workers.query import api

        return api.study_schedule_fit(name, bootstrap=bootstrap)


def apply_forecast_from(spec):
    """``(spec, ForecastRange | None)``: the spec's batch sizes around its ``forecast_from`` study's
    forecast (:func:`workers.query.api.apply_forecast_from`)."""
    with reachable():
        from workers.query import api

        return api.apply_forecast_from(spec)


def launch_study(spec, *, force: bool = False, owner: str = "") -> str:
    """Launch ``spec`` (:func:`workers.query.api.launch_study`); returns the study's name."""
    with reachable():
        from workers.query import api

        return api.launch_study(spec, force=force, owner=owner)


def extend_study(name: str, patch: Mapping | str, *, author: str = ""):
    """Grow ``name`` by ``patch`` (:func:`workers.query.api.extend_study`); ``(new spec, changes)``."""
    with reachable():
        from workers.query import api

        return api.extend_study(name, patch, author=author)


def retry_study(name: str, *, failed: bool = True, censored: bool = False, budget_factor: float = 2.0,
                author: str = "") -> list[str]:
    """Run ``name``'s failed trials or censored cells again (:func:`workers.query.api.retry_study`)."""
    with reachable():
        from workers.query import api

        return api.retry_study(name, failed=failed, censored=censored, budget_factor=budget_factor, author=author)


def launch_local_warmup(name: str, *, author: str = ""):
    """Launch local study ``name``'s warm-up and its controls (:func:`workers.query.api.launch_local_warmup`)."""
    with reachable():
        from workers.query import api

        return api.launch_local_warmup(name, author=author)


def delete_study(name: str):
    """Delete ``name`` as a whole (:func:`workers.query.api.delete_study`; ``StudyInFlight`` while trials run)."""
    with reachable():
        from workers.query import api

        return api.delete_study(name)


def cancel_study(name: str) -> int:
    """Cancel every unfinished trial of ``name`` (:func:`workers.query.api.cancel_study`); how many stopped."""
    with reachable():
        from workers.query import api

        return api.cancel_study(name)


def cancel_trial(trial_id: str) -> str:
    """Stop one trial (:func:`workers.query.api.cancel_trial`): ``stopped``, ``stopping`` or its outcome."""
    with reachable():
        from workers.query import api

        return api.cancel_trial(trial_id)


def refresh() -> None:
    """Forget every cached read (after launching or cancelling something)."""
    for fn in (studies, records, curve, eval_curves, table, forecast, local_fit, study_fit, alive_workers):
        fn.clear()
