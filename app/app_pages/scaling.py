"""Scaling laws: B* against N and D across the settings of a study, and forecasts."""

from __future__ import annotations

import streamlit as st

from app import failures, panels

st.title("Scaling laws")
st.caption(
    "Each setting's fitted critical batch size **B\\*** placed at its model size N and data size D, with power "
    "laws B* = c·N^α and B* = c·D^β fitted on log axes (95% intervals from resampling trials). The paper finds "
    "B* grows with D and barely with N at fixed D: Chinchilla B* = 93.20·N^0.47, fixed D B* = 621.3·N^0.087 "
    "(N in millions; Zhang et al. 2025, §4)."
)

with failures.shown_as_message("the Scaling laws page"):
    name = panels.study_picker("scaling")
    rows = panels.study_rows(name)
    b_ref, overhead = panels.fit_controls(rows, name, panels.study_rule(name))
    panels.render_scaling(rows, name, b_ref, overhead)
