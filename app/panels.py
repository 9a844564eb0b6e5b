"""Streamlit pieces shared by several pages: the sidebar, the study picker and the results
panels (curves and scaling laws) that the study pages and the Import page both draw."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import streamlit as st

from app import sources, units

if TYPE_CHECKING:
    from cbscore.analysis import StepsRow


def optuna_dashboard_url() -> str | None:
    """URL of a running optuna-dashboard (``CBS_OPTUNA_DASHBOARD_URL``), or ``None``."""
    return os.environ.get("CBS_OPTUNA_DASHBOARD_URL") or None


def sidebar() -> None:
    """Links to the tracking UI and optuna-dashboard, and what CBS means here."""
    with st.sidebar:
        url = sources.tracking_ui_url()
        if url:
            st.link_button("MLflow UI", url, icon=":material/open_in_new:", width="stretch")
        else:
            st.caption("MLflow UI: not served — start it with `cbs tracking`.")
        dashboard = optuna_dashboard_url()
        if dashboard:
            st.link_button("Optuna dashboard", dashboard, icon=":material/open_in_new:", width="stretch")
        st.caption("**CBS Lab** measures the critical batch size B* of LM pre-training: the largest batch size "
                   "whose steps-to-target stay within (1 + r) of linear scaling from B_ref "
                   "([Zhang et al., ICLR 2025](https://arxiv.org/abs/2410.21676)).")


# --------------------------------------------------------------------------- study picker
def study_picker(key: str) -> str:
    """A select box over the studies; remembers the choice across pages (and in the URL).

    Raises :class:`~app.failures.Nothing` when there is no study yet.
    """
    from app.failures import Nothing

    names = [s.name for s in sources.studies()]
    if not names:
        raise Nothing("No studies yet — launch one on the Launch page (the `demo` preset runs on a laptop "
                      "CPU), or explore a published steps table on the Import page.")
    wanted = st.query_params.get("study") or st.session_state.get("studies.selected")
    index = names.index(wanted) if wanted in names else 0
    name = st.selectbox("Study", names, index=index, key=f"{key}.study")
    st.session_state["studies.selected"] = name
    if st.query_params.get("study") != name:
        st.query_params["study"] = name
    return name


def compare_picker(label: str, options: list[str], current: str, *, key: str, help: str) -> list[str]:
    """A multiselect of other studies to draw beside ``current``, kept in the page's address
    (``?compare=B,C``) so a comparison can be shared."""
    from app import compare

    chosen = st.multiselect(label, options, default=compare.parse_compare(st.query_params.get("compare"), options,
                                                                         current),
                            max_selections=compare.MAX_STUDIES - 1, key=key, help=help)
    if ",".join(chosen) != (st.query_params.get("compare") or ""):
        if chosen:
            st.query_params["compare"] = ",".join(chosen)
        else:
            st.query_params.pop("compare", None)
    return chosen


def compared_rows(chosen: list[str]) -> dict[str, StudyRows]:
    """The steps tables of the studies a comparison draws; one with no finished trial yet is named
    in a note and left out."""
    from app.failures import Nothing

    out = {}
    for other in chosen:
        try:
            out[other] = study_rows(other)
        except Nothing as exc:
            st.info(f"`{other}`: {exc}", icon=":material/hourglass_empty:")
    return out


def study_summary(name: str):
    """The ``StudySummary`` of ``name`` (or ``None`` when it is gone)."""
    return next((s for s in sources.studies() if s.name == name), None)


def study_rule(name: str) -> tuple[int | None, float | None]:
    """The ``(B_ref, r)`` the study was launched with, where its summary carries them."""
    summary = study_summary(name)
    return getattr(summary, "b_ref", None), getattr(summary, "overhead", None)


class StudyRows(list):
    """A study's steps table (one :class:`~cbscore.analysis.StepsRow` per trial, as
    :func:`sources.table` gives it) that also
    carries :attr:`skipped`: per setting, the batch sizes the planner never ran. :func:`analyze`
    names them in the notes, so every page that fits a study's rows lists them."""

    skipped: Mapping[str, tuple[int, ...]] = {}
    key: str = ""
    """:func:`table_key` of the rows (set once by :func:`study_rows`: the fits are cached by it)."""
    study: str = ""
    """The study whose table it is (its fits are kept in the lab's read model)."""


def table_key(rows: Sequence[StepsRow]) -> str:
    """A digest of a steps table: the key its fit is cached by (hashing a thousand rows on every
    cache lookup cost more than a page's reads)."""
    text = json.dumps([r.to_dict() for r in rows], sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def study_rows(name: str) -> StudyRows:
    """The steps table of ``name`` with its skipped cells; :class:`~app.failures.Nothing` while
    no trial has an outcome."""
    from app.failures import Nothing

    rows = StudyRows(sources.table(name))
    if not rows:
        raise Nothing(f"Study `{name}` has no finished trials yet — its curves appear as trials reach their "
                      "targets. Watch it on the Studies page.")
    rows.skipped = study_skipped(name)
    rows.key = table_key(rows)
    rows.study = name
    return rows


@st.cache_data(ttl=sources.SLOW_TTL_S, max_entries=16, show_spinner=False)
def study_skipped(name: str) -> dict[str, tuple[int, ...]]:
    """Per setting of ``name``, the batch sizes of its cells in state ``skipped``: the planner
    (:func:`cbscore.study.plan`, on the study's spec and records) will never run them."""
    from cbscore.study import plan, skipped_cells

    return skipped_cells(plan(sources.spec(name), sources.records(name), time.time()))


# --------------------------------------------------------------------------- results panels
#: Bootstrap resamples per setting behind every interval the pages show.
BOOTSTRAP = 1000
#: How the interval of B* is drawn (DESIGN.md §1, "Intervals"; cbscore/analysis/_bootstrap.py).
CI_HELP = ("95% bootstrap interval of B*: the residuals of the log-space fit of S(B) resampled, and the seeds "
           "where a batch size ran several; never the learning rates of a cell (S(B) is read off them).")
#: Why the scaling charts can be empty (DESIGN.md §1, "Scaling laws": never pooled across settings
#: whose other variable differs).
NO_LAW = ("No scaling law yet: a law needs B* at two or more settings that share the other variable — the law "
          "in N across settings with the same D, the law in D across settings with the same N, the Chinchilla "
          "law in N across settings with the same tokens per parameter (D ∝ N), and the joint law N^α·D^β over "
          "4 or more settings where N and D vary independently.")


def analyze(rows: Sequence[StepsRow], b_ref: int, overhead: float):
    """:func:`cbscore.analysis.analyze_table` of ``rows`` (with the skipped cells of a
    :class:`StudyRows`), cached per table (:func:`table_key`), ``B_ref`` and ``r``."""
    skipped = getattr(rows, "skipped", None) or {}
    return _analyze(getattr(rows, "key", "") or table_key(rows), b_ref, overhead, tuple(sorted(skipped.items())),
                    getattr(rows, "study", ""), _rows=list(rows))


# A resource, not data: the frozen result is shared, not copied on every lookup (a page reads it 4 times).
@st.cache_resource(ttl=600, max_entries=32, show_spinner="Fitting S(B) and bootstrapping B*…")
def _analyze(key: str, b_ref: int, overhead: float, skipped: tuple[tuple[str, tuple[int, ...]], ...], study: str,
             *, _rows: list[StepsRow]):
    if study:  # a study's table: the fit the lab keeps for it (computed once per table, on any host)
        return sources.study_table_fit(study, _rows, b_ref=b_ref, overhead=overhead, bootstrap=BOOTSTRAP,
                                       seed=0, skipped=dict(skipped))
    from cbscore.analysis import analyze_table

    return analyze_table(_rows, b_ref=b_ref, overhead=overhead, bootstrap=BOOTSTRAP, seed=0, skipped=dict(skipped))


def fit_controls(rows: Sequence[StepsRow], source: str,
                 rule: tuple[int | None, float | None] = (None, None)) -> tuple[int, float]:
    """``B_ref`` and ``r`` pickers, starting from ``rule`` (the study's own ``(B_ref, r)``); the
    choice is kept per data source across pages."""
    from app import fit_view

    sizes = fit_view.batch_sizes(rows)
    store = f"fit.{source}"
    saved = st.session_state.get(store) or {}
    b_ref = saved.get("b_ref") if saved.get("b_ref") in sizes else fit_view.default_b_ref(sizes, rule[0])
    overhead = float(saved.get("overhead") or rule[1] or 0.2)
    overhead = min(1.0, max(0.05, round(overhead / 0.05) * 0.05))  # on the slider's grid
    cols = st.columns([3, 2, 3])
    b_ref = cols[0].select_slider("Reference batch size B_ref (sequences)", options=sizes, value=b_ref, key=f"{source}.b_ref",
                                  help="Linear scaling is drawn from B_ref; the paper uses 256.")
    overhead = cols[1].slider("Overhead r", min_value=0.05, max_value=1.0, step=0.05, value=overhead,
                              key=f"{source}.overhead",
                              help="B* is the largest B with S(B) ≤ (1 + r)·S(B_ref)·B_ref/B; the paper uses 0.2.")
    cols[2].markdown(f"<div style='padding-top:1.9rem;color:#5A6270'>B* = (1 + r)·B_ref + r·B_noise = "
                     f"{1 + overhead:.2f}·{b_ref} + {overhead:.2f}·B_noise</div>", unsafe_allow_html=True)
    st.session_state[store] = {"b_ref": b_ref, "overhead": overhead}
    return int(b_ref), float(overhead)


def _notes(table) -> None:
    if table.errors:
        with st.expander(f"What the data cannot support ({len(table.errors)} notes)", icon=":material/info:"):
            st.markdown("\n".join(f"- {e}" for e in table.errors))


def render_curves(rows: Sequence[StepsRow], source: str, b_ref: int, overhead: float, *,
                  as_read: Sequence[Mapping] | None = None) -> None:
    """Steps-to-target against B per setting, the normalised view, the results table and downloads
    (the steps table's: ``as_read``, the rows of an uploaded file as they were read, else ``rows``)."""
    import pandas as pd

    from app import charts, fit_view

    table = analyze(rows, b_ref, overhead)
    _b_star_metrics(table)
    curves = fit_view.setting_curves(table, rows)
    raw, normalized = st.tabs(["Steps to target S(B)", "Normalised S(B) / S(B_ref)"])
    with raw:
        st.caption("Each marker is S(B), the optimizer steps the trials at that batch size needed to reach the "
                   "setting's target loss, read off a fit across their learning rates (triangles: none reached — "
                   "a lower bound, kept in the fit as one). Solid: the fit "
                   "S(B) = a + b/B on log S; dotted: linear scaling S(B_ref)·B_ref/B with its (1 + r) band; "
                   "star: the critical batch size B* with its 95% bootstrap interval. Click a marker for its run.")
        event = st.plotly_chart(charts.steps_to_target_figure(curves, b_ref=b_ref, overhead=overhead),
                                key=f"{source}.curves.chart", on_select="rerun", selection_mode="points",
                                config={"displaylogo": False})
        _selected_run(event)
    with normalized:
        st.caption("Each setting divided by its fitted S(B_ref): perfect linear scaling is the line B_ref/B for "
                   "every setting, and a setting leaves the (1 + r) band at its B* (the paper's Figure 1 view).")
        st.plotly_chart(charts.steps_to_target_figure(curves, b_ref=b_ref, overhead=overhead, normalized=True),
                        key=f"{source}.curves.normalized", config={"displaylogo": False})
    st.subheader("Critical batch size per setting")
    results = pd.DataFrame(fit_view.results_rows(table))
    # B*, its interval and B* from the points share the digits their smallest value needs
    b_star = units.batch_format(v for k in ("B* (seq)", "95% low", "95% high", "B* from points") for v in results.get(k, []))
    st.dataframe(results, hide_index=True, width="stretch", column_config={
        "N": st.column_config.NumberColumn(format="compact", help="Non-embedding parameters"),
        "D (tokens)": st.column_config.NumberColumn(format="compact", help="Training tokens of the setting"),
        "S_min (steps)": st.column_config.NumberColumn(format="%.0f"),
        "B_noise (seq)": st.column_config.NumberColumn(format=units.batch_format(results.get("B_noise (seq)", []))),
        "B* (seq)": st.column_config.NumberColumn(format=b_star, help="(1 + r)·B_ref + r·B_noise"),
        "95% low": st.column_config.NumberColumn(format=b_star, help=CI_HELP),
        "95% high": st.column_config.NumberColumn(format=b_star, help=CI_HELP),
        "B* from points": st.column_config.NumberColumn(format=b_star, help="B* read off the measured points "
                                                         "(interpolated on log axes), beside the fitted one"),
        "R² (log S)": st.column_config.NumberColumn(format="%.3f"),
    })
    cols = st.columns([1, 1, 2])
    cols[0].download_button("Results as CSV", results.to_csv(index=False), file_name=f"{source}-cbs.csv",
                            mime="text/csv", icon=":material/download:", on_click="ignore")
    # dtype=object: each cell as it is, as the dicts with "" for a blank gave it (inferred, a column of
    # integers with a blank cell would be written as floats: 1200.0).
    table_csv = (pd.DataFrame(list(as_read)) if as_read is not None
                 else pd.DataFrame([r.to_dict() for r in rows], dtype=object)).to_csv(index=False)
    cols[1].download_button("Steps table as CSV", table_csv,
                            file_name=f"{source}-steps.csv", mime="text/csv", icon=":material/download:",
                            on_click="ignore", help="The `cbs fit` input: one row per trial.")
    _shape_of_curves(table)
    _notes(table)


def _shape_of_curves(table) -> None:
    """Shape before slope (DESIGN.md §1): the seed-paired doubling ratios, the lack-of-fit test and the
    study's noise by source, so a reader sees whether ``a + b/B`` describes the points before any B*."""
    import pandas as pd

    from app import fit_view

    doublings, lack, noise = fit_view.doubling_rows(table), fit_view.lack_of_fit_rows(table), fit_view.noise_rows(table)
    if not (doublings or noise):
        return
    st.subheader("Shape of S(B) before its B*")
    st.caption("S_min(1 + B_noise/B) keeps every doubling ratio S(B)/S(2B) between 1 and 2 and, when B_noise grows "
               "with D, raises every ratio. A trend only in the first doubling from B_ref is a small-batch effect; "
               "a ratio above 2 cannot come from the fitted curve. Ratios pair each seed with itself, so a seed's "
               "shift at every B cancels; the interval rests on the seed × cell noise.")
    if doublings:
        st.dataframe(pd.DataFrame(doublings), hide_index=True, width="stretch", placeholder="—",
                     column_config={"ratio": st.column_config.NumberColumn(format="%.3f")})
    if lack:
        st.dataframe(pd.DataFrame(lack), hide_index=True, width="stretch", column_config={
            "F": st.column_config.NumberColumn(format="%.3g", help="misfit of a + b/B over the seeds' own noise"),
            "p": st.column_config.NumberColumn(format="%.2g")})
    if noise:
        st.markdown("**Noise of ln S by source** (pooled over settings; `cbs study simulate --noise lab` draws these)")
        st.dataframe(pd.DataFrame(noise), hide_index=True, width="stretch",
                     column_config={"sd of ln S": st.column_config.NumberColumn(format="%.3f")})


def _b_star_metrics(table, most: int = 6) -> None:
    """The fitted B* of each setting at a glance (the table below has every figure)."""
    settings = table.settings[:most]
    for col, s in zip(st.columns(len(settings)), settings):
        if s.cbs is None:
            col.metric(f"B* · {s.setting}", "—", help="; ".join(e.split(": ", 1)[-1] for e in s.errors) or None)
            continue
        interval = ""
        if s.cbs_ci is not None and all(math.isfinite(v) for v in s.cbs_ci):
            interval = f"95% interval {units.batch(s.cbs_ci[0])} – {units.batch(s.cbs_ci[1])}"
        col.metric(f"B* · {s.setting}", units.batch(s.cbs), help=f"sequences; {interval}" if interval else "sequences")


def _selected_run(event) -> None:
    """A link to the MLflow run of the marker the user clicked (its ``customdata`` is the run id)."""
    try:
        points = event.selection.points if event else []
    except AttributeError:
        points = []
    run_ids = [p.get("customdata") for p in points if isinstance(p, dict) and p.get("customdata")]
    if not run_ids:
        return
    run_id = run_ids[0] if isinstance(run_ids[0], str) else run_ids[0][0]
    url = sources.run_url(run_id)
    if url:
        st.link_button(f"Open run {run_id[:12]} in MLflow", url, icon=":material/open_in_new:")
    else:
        st.caption(f"Best trial: run `{run_id}` — start the MLflow UI with `cbs tracking` to open it.")


def render_scaling(rows: Sequence[StepsRow], source: str, b_ref: int, overhead: float) -> None:
    """B* against N and against D with the fitted and the paper's laws, and a forecast calculator."""
    import pandas as pd

    from app import charts, fit_view

    table = analyze(rows, b_ref, overhead)
    left, right = st.columns(2, gap="large")
    with left:
        st.markdown("**B\\* against model size N** (millions of non-embedding parameters)")
        points = fit_view.scaling_points(table, "n")
        st.plotly_chart(charts.scaling_law_figure(
            points, fits=fit_view.fitted_laws(table, "n"), references=fit_view.PAPER_LAWS_N,
            x_title="N (millions of non-embedding parameters, log)",
            x_range=_x_range([p.x for p in points], paper=(50.0, 2000.0))),
            key=f"{source}.scaling.n", config={"displaylogo": False})
    with right:
        st.markdown("**B\\* against data size D** (training tokens)")
        points = fit_view.scaling_points(table, "d")
        st.plotly_chart(charts.scaling_law_figure(
            points, fits=fit_view.fitted_laws(table, "d"), x_title="D (training tokens, log)"),
            key=f"{source}.scaling.d", config={"displaylogo": False})
    laws = fit_view.law_rows(table)
    if laws:
        st.dataframe(pd.DataFrame(laws).dropna(axis=1, how="all"), hide_index=True, width="stretch", placeholder="—",
                     column_config={
            "c": st.column_config.NumberColumn(format="%.4g"),
            "α (N exponent)": st.column_config.NumberColumn(format="%.3f"),
            "β (D exponent)": st.column_config.NumberColumn(format="%.3f"),
            "R²": st.column_config.NumberColumn(format="%.3f"),
        })
    else:
        st.info(NO_LAW, icon=":material/info:")
    _d_ordering(table)
    _trends(table)
    _forecast(table, source)
    _notes(table)


def _trends(table) -> None:
    """Which doublings carry each law's trend, and the laws without B_ref and of the empirical B*."""
    import pandas as pd

    from app import fit_view

    rows = fit_view.trend_rows(table)
    if not rows:
        return
    st.markdown("**Which doublings carry the trend**")
    st.caption("Slope of each seed-paired ln S(B)/S(2B) per e-fold of D (or N) across the law's settings, with a "
               "seed fixed effect. A critical batch size that moves with D raises every doubling; a trend in the "
               "first doubling from B_ref alone is a small-batch effect, and the verdict says so.")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                 column_config={"slope per e-fold": st.column_config.NumberColumn(format="%+.3f")})
    other = fit_view.other_law_rows(table)
    if other:
        st.markdown(r"**Laws without the reference point, and of the empirical B\***")
        st.dataframe(pd.DataFrame(other), hide_index=True, width="stretch",
                     column_config={"exponent": st.column_config.NumberColumn(format="%+.3f")})


def render_paper_comparison(table) -> None:
    """This study's exponents beside the paper's (Zhang et al. 2025, §4), and whether it supports
    "B* scales with D, not with N" (the verdict from the laws' joint draws)."""
    import pandas as pd

    from app import fit_view

    st.subheader("Compared with the paper")
    verdict, sentence = fit_view.paper_verdict(table)
    {"supported": st.success, "not supported": st.warning}.get(verdict, st.info)(sentence, icon=":material/balance:")
    trend = table.paper_comparison().trend_note
    if trend:
        st.caption(f"Doubling ratios {trend}.")
    st.dataframe(pd.DataFrame(fit_view.paper_rows(table)), hide_index=True, width="stretch", placeholder="—",
                 column_config={
                     "this study": st.column_config.NumberColumn(format="%.3f"),
                     "paper": st.column_config.NumberColumn(format="%.3f", help="Zhang et al. 2025, §4"),
                 })


def _d_ordering(table) -> None:
    """Whether B* rises with D at fixed N, with and without the reference point."""
    from app import fit_view

    rows = fit_view.d_ordering(table)
    if not rows:
        return
    st.markdown("**Ordering by D at fixed N**")
    st.caption("The reference cell sets the target and S(B_ref): a rise with D that disappears without its point "
               "rests on that one cell. An ordering is not an interval; the laws' intervals say how sure it is.")
    for row in rows:
        held = row["B* without B_ref"]["rises"]
        (st.success if held else st.warning if held is False else st.info)(fit_view.d_ordering_sentence(row))


def _x_range(xs: list[float], paper: tuple[float, float]) -> tuple[float, float]:
    lo, hi = (min(xs), max(xs)) if xs else paper
    return min(lo, paper[0]) / 1.6, max(hi, paper[1]) * 1.6


def _forecast(table, source: str) -> None:
    """N, D → B* with its interval, from the fitted laws (and the paper's, for comparison)."""
    from app import fit_view, spec_form
    from cbscore.errors import CbsError

    st.subheader("Forecast B*")
    with st.form(f"{source}.forecast", border=True):
        cols = st.columns([2, 2, 1])
        n_text = cols[0].text_input("N (non-embedding parameters)", value="151M", key=f"{source}.forecast.n",
                                    help="e.g. 151M, 1.2B")
        d_text = cols[1].text_input("D (training tokens)", value="3.072B", key=f"{source}.forecast.d",
                                    help="Empty: forecast from N alone (the law in N).")
        cols[2].markdown("<div style='height:1.75rem'></div>", unsafe_allow_html=True)
        submitted = cols[2].form_submit_button("Forecast", type="primary", width="stretch")
    if not submitted:
        return
    try:
        n_params = spec_form.parse_count("N", n_text)
        tokens = spec_form.parse_count("D", d_text) if d_text.strip() else None
        forecast = table.scaling.forecast(n_params=n_params, tokens=tokens)
    except CbsError as exc:
        from app.failures import show

        show(exc)
        return
    law = {"n": "the law in N", "d": "the law in D", "joint": "the joint law in N and D"}[forecast.law]
    interval = ""
    if forecast.cbs_ci is not None:
        interval = f" (95% interval {forecast.cbs_ci[0]:,.0f} – {forecast.cbs_ci[1]:,.0f})"
    cols = st.columns(3)
    cols[0].metric("B* forecast (sequences)", f"{forecast.cbs:,.0f}", help=f"From {law}{interval}.")
    paper = fit_view.PAPER_LAWS_N[0](n_params / fit_view.N_UNIT)
    cols[1].metric("Paper, Chinchilla law", f"{paper:,.0f}", help="93.20·N^0.47, N in millions.")
    paper = fit_view.PAPER_LAWS_N[1](n_params / fit_view.N_UNIT)
    cols[2].metric("Paper, fixed-D law", f"{paper:,.0f}", help="621.3·N^0.087, N in millions (D fixed).")
    st.caption(f"From {law}{interval}.")


# --------------------------------------------------------------------------- "Simulate this design"
def simulate_job(spec, curves, config, seeds: int, *, seconds: float):
    """``seeds`` simulated studies of ``spec`` in this session's background job
    (:mod:`app.sim_jobs`: a child process with a time limit, ended with the session), with a
    progress bar while the page waits. Returns ``(report, studies done)`` as
    ``spec_form.simulate_within`` does; what the library raised is raised here.

    A closed tab ends the job (:data:`app.sim_jobs.SESSION_GRACE_S` later); another click leaves it
    running (bounded) and a click with the same settings waits for it again, so a session never
    runs two."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    from app import sim_jobs
    from app.failures import Nothing

    ctx = get_script_run_ctx()
    job = sim_jobs.start(ctx.session_id if ctx else "", spec, curves, config, seeds, seconds=seconds)
    bar = st.progress(0.0, text=f"Simulating {seeds} studies of `{spec.name}`…")

    def tick(job) -> None:  # an st call: where Streamlit interrupts the page (a rerun, a stop, a closed tab)
        done = len(job.reports)
        bar.progress(done / job.seeds, text=f"Simulated {done} of {job.seeds} studies of `{spec.name}` · "
                                            f"{time.monotonic() - job.started_s:.0f} s (the web app starts none "
                                            f"after {job.seconds:g} s, CBS_WEB_SIM_SECONDS)")

    # A rerun (another click) stops this page, not the job: Streamlit's fast reruns raise the same
    # StopException a closed tab does, so the watchdog, which sees the session go, ends the job.
    sim_jobs.wait(job, tick)
    sim_jobs.release(job)
    bar.empty()
    if job.error is not None:
        raise job.error
    report = job.report()
    if report is None:
        raise Nothing(f"The simulation ended before its first study did ({job.ended}); simulate fewer studies, "
                      "or run `cbs study simulate` on the host.")
    return report, len(report.seeds)
