"""Launch: describe a study, preview what it will run and cost, and start it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from app import auth, failures, local_form, panels, sources, spec_form, units
from app.spec_form import KIND_LABELS
from cbscore.errors import CbsError, ConfigError
from cbscore.recipe import RECIPE_RULES
from cbscore.study import PRESET_NAMES, StudySpec, estimate, load_preset
from cbscore.study.ceilings import check_ceilings
from cbscore.study.decay_spec import SCHEDULE_NAMES
from cbscore.study.kinds import study_kind
from cbscore.study.models import preset_names
from cbscore.study.safe_yaml import MAX_BYTES as MAX_YAML_BYTES
from cbscore.study.spec import GNS_CELLS, KINDS, SCHEDULES
from cbscore.study.spec_parts import CHAIN_CENTRES, REFERENCE_RATES, SEARCH_KINDS

#: What a chained cell below ``search.bracket_min_batch_size`` may start with (``SearchSpec.narrow_rates``).
NARROW_RATES = (3, 2, 1)
K = "launch."  # prefix of this page's session-state keys
#: A spec field's help: its docstring, as `cbs study fields` prints it (app.spec_form.field_help).
H = spec_form.field_help
#: Throughput assumed for the time estimate until the researcher gives theirs (tokens/s per worker).
DEFAULT_TOKENS_PER_S = 20_000


def _values(spec: dict) -> dict:
    """The form's values of a spec dict: the common fields and a local study's."""
    return {**spec_form.form_values(spec), **local_form.local_form_values(spec)}


def _load(spec: dict, source: str) -> None:
    """Fill the form from a spec dict (widgets take their values from session state), and name the
    fill (``source`` and a running number) in the form's "Form filled from" field: a submit that
    carries an older name was sent by a browser still showing the form from before this fill."""
    st.session_state[K + "base"] = spec
    st.session_state[K + "previewed"] = False  # a new spec is previewed when asked
    for key in ("sim.truth", "sim.b_noise"):  # their defaults follow the spec
        st.session_state.pop(K + key, None)
    values = _values(spec)
    st.session_state[K + "saved"] = {**st.session_state.get(K + "saved", {}), **values}
    st.session_state[K + "loaded"] = values
    for field, value in values.items():
        st.session_state[K + field] = value
    fills = st.session_state.get(K + "fills", 0) + 1
    st.session_state[K + "fills"] = fills
    st.session_state[K + "filled_from_now"] = st.session_state[K + "filled_from"] = f"{source} (fill {fills})"
    st.session_state[K + "box_seen"] = st.session_state.get(K + "yaml_text") or ""  # the YAML box as of this fill


def _restore() -> None:
    """Streamlit drops the state of widgets a run did not draw (another page was open): put the
    form's last values back, so that coming back to this page finds the form as it was left."""
    for field, value in st.session_state[K + "saved"].items():
        if K + field not in st.session_state:
            st.session_state[K + field] = value
    if K + "filled_from" not in st.session_state:
        st.session_state[K + "filled_from"] = st.session_state[K + "filled_from_now"]


def _save(fields) -> None:
    st.session_state[K + "saved"] = {f: st.session_state[K + f] for f in fields if K + f in st.session_state}


def _on_preset() -> None:
    _load(load_preset(st.session_state[K + "preset"]).to_dict(), f"preset {st.session_state[K + 'preset']}")
    st.session_state[K + "yaml_error"] = None


def _load_yaml(text: str, source: str = "the pasted YAML") -> bool:
    """Fill the form from YAML text; False (and the message shown above the form) when it is not a
    valid spec."""
    try:
        spec = StudySpec.from_yaml(text).to_dict()
    except CbsError as exc:
        st.session_state[K + "yaml_error"] = failures.explain(exc)
        return False
    _load(spec, source)
    st.session_state[K + "yaml_error"] = None
    return True


def _on_submit(action: str) -> None:
    """Before a Preview or Launch is drawn (a callback runs before the page): what the page launches
    is exactly what it shows, never what a browser sent of an older form.

    - A submit whose "Form filled from" is not the last fill's was sent by a browser that had not
      yet drawn the last fill (Launch clicked while the page was still filling the form from a
      YAML): its values mix two specs. The form is put back to the last fill, and nothing is
      launched until the researcher has seen its plan and clicks Launch again.
    - A Launch while the YAML box holds text it did not hold when the form was last filled (pasted,
      then Launch clicked) validates that text and launches it; a YAML that is not valid launches
      nothing."""
    st.session_state[K + "held"] = None
    st.session_state[K + "pending"] = action  # read once the form is drawn (see below)
    if st.session_state.get(K + "filled_from") != st.session_state[K + "filled_from_now"]:
        for field, value in st.session_state[K + "loaded"].items():
            st.session_state[K + field] = value
        st.session_state[K + "filled_from"] = st.session_state[K + "filled_from_now"]
        st.session_state[K + "held"] = (
            f"Not launched: the browser sent the form before it showed its values from "
            f"{st.session_state[K + 'filled_from_now']}. The plan below is what the form holds now; "
            "check it (its learning rates are named) and click “Launch study” again.")
    text = st.session_state.get(K + "yaml_text") or ""
    if action == "launch" and text.strip() and text != st.session_state.get(K + "box_seen"):
        if not _load_yaml(text):
            st.session_state[K + "held"] = "Not launched: the YAML box holds a spec that is not valid (above)."


#: The preset a switch to each single-setting kind starts from (its models, batch sizes and rates).
KIND_PRESETS = {"local": "local-demo", "schedule": "ablation-schedule"}


def _on_kind() -> None:
    """Switching to a local or a schedule study starts from its preset (``local-demo``,
    ``ablation-schedule``): a grid study's several models mean nothing to one base run, and a
    schedule study measures one setting."""
    kind = st.session_state.get(K + "kind")
    if kind in KIND_PRESETS and st.session_state[K + "base"].get("kind") != kind:
        _load(load_preset(KIND_PRESETS[kind]).to_dict(), f"preset {KIND_PRESETS[kind]}")


def _local_fields() -> None:
    """The base run, its checkpoints and the branches (Merrill et al. 2025, §3)."""
    st.markdown("**Base run and branches** — one model and one D above; the base run trains at B0 and η0 and "
                "keeps a snapshot at each checkpoint t, and from each a branch per k trains Δ tokens at k·B0 "
                "with learning rate f(k)·η0, optimizer state carried over.")
    cols = st.columns(4)
    cols[0].number_input("Base batch B0", key=K + "local.base_batch_size", min_value=1, step=1,
                         help=H("local.base_batch_size"))
    cols[1].number_input("Base learning rate η0", key=K + "local.base_lr", min_value=0.0, format="%.2e",
                         help=H("local.base_lr"))
    cols[2].number_input("Context length T", key=K + "context_tokens", min_value=1, step=16, help=H("context_tokens"))
    cols[3].selectbox("Learning-rate rule f(k)", list(local_form.LR_RULE_LABELS), key=K + "local.lr_rule",
                      format_func=local_form.LR_RULE_LABELS.get, help=H("local.lr_rule"))
    cols = st.columns(4)
    cols[0].number_input("Log-spaced checkpoints", key=K + "local.checkpoint_count", min_value=0, max_value=30,
                         help=H("local.checkpoint_count"))
    cols[1].text_input("Extra checkpoints (tokens)", key=K + "local.checkpoint_tokens",
                       help=H("local.checkpoint_tokens"))
    cols[2].text_input("Multipliers k", key=K + "local.multipliers", help=H("local.multipliers"))
    cols[3].text_input("Early multipliers (below 1)", key=K + "local.early_multipliers",
                       help=H("local.early_multipliers"))
    cols = st.columns(4)
    cols[0].number_input("Checkpoints with early multipliers", key=K + "local.early_checkpoints", min_value=0,
                         max_value=30, help=H("local.early_checkpoints"))
    cols[1].number_input("Window Δ (share of t)", key=K + "local.window_fraction", min_value=0.0, step=0.1,
                         help=H("local.window_fraction"))
    cols[2].number_input("Window Δ (tokens)", key=K + "local.window_tokens", min_value=0, step=1024,
                         help=H("local.window_tokens"))
    cols[3].number_input("Tolerance ε (nats)", key=K + "local.epsilon", min_value=0.0, step=0.005, format="%.3f",
                         help=H("local.epsilon"))


def _chained_fields() -> None:
    """The chained bracket's own fields (:mod:`cbscore.study.chained`), used when the
    search is ``Chained bracket``; their help is the spec fields' own docs."""
    chained = st.session_state.get(K + "search.kind") == "chained"
    with st.expander("Chained bracket (search: chained)", expanded=chained):
        st.caption("The reference cell runs its rates; every other cell, released outward from B_ref in both "
                   "directions once its neighbour settled, runs three rates (fewer below the narrow cells' B) "
                   "centred on the neighbour's best rate moved by (B/B′)^exponent, and extends past an edge only "
                   "where that edge wins.")
        cols = st.columns(5)
        cols[0].number_input("Chain exponent", key=K + "search.chain_exponent", min_value=0.0, max_value=2.0,
                             step=0.05, help=H("search.chain_exponent"))
        cols[1].number_input("Bracket ratio", key=K + "search.bracket_ratio", min_value=1.1, max_value=10.0,
                             step=0.25, help=H("search.bracket_ratio"))
        cols[2].number_input("Extension gain", key=K + "search.extension_gain", min_value=0.0, max_value=1.0,
                             step=0.05, help=H("search.extension_gain"))
        cols[3].number_input("Most extensions per cell", key=K + "search.max_extensions", min_value=0, max_value=8,
                             step=1, help=H("search.max_extensions"))
        cols[4].selectbox("Reference cell's rates", REFERENCE_RATES, key=K + "search.reference_rates",
                          help=H("search.reference_rates"))
        # Cells below a batch size may start narrower than the bracket
        # (bracket_top_cells is the same choice counted from the top, for any grid; give one of the two).
        cols = st.columns([1, 1, 1, 2])
        cols[0].number_input("Narrow cells below B", key=K + "search.bracket_min_batch_size", min_value=0, step=1,
                             help=H("search.bracket_min_batch_size"))
        cols[1].number_input("Bracketed top cells", key=K + "search.bracket_top_cells", min_value=0, step=1,
                             help=H("search.bracket_top_cells"))
        cols[2].selectbox("Rates of a narrow cell", NARROW_RATES, key=K + "search.narrow_rates",
                          help=H("search.narrow_rates"))
        cols[3].checkbox("Replicate the end cells", key=K + "search.replicate_ends", help=H("search.replicate_ends"))
        # How a settled cell centres the next: the simulator's best design on the paper presets is
        # vertex + local exponent + 2 bracketed top cells + 2-rate narrow cells + replicated ends
        # (docs/results/cheaper-search/chained/README.md, "Fresh draws").
        cols = st.columns([1, 1, 3])
        cols[0].selectbox("Centre the next cell on", CHAIN_CENTRES, key=K + "search.chain_centre",
                          help=H("search.chain_centre"))
        cols[1].checkbox("Local exponent", key=K + "search.local_exponent", help=H("search.local_exponent"))


def _decay_fields() -> None:
    """A schedule study's schedules and horizons (:class:`cbscore.study.decay_spec.DecaySpec`)."""
    st.markdown("**Schedules** — every rate and seed of each batch size gets one stable run to the longest "
                "horizon; WSD is read off decay branches from its snapshots, cosine off a family of runs, one "
                "per horizon (docs/schedules.md). The search is the grid of learning rates below.")
    cols = st.columns([2, 1, 1])
    cols[0].multiselect("Schedules measured", SCHEDULE_NAMES, key=K + "decay.schedules", help=H("decay.schedules"))
    cols[1].number_input("WSD decay share", key=K + "decay.decay_fraction", min_value=0.0, max_value=0.5,
                         step=0.05, help=H("decay.decay_fraction"))
    cols[2].number_input("Floor (share of the peak rate)", key=K + "decay.min_lr_ratio", min_value=0.0,
                         max_value=0.99, step=0.05, help=H("decay.min_lr_ratio"))
    cols = st.columns(4)
    cols[0].number_input("Shortest horizon (× D)", key=K + "decay.horizon_low", min_value=0.0, max_value=1.0,
                         step=0.1, help=H("decay.horizon_low"))
    cols[1].number_input("Longest horizon (× D)", key=K + "decay.horizon_high", min_value=1.0, max_value=16.0,
                         step=0.5, help=H("decay.horizon_high"))
    cols[2].number_input("Decay-branch horizon ratio", key=K + "decay.wsd_ratio", min_value=1.0, max_value=4.0,
                         step=0.1, format="%.4g", help=H("decay.wsd_ratio"))
    cols[3].number_input("Cosine horizon ratio", key=K + "decay.cosine_ratio", min_value=1.0, max_value=4.0,
                         step=0.25, help=H("decay.cosine_ratio"))


def _local_preview(spec, est) -> None:
    """What a local study will run: its base runs and every branch, with their windows."""
    rows = local_form.local_rows(spec)
    st.subheader(f"Plan of `{spec.name}`")
    m = st.columns(5)
    m[0].metric("Checkpoints", len({r["from (tokens)"] for r in rows if r["role"] == "branch"}))
    m[1].metric("Trials", est.trials)
    m[2].metric("Tokens", units.count(est.tokens))
    m[3].metric("Compute (FLOPs)", f"{est.flops:.2g}")
    m[4].metric("Time (at most)", units.duration(est.seconds))
    st.markdown(spec_form.rates_line(spec))
    st.caption("A base run per seed first; each branch starts as soon as its base run's snapshot exists. "
               "The snapshots are kept as the study's artifacts until the study is deleted.")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", height=min(420, 38 + 35 * len(rows)),
                 column_config={"lr": st.column_config.NumberColumn(format="%.4g")})


def _decay_lines(spec) -> list[str]:
    """The stable runs, decay branches and cosine runs of a schedule study, with their tokens."""
    from cbscore.study.decay_plan import describe_decay

    return describe_decay(spec, units.count)


@dataclass(frozen=True)
class _KindForm:
    """A kind's own part of the form and the preview."""

    fields: Callable[[], None] | None = None  # its own fields
    replaces_grid: bool = False  # they stand in for the grid's (batch sizes, target, learning-rate search)
    chained: bool = True  # the chained search is offered (a schedule study runs every rate under every schedule)
    preview: Callable | None = None  # its own preview, ``(spec, estimate)``, in place of the grid's
    plan_lines: Callable[[object], list[str]] | None = None  # what it runs, under the grid's preview
    build: Callable[[dict, dict], StudySpec] = spec_form.build_spec  # the spec of ``(base, values)``


#: each kind's own part of the form by the kind's name; the grid kinds have none
_KIND_FORMS = {"local": _KindForm(fields=_local_fields, replaces_grid=True, preview=_local_preview,
                                  build=local_form.build_local_spec),
               "schedule": _KindForm(fields=_decay_fields, chained=False, plan_lines=_decay_lines)}
_GRID_FORM = _KindForm()


def _on_yaml_text() -> None:
    _load_yaml(st.session_state.get(K + "yaml_text") or "")


def _on_yaml_file() -> None:
    upload = st.session_state.get(K + "yaml_file")
    if upload is not None:
        _load_yaml(upload.getvalue().decode("utf-8", errors="replace"), f"the uploaded {upload.name}")


if K + "base" not in st.session_state:
    st.session_state[K + "preset"] = "demo"
    st.session_state[K + "tokens_per_s"] = DEFAULT_TOKENS_PER_S
    _on_preset()
_restore()

st.title("Launch a study")
st.caption(
    "A study measures the steps-to-target **S(B)** of each setting (N, D) at several batch sizes B. "
    "Reference runs at **B_ref** train past D tokens and set each setting's target loss, their fitted loss at D; "
    "every other cell "
    "(setting × B) searches the learning rate and stops at the target (Zhang et al. 2025, §3). "
    "Preview the plan and its cost, then launch."
)

top = st.columns([1, 2], gap="large")
top[0].selectbox("Start from a preset", PRESET_NAMES, key=K + "preset", on_change=_on_preset,
                 help="`demo` runs on a laptop CPU in minutes; the `paper-*` studies are the paper's, for GPUs.")
top[1].file_uploader("Upload a .yaml spec", type=["yaml", "yml", "json"], key=K + "yaml_file",
                     on_change=_on_yaml_file)

kind = st.segmented_control("Study kind", KINDS, key=K + "kind", required=True, on_change=_on_kind,
                            format_func=lambda k: KIND_LABELS[k], help=H("kind"))

with st.form("launch", border=True):
    # The YAML box is part of the form: a Launch sends the text as typed (a box outside the form
    # sends its text only when it loses focus, after the click's own run), so a YAML pasted and
    # launched at once is validated and launched as it is (_on_submit).
    with st.expander("Paste or upload a YAML spec", expanded=bool(st.session_state.get(K + "yaml_text"))):
        st.text_area("YAML spec", key=K + "yaml_text", height=160, placeholder="name: my-study\nkind: custom\n...",
                     max_chars=MAX_YAML_BYTES)
        st.form_submit_button("Load YAML into the form", key=K + "yaml_load", on_click=_on_yaml_text)
    if st.session_state.get(K + "yaml_error"):
        st.error(st.session_state[K + "yaml_error"], icon=":material/error:")
    st.text_input("Study name", key=K + "name", help=H("name"))
    st.markdown("**Settings (N, D)**")
    if kind == "custom":
        st.text_area("Settings (model, tokens)", key=K + "settings", height=110, help=H("settings"))
        st.caption("Models: " + ", ".join(f"`{m}`" for m in preset_names()))
    else:
        cols = st.columns(2)
        cols[0].multiselect("Models", preset_names(), key=K + "models", help=H("models"))
        if kind == "chinchilla":
            cols[1].number_input("Tokens per parameter", key=K + "tokens_per_param", min_value=0.0, step=1.0,
                                 help=H("tokens_per_param"))
        else:
            cols[1].text_input("Token budgets D", key=K + "tokens", help=H("tokens"))

    own = _KIND_FORMS.get(kind, _GRID_FORM)
    if own.fields is not None:
        own.fields()
    if not own.replaces_grid:
        st.markdown("**Batch sizes and the CBS rule**")
        cols = st.columns(4)
        cols[0].text_input("Batch sizes", key=K + "batch_sizes", help=H("batch_sizes"))
        cols[1].number_input("Reference batch size B_ref", key=K + "b_ref", min_value=1, step=1, help=H("b_ref"))
        cols[2].number_input("Context length T", key=K + "context_tokens", min_value=1, step=64,
                             help=H("context_tokens"))
        cols[3].number_input("Overhead r", key=K + "overhead", min_value=0.0, step=0.05, format="%.2f",
                             help=H("overhead"))

        st.markdown("**Target loss**")
        cols = st.columns([1, 2])
        cols[0].radio("Target rule", ["reference", "explicit"], key=K + "target_rule",
                      format_func=lambda r: {"reference": "From reference runs at B_ref (paper)",
                                             "explicit": "Explicit target losses"}[r])
        cols[1].text_area("Target losses", key=K + "target_losses", height=90, help=H("target_losses"))

        st.markdown("**Learning-rate search**")
        cols = st.columns([1, 2, 1, 1, 1])
        cols[0].radio("Search", SEARCH_KINDS, key=K + "search.kind",
                      format_func=lambda s: {"grid": "Grid", "chained": "Chained bracket", "optuna": "Optuna"}[s],
                      help=H("search.kind"))
        cols[1].text_input("Learning rates", key=K + "search.lrs", help=H("search.lrs"))
        cols[2].number_input("Optuna trials per cell", key=K + "search.n_trials", min_value=1, step=1,
                             help=H("search.n_trials"))
        cols[3].number_input("Lowest learning rate", key=K + "search.lr_min", min_value=0.0, format="%.1e",
                             help=H("search.lr_min"))
        cols[4].number_input("Highest learning rate", key=K + "search.lr_max", min_value=0.0, format="%.1e",
                             help=H("search.lr_max"))
        if own.chained:
            _chained_fields()

    st.markdown("**Budget and data**")
    cols = st.columns(6)
    cols[0].number_input("Budget margin", key=K + "budget_margin", min_value=0.0, step=0.05, format="%.2f",
                         help=H("budget_margin"))
    cols[1].number_input("Fallback budget (× D)", key=K + "budget_multiple", min_value=0.0, step=0.5,
                         help=H("budget_multiple"))
    cols[2].number_input("Prune margin", key=K + "prune_margin", min_value=0.0, step=0.05, help=H("prune_margin"))
    cols[3].text_input("Seeds", key=K + "seeds", help=H("seeds"))
    cols[4].number_input("Max trials", key=K + "max_trials", min_value=1, step=100, help=H("max_trials"))
    cols[5].text_input("Data source", key=K + "data.source", help=H("data.source"))

    # search.predict, search.lr_prior and prune_at_equal_tokens failed the simulator's criteria for a default: they live
    # in the spec's `experimental:` block, which the form does not show (a pasted YAML keeps it).
    cols = st.columns(3)
    cols[0].checkbox("Stop far rates", key=K + "stop_far_rates", help=H("stop_far_rates"))

    with st.expander("Recipe (paper defaults)"):
        cols = st.columns(5)
        cols[0].selectbox("Schedule", SCHEDULES, key=K + "schedule", help=H("schedule"))
        cols[1].selectbox("Recipe rule", RECIPE_RULES, key=K + "recipe", help=H("recipe"))
        cols[2].number_input("Warm-up fraction", key=K + "warmup_fraction", min_value=0.0, max_value=0.99, step=0.05,
                             help=H("warmup_fraction"))
        cols[3].text_input("β2", key=K + "beta2", help=H("beta2"))
        cols[4].number_input("Micro-batch size", key=K + "micro_batch_size", min_value=0, step=8,
                             help=H("micro_batch_size"))

    with st.expander("Devices and noise scale"):
        cols = st.columns(3)
        cols[0].number_input("Devices per trial", key=K + "devices_per_trial", min_value=1, step=1,
                             help=H("devices_per_trial"))
        cols[1].number_input("Noise-scale split (sequences)", key=K + "gns_micro_batch_size", min_value=0, step=1,
                             help=H("gns_micro_batch_size"))
        cols[2].selectbox("Noise-scale cells", GNS_CELLS, key=K + "gns_cells", help=H("gns_cells"))

    # Last of the spec's fields (the browser draws the form in order): a submit that carries this
    # fill's name carries every field above as this fill drew it (see _on_submit).
    st.text_input("Form filled from", key=K + "filled_from", disabled=True,
                  help="What the form's values were last loaded from: a preset, a pasted or uploaded YAML. "
                       "Edit the fields above to change them; the Preview shows exactly what Launch starts.")
    cols = st.columns([2, 2, 3])
    tokens_per_s = cols[0].number_input("Throughput per worker (tokens/s)", key=K + "tokens_per_s",
                                        min_value=1, step=1000,
                                        help="For the time estimate only: measured throughput of one worker.")
    force = cols[1].checkbox("Launch anyway", key=K + "force", disabled=not auth.is_admin(auth.current_user()),
                             help="Launch even past the sanity limits: max_trials and max_total_tokens guard against a typo that would run for weeks.")
    buttons = cols[2].columns(2)
    preview = buttons[0].form_submit_button("Preview", icon=":material/visibility:", width="stretch",
                                            on_click=_on_submit, args=("preview",))
    launch = buttons[1].form_submit_button("Launch study", type="primary", icon=":material/rocket_launch:",
                                           width="stretch", on_click=_on_submit, args=("launch",))

_save(("preset", "kind", "tokens_per_s", *_values(st.session_state[K + "base"])))
# The button's own value is True only in the run its click started; a run interrupted by another
# rerun (the YAML box committing its text as the click blurs it) restarts without it, after the
# button's callback has run. The callback's note of the click outlives that restart.
pending = st.session_state.pop(K + "pending", None)
held = st.session_state.get(K + "held") if pending == "launch" else None
preview = preview or pending == "preview" or bool(held)
launch = pending == "launch" and not held


def _forecast_from(spec):
    """With ``forecast_from``: the spec with its batch sizes chosen around that study's calibrated
    noise-scale forecast (``workers.studies.forecast``), said in the Preview; an unknown study is an error."""
    if spec.forecast_from is None:
        return spec
    spec, chosen = sources.apply_forecast_from(spec)
    st.info(f"**forecast_from `{chosen.source}`** — {chosen.describe()}. The Preview below plans these batch "
            "sizes: from B_ref/4 to past 4× the largest calibrated B_noise, where the S(B) fit needs points.",
            icon=":material/insights:")
    return spec


def _recipe_preview(spec) -> None:
    """β2 and the EWA τ of every cell, and a warning where τ averages over much of the run."""
    rows = spec_form.recipe_rows(spec)
    long = sorted({r["setting"] for r in rows if r["τ half-life (share of D)"] > spec_form.LONG_HORIZON_SHARE})
    if long:
        st.warning(f"The middle EWA τ's half-life is over {spec_form.LONG_HORIZON_SHARE:.0%} of D in "
                   f"{', '.join(long)}: the average then reaches back to the first steps and measures something "
                   "else. The `fixed` and `scaled` recipe rules keep the paper's horizons (1.5%–19% of D).",
                   icon=":material/warning:")
    with st.expander(f"Recipe `{spec.recipe}`: β2 and EWA τ per setting and batch size"):
        st.caption("The EWA τ tracked by every trial of a cell (the target crossing uses the best of them) and "
                   "the middle one's half-life, in optimizer steps and as a share of D. At the paper's scale "
                   "its half-life is 1.5% (B = 64) to 19% (B = 16384) of D. \"bounds hit\" names the rule's "
                   "floors and ceilings that set a value (β2 within [0.95, 0.999], its horizon in tokens at "
                   "least that of 0.95 at 8·B_ref; τ's half-life at least 4 steps).")
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", column_config={
            "β2": st.column_config.NumberColumn(format="%.6g"),
            "EWA τ (middle)": st.column_config.NumberColumn(format="%.6g"),
            "τ half-life (steps)": st.column_config.NumberColumn(format="%.3g"),
            "τ half-life (share of D)": st.column_config.NumberColumn(format="percent"),
        })


def _simulate(spec) -> None:
    """Preview → "Simulate this design": the real planner against simulated trials whose truth is
    known (:mod:`cbscore.study.simulate`), to see whether its savings move B*."""
    from cbscore.study.simulate import SimConfig, paper_truth

    result = st.session_state.get(K + "sim.result")
    shown = result is not None and result[0] == spec.to_json()
    with st.expander("Simulate this design", icon=":material/science:", expanded=shown):
        st.caption("Runs the planner on simulated trials whose steps to target follow a known curve "
                   "S(B) = S_min·(1 + B_noise/B), times a learning-rate penalty and log-normal noise σ, and "
                   "reports three B* per setting: the truth's, the full grid's (every learning rate at every "
                   "batch size run to its target) and the study's (the planner's budgets, caps, pruning and "
                   "skips). A design whose study B* strays from the full grid's loses the answer to its savings.")
        options = list(spec_form.TRUTH_LABELS)
        with st.form("launch.simulate", border=False):
            cols = st.columns([3, 2, 1, 1])
            truth = cols[0].radio("Truth", options, index=options.index(spec_form.default_truth(spec)),
                                  key=K + "sim.truth", format_func=spec_form.TRUTH_LABELS.get,
                                  help="The paper's laws: B* of each setting from Zhang et al. 2025 (§4) at its N "
                                       "and D, for the paper's model sizes. A CSV: `setting,s_min,b_noise` rows "
                                       "(or `n_params,tokens` to match settings), or a steps table in the "
                                       "`cbs fit` format, fitted per setting.")
            b_noise = cols[1].number_input(
                "B_noise of every setting (sequences)", key=K + "sim.b_noise", min_value=0.0,
                value=float(4 * spec.b_ref), step=float(spec.b_ref),
                help=f"For “{spec_form.TRUTH_LABELS['b_noise']}”: the truth's B* is (1 + r)·B_ref + r·B_noise "
                     f"= {1 + spec.overhead:g}·{spec.b_ref} + {spec.overhead:g}·B_noise. S_min follows from D: "
                     "each setting's best reference run reaches its target after D tokens.")
            noise = cols[2].number_input("Noise σ", key=K + "sim.noise", min_value=0.0, value=0.1, step=0.05,
                                         help="σ of the log-normal noise on each trial's steps to target.")
            seeds = cols[3].number_input("Simulated studies", key=K + "sim.seeds", min_value=1,
                                         max_value=spec_form.MAX_SIM_SEEDS, value=20, step=1,
                                         help="Independent draws of the noise: B* is given as the median and "
                                              "the 5–95% spread over them.")
            upload = st.file_uploader("Truth CSV", type=["csv"], key=K + "sim.csv",
                                      help=f"For “{spec_form.TRUTH_LABELS['csv']}”.")
            run = st.form_submit_button("Simulate", icon=":material/play_arrow:")
        if run:
            st.session_state.pop(K + "sim.result", None)  # an error below is not shown beside an old result
            shown = False
            with failures.shown_as_message("the simulation"):
                if truth == "paper":
                    curves, how = paper_truth(spec), "the paper's laws"
                elif truth == "b_noise":
                    curves, how = spec_form.uniform_truth(spec, b_noise), f"B_noise = {b_noise:g} in every setting"
                elif upload is None:
                    raise failures.Nothing("Upload a truth CSV to simulate against it.")
                else:
                    curves = spec_form.read_truth_text(upload.getvalue().decode("utf-8-sig", errors="replace"),
                                                       spec, upload.name)
                    how = f"the truth curves of `{upload.name}`"
                max_trials, seconds = spec_form.sim_limits()
                if not auth.is_admin(auth.current_user()):
                    spec_form.check_sim_size(spec, int(seeds), max_trials)
                report, done = panels.simulate_job(spec, curves, SimConfig(noise_sigma=float(noise)), int(seeds),
                                                   seconds=seconds)  # a bounded child process (app/sim_jobs.py)
                if done < int(seeds):
                    st.warning(f"Stopped after {done} of {int(seeds)} simulated studies: the web app simulates for "
                               f"at most {seconds:g} s (CBS_WEB_SIM_SECONDS); `cbs study simulate` on the host has "
                               "no such limit.", icon=":material/timer:")
                result = (spec.to_json(), report.to_json_dict(), how)
                st.session_state[K + "sim.result"] = result
                shown = True
        if shown:
            _, report, how = result
            st.markdown(f"**{report['seeds']} simulated studies** against {how}, noise σ = {report['noise_sigma']:g}")
            st.dataframe(pd.DataFrame(spec_form.simulation_rows(report)), hide_index=True, width="stretch",
                         placeholder="—", column_config={
                             **{c: st.column_config.NumberColumn(format="%.1f")
                                for c in ("B* truth", "B* full grid", "B* study", "study B* 5%", "study B* 95%")},
                             "study vs truth": st.column_config.NumberColumn(format="percent",
                                                                             help="Median over the studies"),
                             "study vs full grid": st.column_config.NumberColumn(format="percent",
                                                                                 help="Median over the studies"),
                         })
            st.caption(spec_form.simulation_summary(report))


def _within_ceilings(spec) -> None:
    """The lab's ceilings (cbscore.study.ceilings), before anything is built per cell or trial:
    past one, a user who is no admin gets its refusal and nothing else; an admin a warning (their
    "Launch anyway" passes it)."""
    try:
        check_ceilings(spec)
    except ConfigError as exc:
        if not auth.is_admin(auth.current_user()):
            raise
        st.warning(f"Past the lab's ceilings: {exc} Tick “Launch anyway” if you mean it.", icon=":material/warning:")


if preview or launch:
    st.session_state[K + "previewed"] = True  # stays open while the simulation below runs
if held:
    st.warning(held, icon=":material/pending:")
if preview or launch or st.session_state.get(K + "previewed"):
    with failures.shown_as_message("the launch form"):
        values = {field: st.session_state[K + field] for field in _values(st.session_state[K + "base"])}
        spec = _KIND_FORMS.get(values["kind"], _GRID_FORM).build(st.session_state[K + "base"], values)
        spec = _forecast_from(spec)
        _within_ceilings(spec)
        try:
            n_workers = max(1, len(sources.alive_workers()))
        except Exception:  # the estimate assumes one worker when none can be counted
            n_workers = 1
        est = estimate(spec, tokens_per_s, n_workers=n_workers)

        own = _KIND_FORMS.get(spec.kind, _GRID_FORM)
        if own.preview is not None:
            own.preview(spec, est)
        else:
            st.subheader(f"Plan of `{spec.name}`")
            m = st.columns(6)
            m[0].metric("Settings", len(est.settings))
            m[1].metric("Cells", est.cells)
            m[2].metric("Trials", est.trials)
            m[3].metric("Tokens (at most)", units.count(est.tokens))
            m[4].metric("Compute (FLOPs)", f"{est.flops:.2g}")
            m[5].metric("Time (at most)", units.duration(est.seconds))
            st.markdown(spec_form.rates_line(spec))
            if spec.search.kind == "chained" and own.chained:  # as `cbs study launch --dry-run` says it
                from cbscore.study.chained import describe_chained

                st.code("\n".join(describe_chained(spec)), language=None)
            if own.plan_lines is not None:  # a schedule study's stable runs, decay branches and cosine runs
                st.code("\n".join(own.plan_lines(spec)), language=None)
            st.caption(f"Upper bounds at full budgets on {n_workers} worker(s) at {tokens_per_s:,.0f} tokens/s each: "
                       "trials stop at their target and pruning stops hopeless ones, so a study spends less.")
            if est.over_limit:
                st.warning(f"This study is past a sanity limit: {est.over_limit}. Tick “Launch anyway” if you mean it.",
                           icon=":material/warning:")
            if study_kind(spec).stops_at_target:  # a schedule study's runs train their horizons (the lines above)
                st.dataframe(pd.DataFrame(spec_form.planned_cells(spec)), hide_index=True, width="stretch",
                             height=min(420, 38 + 35 * est.cells), column_config={
                                 "N": st.column_config.NumberColumn(format="compact"),
                                 "D (tokens)": st.column_config.NumberColumn(format="compact"),
                                 "budget per trial (tokens)": st.column_config.NumberColumn(format="compact"),
                             })
            _recipe_preview(spec)
            with st.expander("The spec as YAML"):
                st.code(spec.to_yaml(), language="yaml")
                st.download_button("Download YAML", spec.to_yaml(), file_name=f"{spec.name}.yaml", mime="application/x-yaml")
            if study_kind(spec).stops_at_target:  # the simulator models steps to target, not decay branches
                _simulate(spec)

        if launch:
            if est.over_limit and not force:
                st.error(f"Not launched: {est.over_limit}. Tick “Launch anyway” to launch it.", icon=":material/block:")
            else:
                user = auth.current_user()
                if est.over_limit:
                    auth.check_force(user)  # only an admin launches past the sanity limits
                name = sources.launch_study(spec, force=force and auth.is_admin(user), owner=user)
                sources.refresh()
                st.session_state["studies.selected"] = name
                st.switch_page("app_pages/studies.py", query_params={"study": name})
