"""Curves: steps-to-target against batch size for every setting of a study, and its B*."""

from __future__ import annotations

import streamlit as st

from app import failures, fit_view, gns_panels, panels

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

with failures.shown_as_message("the Curves page"):
    name = panels.study_picker("curves")
    rows = panels.study_rows(name)
    b_ref, overhead = panels.fit_controls(rows, name, panels.study_rule(name))
    for setting in fit_view.b_ref_dominated_settings(panels.analyze(rows, b_ref, overhead)):
        st.caption(f"**{setting}**: {fit_view.B_REF_DOMINATED_CAPTION} "
                   f"(B* is within 10% of (1 + r)·B_ref = {(1 + overhead) * b_ref:,.0f}).")
    for setting, sentence in fit_view.setting_flags(panels.analyze(rows, b_ref, overhead)):
        st.warning(f"**{setting}**: {sentence}.")
    panels.render_curves(rows, name, b_ref, overhead)
    gns_panels.render_forecast_overlay(name, panels.analyze(rows, b_ref, overhead))
