"""Launch: describe a study, preview what it will run and cost, and start it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import failures, sources, spec_form, units
from app.spec_form import KIND_LABELS
from cbscore.errors import CbsError
from cbscore.study import PRESET_NAMES, StudySpec, estimate, load_preset
from cbscore.study.models import preset_names
from cbscore.study.spec import KINDS, SCHEDULES

K = "launch."  # prefix of this page's session-state keys
#: Throughput assumed for the time estimate until the researcher gives theirs (tokens/s per worker).
DEFAULT_TOKENS_PER_S = 20_000


def _load(spec: dict) -> None:
    """Fill the form from a spec dict (widgets take their values from session state)."""
    st.session_state[K + "base"] = spec
    values = spec_form.form_values(spec)
    st.session_state[K + "saved"] = {**st.session_state.get(K + "saved", {}), **values}
    for field, value in values.items():
        st.session_state[K + field] = value


def _restore() -> None:
    """Streamlit drops the state of widgets a run did not draw (another page was open): put the
    form's last values back, so that coming back to this page finds the form as it was left."""
    for field, value in st.session_state[K + "saved"].items():
        if K + field not in st.session_state:
            st.session_state[K + field] = value


def _save(fields) -> None:
    st.session_state[K + "saved"] = {f: st.session_state[K + f] for f in fields if K + f in st.session_state}


def _on_preset() -> None:
    _load(load_preset(st.session_state[K + "preset"]).to_dict())
    st.session_state[K + "yaml_error"] = None


def _load_yaml(text: str) -> None:
    try:
        _load(StudySpec.from_yaml(text).to_dict())
        st.session_state[K + "yaml_error"] = None
    except CbsError as exc:
        st.session_state[K + "yaml_error"] = failures.explain(exc)


def _on_yaml_text() -> None:
    _load_yaml(st.session_state.get(K + "yaml_text") or "")


def _on_yaml_file() -> None:
    upload = st.session_state.get(K + "yaml_file")
    if upload is not None:
        _load_yaml(upload.getvalue().decode("utf-8", errors="replace"))


if K + "base" not in st.session_state:
    st.session_state[K + "preset"] = "demo"
    st.session_state[K + "tokens_per_s"] = DEFAULT_TOKENS_PER_S
    _on_preset()
_restore()

st.title("Launch a study")
st.caption(
    "A study measures the steps-to-target **S(B)** of each setting (N, D) at several batch sizes B. "
    "Reference runs at **B_ref** train for D tokens and set each setting's target loss; every other cell "
    "(setting × B) searches the learning rate and stops at the target (Zhang et al. 2025, §3). "
    "Preview the plan and its cost, then launch."
)

top = st.columns([1, 2], gap="large")
top[0].selectbox("Start from a preset", PRESET_NAMES, key=K + "preset", on_change=_on_preset,
                 help="`demo` runs on a laptop CPU in minutes; the `paper-*` studies are the paper's, for GPUs.")
with top[1].expander("Paste or upload a YAML spec"):
    st.text_area("YAML spec", key=K + "yaml_text", height=160, placeholder="name: my-study\nkind: custom\n...")
    st.button("Load YAML into the form", key=K + "yaml_load", on_click=_on_yaml_text)
    st.file_uploader("…or upload a .yaml file", type=["yaml", "yml", "json"], key=K + "yaml_file",
                     on_change=_on_yaml_file)
if st.session_state.get(K + "yaml_error"):
    st.error(st.session_state[K + "yaml_error"], icon=":material/error:")

kind = st.segmented_control("Study kind", KINDS, key=K + "kind", required=True,
                            format_func=lambda k: KIND_LABELS[k])

with st.form("launch", border=True):
    st.text_input("Study name", key=K + "name", help="Letters, digits, '-' and '_'; one MLflow experiment per study.")
    st.markdown("**Settings (N, D)**")
    if kind == "custom":
        st.text_area("Settings (model, tokens)", key=K + "settings", height=110,
                     help="One setting per line: a model preset and its token budget D, e.g. `tiny-0.1M, 1M`.")
        st.caption("Models: " + ", ".join(f"`{m}`" for m in preset_names()))
    else:
        cols = st.columns(2)
        cols[0].multiselect("Models", preset_names(), key=K + "models",
                            help="Model presets: N = 12·L·d² non-embedding parameters.")
        if kind == "chinchilla":
            cols[1].number_input("Tokens per parameter", key=K + "tokens_per_param", min_value=0.0, step=1.0,
                                 help="D = this × N (the paper's Chinchilla ratio is 20).")
        else:
            cols[1].text_input("Token budgets D", key=K + "tokens",
                               help="Comma-separated token counts, e.g. `1M, 2M, 1.741B`.")

    st.markdown("**Batch sizes and the CBS rule**")
    cols = st.columns(4)
    cols[0].text_input("Batch sizes", key=K + "batch_sizes", help="In sequences of T tokens, e.g. `64, 128, 256`.")
    cols[1].number_input("Reference batch size B_ref", key=K + "b_ref", min_value=1, step=1,
                         help="Reference runs at B_ref set each setting's target; must be one of the batch sizes.")
    cols[2].number_input("Context length T", key=K + "context_tokens", min_value=1, step=64,
                         help="Tokens per sequence (the paper: 512).")
    cols[3].number_input("Overhead r", key=K + "overhead", min_value=0.0, step=0.05, format="%.2f",
                         help="B* is the largest B with S(B) ≤ (1 + r)·S(B_ref)·B_ref/B (the paper: 0.2).")

    st.markdown("**Target loss**")
    cols = st.columns([1, 2])
    cols[0].radio("Target rule", ["reference", "explicit"], key=K + "target_rule",
                  format_func=lambda r: {"reference": "From reference runs at B_ref (paper)",
                                         "explicit": "Explicit target losses"}[r])
    cols[1].text_area("Target losses", key=K + "target_losses", height=90,
                      help="Only for explicit targets: one `setting_id: loss` per line (held-out loss, nats/token).")

    st.markdown("**Learning-rate search**")
    cols = st.columns([1, 2, 1, 1, 1])
    cols[0].radio("Search", ["grid", "optuna"], key=K + "search.kind",
                  format_func=lambda s: {"grid": "Grid", "optuna": "Optuna"}[s])
    cols[1].text_input("Learning rates", key=K + "search.lrs",
                       help="Grid: every learning rate per cell (the paper: 1e-3, 3.16e-3, 6.32e-3, 1e-2, 3.16e-2).")
    cols[2].number_input("Optuna trials per cell", key=K + "search.n_trials", min_value=1, step=1)
    cols[3].number_input("Lowest learning rate", key=K + "search.lr_min", min_value=0.0, format="%.1e")
    cols[4].number_input("Highest learning rate", key=K + "search.lr_max", min_value=0.0, format="%.1e")

    st.markdown("**Budget and data**")
    cols = st.columns(5)
    cols[0].number_input("Trial budget (× D)", key=K + "budget_multiple", min_value=0.0, step=0.5,
                         help="Tokens a non-reference trial may spend before it is censored, as a multiple of D.")
    cols[1].number_input("Prune margin", key=K + "prune_margin", min_value=0.0, step=0.05,
                         help="A trial still above the target at (1 + margin)·S_best steps is pruned.")
    cols[2].text_input("Seeds", key=K + "seeds", help="Training seeds; each is one more trial per learning rate.")
    cols[3].number_input("Max trials", key=K + "max_trials", min_value=1, step=100,
                         help="Sanity limit; a larger study needs 'Launch anyway'.")
    cols[4].text_input("Data source", key=K + "data.source",
                       help="`builtin` (the shipped corpus), a local path, or `hub:NAME` for a Hugging Face dataset.")

    with st.expander("Recipe (paper defaults)"):
        cols = st.columns(4)
        cols[0].selectbox("Schedule", SCHEDULES, key=K + "schedule",
                          help="After a linear warm-up fixed in tokens; the paper uses a constant rate.")
        cols[1].number_input("Warm-up fraction", key=K + "warmup_fraction", min_value=0.0, max_value=0.99, step=0.05,
                             help="Warm-up length as a fraction of D (the paper: 0.25).")
        cols[2].text_input("β2", key=K + "beta2", help="Empty = the paper's per-batch-size table (.999 … .95).")
        cols[3].number_input("Micro-batch size", key=K + "micro_batch_size", min_value=0, step=8,
                             help="Sequences per forward pass (gradient accumulation); 0 = the whole batch.")

    cols = st.columns([2, 2, 3])
    tokens_per_s = cols[0].number_input("Throughput per worker (tokens/s)", key=K + "tokens_per_s",
                                        min_value=1, step=1000,
                                        help="For the time estimate only: measured throughput of one worker.")
    force = cols[1].checkbox("Launch anyway", key=K + "force",
                             help="Launch even past the sanity limits: max_trials and max_total_tokens guard against a typo that would run for weeks.")
    buttons = cols[2].columns(2)
    preview = buttons[0].form_submit_button("Preview", icon=":material/visibility:", width="stretch")
    launch = buttons[1].form_submit_button("Launch study", type="primary", icon=":material/rocket_launch:",
                                           width="stretch")

_save(("preset", "kind", "tokens_per_s", *spec_form.form_values(st.session_state[K + "base"])))

if preview or launch:
    with failures.shown_as_message("the launch form"):
        values = {field: st.session_state[K + field] for field in spec_form.form_values(st.session_state[K + "base"])}
        spec = spec_form.build_spec(st.session_state[K + "base"], values)
        try:
            n_workers = max(1, len(sources.alive_workers()))
        except Exception:  # the estimate assumes one worker when none can be counted
            n_workers = 1
        est = estimate(spec, tokens_per_s, n_workers=n_workers)

        st.subheader(f"Plan of `{spec.name}`")
        m = st.columns(6)
        m[0].metric("Settings", len(est.settings))
        m[1].metric("Cells", est.cells)
        m[2].metric("Trials", est.trials)
        m[3].metric("Tokens (at most)", units.count(est.tokens))
        m[4].metric("Compute (FLOPs)", f"{est.flops:.2g}")
        m[5].metric("Time (at most)", units.duration(est.seconds))
        st.caption(f"Upper bounds at full budgets on {n_workers} worker(s) at {tokens_per_s:,.0f} tokens/s each: "
                   "trials stop at their target and pruning stops hopeless ones, so a study spends less.")
        if est.over_limit:
            st.warning(f"This study is past a sanity limit: {est.over_limit}. Tick “Launch anyway” if you mean it.",
                       icon=":material/warning:")
        st.dataframe(pd.DataFrame(spec_form.planned_cells(spec)), hide_index=True, width="stretch",
                     height=min(420, 38 + 35 * est.cells), column_config={
                         "N": st.column_config.NumberColumn(format="compact"),
                         "D (tokens)": st.column_config.NumberColumn(format="compact"),
                         "budget per trial (tokens)": st.column_config.NumberColumn(format="compact"),
                     })
        with st.expander("The spec as YAML"):
            st.code(spec.to_yaml(), language="yaml")
            st.download_button("Download YAML", spec.to_yaml(), file_name=f"{spec.name}.yaml", mime="application/x-yaml")

        if launch:
            if est.over_limit and not force:
                st.error(f"Not launched: {est.over_limit}. Tick “Launch anyway” to launch it.", icon=":material/block:")
            else:
                name = sources.call("launch_study", spec, force=force)
                sources.refresh()
                st.session_state["studies.selected"] = name
                st.switch_page("app_pages/studies.py", query_params={"study": name})
