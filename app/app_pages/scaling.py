"""Scaling laws: B* against N and D across the settings of a study, the paper beside, forecasts."""

from __future__ import annotations

import streamlit as st

from app import failures, gns_panels, panels, sources
from app.kinds import study_app_kind

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


def _compare(name: str, table) -> None:
    """Other studies beside this one: B* and laws on one chart and in one table, each study
    fitted at its own B_ref and r; the choice is in the URL (``?study=A&compare=B,C``) to share."""
    import pandas as pd

    from app import compare

    others = [s.name for s in sources.studies() if s.name != name]
    if not others:
        return
    st.subheader("Compare studies")
    chosen = panels.compare_picker(
        "Compare with", others, name, key="scaling.compare",
        help="Other studies drawn beside this one, a colour each, each fitted at its own B_ref and r. The page's "
             "address keeps the choice: copy it to share the comparison.")
    if not chosen:
        return
    tables = {name: table}
    for other, rows in panels.compared_rows(chosen).items():
        b_ref, overhead = panels.study_rule(other)
        tables[other] = panels.analyze(rows, b_ref or 256, overhead if overhead is not None else 0.2)
    left, right = st.columns(2, gap="large")
    left.plotly_chart(compare.comparison_figure(tables, "n", x_title="N (millions of non-embedding parameters, log)"),
                      key="scaling.compare.n", config={"displaylogo": False})
    right.plotly_chart(compare.comparison_figure(tables, "d", x_title="D (training tokens, log)"),
                       key="scaling.compare.d", config={"displaylogo": False})
    st.dataframe(pd.DataFrame(compare.setting_rows(tables)), hide_index=True, width="stretch", placeholder="—",
                 column_config={k: st.column_config.NumberColumn(format="%.3g")
                                for k in ("N (M)", "B*", "B* low", "B* high", "B_noise")})
    laws = compare.law_rows(tables)
    if laws:
        st.dataframe(pd.DataFrame(laws).dropna(axis=1, how="all"), hide_index=True, width="stretch", placeholder="—",
                     column_config={"α (N exponent)": st.column_config.NumberColumn(format="%.3f"),
                                    "β (D exponent)": st.column_config.NumberColumn(format="%.3f")})


with failures.shown_as_message("the Scaling laws page"):
    name = panels.study_picker("scaling")
    kind = study_app_kind(name)
    if kind is not None and kind.scaling is not None:  # the kind's own view (B* per schedule, WSD's E(S) fits)
        kind.scaling(name)
        st.stop()
    rows = panels.study_rows(name)
    b_ref, overhead = panels.fit_controls(rows, name, panels.study_rule(name))
    panels.render_scaling(rows, name, b_ref, overhead)
    panels.render_paper_comparison(panels.analyze(rows, b_ref, overhead))
    gns_panels.render_forecast_vs_measured(name, panels.analyze(rows, b_ref, overhead), b_ref, overhead)
    _compare(name, panels.analyze(rows, b_ref, overhead))
