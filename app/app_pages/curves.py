"""Curves: steps-to-target against batch size for every setting of a study, and its B*."""

from __future__ import annotations

import streamlit as st

from app import failures, fit_view, gns_panels, panels, sources
from app.kinds import study_app_kind

st.title("Curves")
st.caption(
    "Steps-to-target **S(B)**: the optimizer steps at which the trials at batch size B reach the setting's "
    "target loss, read off a fit across their learning rates (a parabola in ln lr through the best rate and its "
    "neighbours; the fewest steps where it cannot be fitted). The target is the held-out loss of the averaged "
    "weights that the reference cell at B_ref reaches at D tokens, fitted over its runs. The critical batch size "
    "**B\\*** is the largest B with S(B) ≤ (1 + r)·S_lin(B), where S_lin(B) = S(B_ref)·B_ref/B is linear "
    "scaling (Zhang et al. 2025, §2.2). A batch size where every trial was censored at its step cap is drawn as "
    "a triangle at the cap: a lower bound on S(B), kept in the fit as one."
)

def _compare(name: str, rows, b_ref: int, overhead: float) -> None:
    """Other studies' S(B) beside this one's, normalised by S(B_ref): only studies with the
    same B_ref share that view's linear-scaling line; the choice is in the URL (``compare=B,C``)."""
    from app import charts, compare

    same = [s.name for s in sources.studies() if s.name != name and panels.study_rule(s.name)[0] == b_ref]
    if not same:
        return
    st.subheader("Compare studies")
    chosen = panels.compare_picker(
        f"Compare with (studies with B_ref = {b_ref})", same, name, key="curves.compare",
        help="Their S(B) / S(B_ref) on this study's axes, each fitted at its own r. The address keeps the choice.")
    if not chosen:
        return
    by_study = {name: fit_view.setting_curves(panels.analyze(rows, b_ref, overhead), rows)}
    for other, other_rows in panels.compared_rows(chosen).items():
        r = panels.study_rule(other)[1]
        other_r = r if r is not None else overhead
        by_study[other] = fit_view.setting_curves(panels.analyze(other_rows, b_ref, other_r), other_rows)
    st.plotly_chart(charts.steps_to_target_figure(compare.labelled_curves(by_study), b_ref=b_ref, overhead=overhead,
                                                  normalized=True),
                    key="curves.compare.normalized", config={"displaylogo": False})


with failures.shown_as_message("the Curves page"):
    name = panels.study_picker("curves")
    kind = study_app_kind(name)
    if kind is not None and kind.curves is not None:  # the kind's own view (a schedule study's three schedules)
        kind.curves(name)
        st.stop()
    rows = panels.study_rows(name)
    b_ref, overhead = panels.fit_controls(rows, name, panels.study_rule(name))
    for setting in fit_view.b_ref_dominated_settings(panels.analyze(rows, b_ref, overhead)):
        st.caption(f"**{setting}**: {fit_view.B_REF_DOMINATED_CAPTION} "
                   f"(B* is within 10% of (1 + r)·B_ref = {(1 + overhead) * b_ref:,.0f}).")
    for setting, sentence in fit_view.setting_flags(panels.analyze(rows, b_ref, overhead)):
        st.warning(f"**{setting}**: {sentence}.")
    panels.render_curves(rows, name, b_ref, overhead)
    gns_panels.render_forecast_overlay(name, panels.analyze(rows, b_ref, overhead))
    _compare(name, rows, b_ref, overhead)
