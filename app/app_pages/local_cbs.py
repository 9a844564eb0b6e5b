"""Local CBS: the critical batch size during one run, from branches at its checkpoints."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import auth, failures, local_charts, sources
from app.kinds import has_local_cbs

st.title("Local CBS")
st.caption(
    "How large may the batch be **now**, at this point of a run? A *local* study (Merrill, Arora, Groeneveld & "
    "Hajishirzi 2025, arXiv 2505.23971) trains one base run at batch B0 and learning rate η0, keeps a snapshot at "
    "each checkpoint t, and from each trains *branches* for Δ tokens at k·B0 with learning rate f(k)·η0 "
    "(f(k) = √k for Adam, Malladi et al. 2022), optimizer state and averages carried over, the data stream "
    "continued at the same token. The local CBS at t is k*·B0."
)
with st.expander("The two rules, and what ε decides"):
    st.markdown(
        "- **Merrill's rule**: k* is the largest k whose *smoothed training loss after Δ* (the mean of the "
        "branch's last logged losses) is within **ε** of the loss of *every* smaller k. One ε for every pair "
        "and every checkpoint.\n"
        "- **The noise-aware rule** (the lab's): the *held-out EWA loss at the window's end*, and each pair's "
        "tolerance max(ε, z·SE) with the standard error of the difference from the seeds (paired by base run) "
        "or, with one seed, from each branch's spread over its window's end. A larger batch fails only when it "
        "is worse beyond the noise. Read it as a diagnostic, not a schedule: simulated on the CPU run's "
        "measured noise, it decides in 23% of readouts with three seeds (73% at twice the noise), and where it "
        "does it is farther from the local CBS than Merrill's rule (docs/results/local-cbs/rule-noise/).\n"
        "- **What ε decides**: ε is a choice, not a measurement. Each readout is recomputed with the tolerance "
        "halved and doubled; where k* moves, the table says *ε decides*: the answer rests on the tolerance, "
        "not on the data. The true local CBS lies in the bracket [k*·B0, k_next·B0); at the top of the grid "
        "(a triangle) it is a lower bound only.\n"
        "- **The curve**: a power law B*(t) = a·t^b fitted on log axes over the checkpoints, and the warm-up "
        "it recommends: double the batch where the curve passes twice the current one, the learning rate ×√2 "
        "each time; its steps are counted exactly against B0 throughout (Merrill et al.: 43% fewer for OLMo 1B)."
    )

def _schedule(name: str, fit) -> None:  # fit: api.LocalStudyReadout
    """The warm-up run against its controls: the button that launches them (disabled, with the
    reason, until the curve is fitted), then their readout (Merrill et al. 2025, Table 1)."""
    from workers.query.api import warmup_blocker

    st.subheader("The warm-up against its controls")
    if fit.arms is None:
        blocker = warmup_blocker(fit)
        st.caption("Train the schedule above as a run, per seed, beside a **small-batch control** (B0, η0 throughout) "
                   "and a **large-batch control** (the warm-up's final batch and rate throughout), all three on the "
                   "same tokens, as trials of this study.")
        clicked = st.button("Launch the schedule", type="primary", key="local.launch_schedule",
                            disabled=blocker is not None, help=blocker)
        if blocker is not None:
            st.caption(f"Not yet: {blocker}")
        if clicked and _may_change(name):
            with failures.shown_as_message("launching the schedule"):
                _, changes = sources.launch_local_warmup(name, author=auth.current_user())
                sources.refresh()
                st.success("Launched: " + "; ".join(changes))
        return
    arms = fit.arms
    st.caption(f"At {arms.total_tokens:,} tokens each; the interval is mean ± t·SE over the seeds with three or "
               "more, their range with two. Matched: the warm-up's loss less the small-batch control's, paired by "
               f"seed, is within max(ε, z·SE) (ε = {arms.epsilon:g} nats).")
    st.dataframe(pd.DataFrame(local_charts.arms_rows(fit)), hide_index=True, width="stretch", placeholder="—")
    if arms.verdict:
        matched = arms.comparison.matched and arms.comparison.fewer_steps
        (st.success if matched else st.warning)(arms.verdict)
    else:
        st.caption("The arms are still training: the comparison appears once the warm-up and the small-batch control "
                   "have finished for a seed.")


def _may_change(name: str) -> bool:
    """Only the study's owner or an admin may add trials to it (app/auth.py)."""
    try:
        auth.check_change(auth.current_user(), sources.study_owner(name), f"launch the schedule of {name}")
    except auth.NotAllowed as exc:
        st.error(str(exc), icon=":material/block:")
        return False
    return True


with failures.shown_as_message("the Local CBS page"):
    names = [s.name for s in sources.studies() if has_local_cbs(s.kind)]
    if not names:
        raise failures.Nothing("No local study yet — launch one on the Launch page (kind **Local CBS**; its "
                               "embedded defaults run on a laptop CPU in a few minutes).")
    wanted = st.query_params.get("study") or st.session_state.get("studies.selected")
    name = st.selectbox("Local study", names, index=names.index(wanted) if wanted in names else 0, key="local.study")
    fit = sources.local_fit(name)
    ended = sum(1 for c in fit.checkpoints if c.merrill is not None)
    st.markdown(f"**{fit.model}**, D = {fit.total_tokens:,} tokens, T = {fit.context_tokens}, "
                f"B0 = {fit.base_batch_size}, η0 = {fit.base_lr:g}, f(k) = "
                f"{'√k' if fit.lr_rule == 'sqrt' else 'k'}, ε = {fit.epsilon:g} nats — "
                f"a local CBS at {ended} of {len(fit.checkpoints)} checkpoints so far.")
    st.caption(f"Window: {fit.window_label}; held-out loss {fit.averaging_label}, and on the raw weights.")
    # The global CBS of other studies of the same model and data, for comparison (at their D).
    others = {s.name: sources.spec(s.name) for s in sources.studies() if not has_local_cbs(s.kind)}
    wanted = local_charts.comparable_settings(sources.spec(name), others)
    fits = {}
    for study in sorted({study for study, _ in wanted}):
        try:
            fits[study] = sources.study_fit(study)
        except Exception as exc:  # noqa: BLE001 - a study that cannot be fitted yet is left out, and said so
            st.caption(f"`{study}` is not drawn: its fit failed ({type(exc).__name__}: {exc}).")
    st.plotly_chart(local_charts.local_cbs_figure(fit, global_cbs=local_charts.global_points(fits, wanted)),
                    key="local.figure")
    summary = local_charts.warmup_summary(fit)
    if summary:
        st.info(f"**Warm-up (Merrill's curve)** — {summary}", icon=":material/trending_up:")
    st.dataframe(pd.DataFrame(local_charts.readout_rows(fit)), hide_index=True, width="stretch", placeholder="—")
    for note in fit.notes:
        st.caption(f"Note: {note}")
    read = [c for c in fit.checkpoints if c.multipliers]
    if read:
        labels = [f"t = {c.tokens:,}" for c in read]
        chosen = st.selectbox("Branches at checkpoint", labels, key="local.checkpoint")
        st.plotly_chart(local_charts.branch_loss_figure(read[labels.index(chosen)], epsilon=fit.epsilon),
                        key="local.branches")
    _schedule(name, fit)
