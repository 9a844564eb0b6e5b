"""Import: the same curves and scaling laws for a steps table that was not run here."""

from __future__ import annotations

import io
from pathlib import Path

import streamlit as st

from app import failures, panels
from cbscore.analysis import StepsRow, check_csv_bounds, check_csv_rows, read_steps_csv

EXAMPLE = """setting,batch_size,steps,n_params,tokens,outcome
85M,64,20480,84934656,1741000000,reached
85M,128,10650,84934656,1741000000,reached
85M,256,5780,84934656,1741000000,reached
85M,512,3350,84934656,1741000000,reached
85M,1024,2150,84934656,1741000000,reached
"""

st.title("Import a steps table")
st.caption(
    "Upload a CSV in the `cbs fit` format to draw the same curves and scaling laws for data that was not run "
    "here — a published steps table, or a study from another machine. One row per trial: `setting`, "
    "`batch_size` (sequences), `steps` (to the target), and optionally `n_params`, `tokens`, `context` and "
    "`outcome` (`reached`, `censored`, `diverged`, ...) and `lr`. S(B) is read off a fit across the learning rates "
    "of a setting's trials at B, or is their minimum where the rows give no `lr`."
)

upload = st.file_uploader("Steps table (CSV)", type=["csv"], key="import.file")
if upload is None:
    st.info("Upload a CSV to begin. The first lines of one look like this:", icon=":material/upload_file:")
    st.code(EXAMPLE, language="text")
else:
    with failures.shown_as_message("the Import page"):
        raw = upload.getvalue().decode("utf-8-sig", errors="replace")
        check_csv_bounds(raw, upload.name)  # bytes and columns, before any parsing
        check_csv_rows(raw, upload.name)  # rows, before any parsing: a refusal costs milliseconds
        text = io.StringIO(raw)
        text.name = upload.name
        read = read_steps_csv(text)
        rows = [StepsRow.from_mapping(r, f"{upload.name} row {i}") for i, r in enumerate(read, start=1)]
        source = "import-" + Path(upload.name).stem
        n_settings = len({r.setting for r in rows})
        st.success(f"Read {len(rows)} trials of {n_settings} setting(s) from `{upload.name}`.",
                   icon=":material/check_circle:")
        b_ref, overhead = panels.fit_controls(rows, source)
        curves, scaling = st.tabs(["Curves", "Scaling laws"])
        with curves:
            panels.render_curves(rows, source, b_ref, overhead, as_read=read)
        with scaling:
            panels.render_scaling(rows, source, b_ref, overhead)
            panels.render_paper_comparison(panels.analyze(rows, b_ref, overhead))
