"""The Curves and Scaling laws pages' view of a ``schedule`` study.

A schedule study measures one setting under constant+EWA, cosine and WSD from the same stable runs,
each schedule against its own target (its loss at D at B_ref); its steps table is not the global
study's (one target per setting), so these pages read ``cbs study fit``'s readout
(:func:`workers.query.api.study_schedule_fit`) instead, and draw it with :mod:`app.schedule_charts`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from app import panels, sources

if TYPE_CHECKING:
    from cbscore.study.decay_readout import ScheduleReadout

_CONFIG = {"displaylogo": False}


@st.cache_data(ttl=sources.SLOW_TTL_S, max_entries=8, show_spinner=False)
def readout(name: str) -> ScheduleReadout:
    """``cbs study fit NAME``'s readout of a schedule study, with the pages' bootstrap."""
    return sources.study_schedule_fit(name, bootstrap=panels.BOOTSTRAP)


def _readout(name: str) -> ScheduleReadout:
    from app.failures import Nothing

    fit = readout(name)
    if not any(e.runs for e in fit.schedules.values()):
        raise Nothing(f"Schedule study `{name}` has no decayed run read yet — its schedules appear as their "
                      "runs end. Watch it on the Studies page.")
    return fit


def _fit_table(fit: ScheduleReadout) -> None:
    import pandas as pd

    from app import schedule_charts

    st.dataframe(pd.DataFrame(schedule_charts.fit_rows(fit)), hide_index=True, width="stretch", placeholder="—",
                 column_config={k: st.column_config.NumberColumn(format="%.4g")
                                for k in ("target (nats)", "S_min (steps)", "B_noise", "B_noise low", "B_noise high",
                                          "B*", "B* low", "B* high")})
    for line in fit.comparison:
        st.markdown(f"- {line}")
    for note in fit.notes:
        st.caption(note)


def render_curves(name: str) -> None:
    """S(B) per schedule side by side, the fitted curves and B*, and the fits' table."""
    from app import schedule_charts

    fit = _readout(name)
    st.subheader("Steps to target under each schedule")
    st.caption(
        f"One setting, three schedules from the same stable runs, B_ref = {fit.b_ref}, r = {fit.overhead:g}. "
        "Each schedule is read against its own target, its loss at D at B_ref: constant+EWA by the stable run's "
        "crossing, WSD by the first decay branch (from the stable run's snapshot) at the target, cosine by the "
        "first cosine run at it. S(B) = S_min + b/B fitted on log S; ◆ B* (Zhang et al. 2025, §2.2).")
    st.plotly_chart(schedule_charts.steps_figure(fit), key="curves.schedule.steps", config=_CONFIG)
    _fit_table(fit)


def render_scaling(name: str) -> None:
    """B_noise and B* under each schedule with their intervals, and WSD's two E(S) fits compared."""
    from app import schedule_charts

    fit = _readout(name)
    st.subheader("B_noise and B* under each schedule")
    st.caption("One setting (one N, one D): no scaling law across settings here; the schedules side by side, "
               "95% bootstrap intervals (" + panels.CI_HELP + ")")
    st.plotly_chart(schedule_charts.intervals_figure(fit), key="scaling.schedule.intervals", config=_CONFIG)
    _fit_table(fit)
    wsd = fit.schedules.get("wsd")
    if wsd is None:
        return
    st.subheader("E(S) under WSD: the classical and the revised fit")
    es = wsd.es_fit
    if es is None:
        st.info("The E(S) fits need WSD runs at three or more (B, seed) points at the target.")
        return
    st.caption(
        "Sequences to target E = B·S against steps S, each (B, seed)'s fewest steps (as `cbs fit --es`). Classical: "
        "E = E_min·S/(S − S_min), B_noise = E_min/S_min (McCandlish et al. 2018, eq. 2.11). Revised for WSD, its "
        "quadratic stage only: E = C·(S − S_opt)² + E_min, B_opt = E_min/S_opt, B_min = min E(S)/S (Zhou, Huang "
        "et al. 2026, arXiv 2601.05034; what could be checked offline is in docs/schedules.md). Compared by AICc "
        "(Hurvich & Tsai 1989) and leave-one-out error of ln E.")
    b, s = schedule_charts.es_points_of(wsd)
    st.plotly_chart(schedule_charts.es_figure(b, s, es), key="scaling.schedule.es", config=_CONFIG)
    import pandas as pd

    st.dataframe(pd.DataFrame(schedule_charts.es_rows(es)), hide_index=True, width="stretch", placeholder="—",
                 column_config={k: st.column_config.NumberColumn(format="%.4g")
                                for k in ("AICc", "leave-one-out RMSE (ln E)", "B_noise", "B_opt", "B_min")})
    st.markdown(f"**Which fits better:** {schedule_charts.es_verdict(es)}")
    for note in es.notes:
        st.caption(note)
