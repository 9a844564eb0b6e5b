"""Scaling laws: B* against N and D across the settings of a study, the paper beside, forecasts."""

from __future__ import annotations

import streamlit as st

from app import failures, fit_view, gns_panels, panels

st.title("Scaling laws")
st.caption(
    "Each setting's fitted critical batch size **B\\*** placed at its model size N and data size D. Power laws "
    "are fitted on log axes only across settings that define them: B* = c·N^α across settings that share D, "
    "B* = c·D^β across settings that share N, B* = c·N^α across settings with D ∝ N (the paper's Chinchilla, "
    "\"N and D together\"), and B* = c·N^α·D^β where N and D vary independently. 95% intervals: a random-effects "
    "meta-regression, each setting weighted by its own bootstrap of B*, plus the settings' scatter beyond it "
    "(3 or more settings per law). The paper "
    "finds B* grows with D and barely with N at fixed D: Chinchilla B* = 93.20·N^0.47, fixed D "
    "B* = 621.3·N^0.087 (N in millions; Zhang et al. 2025, §4)."
)


def _compare_with_paper(table) -> None:
    """This study's exponents beside the paper's, and whether it supports "B* scales with D, not N"."""
    import pandas as pd

    st.subheader("Compared with the paper")
    verdict, sentence = fit_view.paper_verdict(table)
    {"supported": st.success, "not supported": st.warning}.get(verdict, st.info)(sentence, icon=":material/balance:")
    st.dataframe(pd.DataFrame(fit_view.paper_rows(table)), hide_index=True, width="stretch", placeholder="—",
                 column_config={
                     "this study": st.column_config.NumberColumn(format="%.3f"),
                     "paper": st.column_config.NumberColumn(format="%.3f", help="Zhang et al. 2025, §4"),
                 })


with failures.shown_as_message("the Scaling laws page"):
    name = panels.study_picker("scaling")
    rows = panels.study_rows(name)
    b_ref, overhead = panels.fit_controls(rows, name, panels.study_rule(name))
    panels.render_scaling(rows, name, b_ref, overhead)
    _compare_with_paper(panels.analyze(rows, b_ref, overhead))
    gns_panels.render_forecast_vs_measured(name, panels.analyze(rows, b_ref, overhead), b_ref, overhead)
