"""Studies: every study's progress, a study's cells and running trials live, the workers."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from app import auth, charts, failures, gns_panels, panels, sources, study_view, units
from cbscore.study.costs import format_pruned

#: Seconds between refreshes of the selected study (its records are read again each time).
REFRESH_S = sources.LIVE_TTL_S
#: Seconds between refreshes of the studies list (a query over every study's runs).
LIST_REFRESH_S = sources.SLOW_TTL_S
#: Running trials drawn at once (the rest are listed).
MAX_LIVE_TRIALS = 6

st.title("Studies")
st.caption(
    "Every study and its progress. For the selected study, each cell (setting × batch size B) is coloured by "
    "the state of its trials, and each running trial shows the held-out loss of its averaged (EWA) weights "
    "against tokens, with the setting's target loss: the first step at or below it is the trial's steps-to-target. "
    "A *skipped* cell never runs: a smaller batch size already spent its whole token budget without reaching the "
    "target, and tokens to target only grow with B."
)


@st.fragment(run_every=LIST_REFRESH_S)
def overview() -> None:
    with failures.shown_as_message("the studies list"):
        summaries = sources.studies()
        if not summaries:
            raise failures.Nothing("No studies yet — launch one on the Launch page.")
        st.dataframe(pd.DataFrame(study_view.summary_rows(summaries)), hide_index=True, width="stretch",
                     column_config={
                         "progress": st.column_config.ProgressColumn("trials ended", format="percent",
                                                                     min_value=0.0, max_value=1.0),
                         "tokens spent": st.column_config.NumberColumn(format="compact"),
                     })


@st.fragment(run_every=REFRESH_S)
def live(name: str) -> None:
    with failures.shown_as_message(f"study {name}"):
        spec = sources.spec(name)
        records = sources.records(name)
        view = study_view.study_view(spec, records)
        summary = panels.study_summary(name)

        cols = st.columns([1.2, 1, 1, 1, 1])
        cols[0].metric("Status", summary.status if summary else "—")
        cols[1].metric("Trials ended", f"{view.ended} / {view.planned}")
        cols[2].metric("Running", view.counts.get("running", 0))
        cols[3].metric("Reached target", view.counts.get("reached", 0))
        share = f"{view.tokens_spent / view.grid_tokens:.0%} of the grid" if view.grid_tokens else None
        cols[4].metric("Tokens spent", units.count(view.tokens_spent), delta=share, delta_color="off",
                       delta_arrow="off",
                       help=f"The same grid at fixed budgets (every trial to its whole budget) would spend "
                            f"{units.count(view.grid_tokens)} tokens; stopping at the target, pruning, step caps "
                            "and skipped cells save the rest.")
        if view.costs is not None and view.costs.oracle_tokens:
            c = view.costs
            at = "" if c.stop_at_target_exact else "≥ "
            st.caption(
                f"Cost: {units.count(c.spent_tokens)} tokens spent · fixed-budget grid "
                f"{units.count(c.fixed_budget_grid_tokens)} · grid stopped at the target {at}"
                f"{units.count(c.stop_at_target_grid_tokens)} · oracle {units.count(c.oracle_tokens)} "
                f"(each cell's best trial to its target, D per seed at B_ref) · **study/oracle "
                f"{c.ratio_to_oracle:.2f}×**"
                + (f" · {format_pruned(c.pruned_tokens_by_rule, c.spent_tokens, units.count)}"
                   if c.pruned_tokens_by_rule else ""),
                help="The oracle is what a study would spend if it knew each cell's best learning rate in "
                     "advance; 1× is the floor. '≥' marks a grid figure in which trials stopped before the "
                     "target count what they trained. docs/user-guide.md, \"What a study costs\", explains the "
                     "rules that lower the ratio (search.kind chained, search.order, stop_far_rates; the "
                     "experimental block's predict and prune_at_equal_tokens) and the fit-window floor no rule that reads every crossing "
                     "goes below (3.4-3.5x on the paper presets). 'Pruned trials' splits what stopped "
                     "trials trained by the rule that stopped them (prune_margin, stop_far_rates, ...).")
        st.progress(view.progress, text=f"{view.progress:.0%} of the planned trials have an outcome")
        for error in view.errors:
            st.warning(error, icon=":material/warning:")
        for notice in study_view.waiting_notices(records):  # faults of a host: no attempt is lost
            st.error(notice, icon=":material/hard_drive:")

        st.plotly_chart(charts.cell_grid_figure(view.settings, view.batch_sizes, view.states, view.hover),
                        key="studies.grid", config={"displayModeBar": False})
        if view.targets:
            st.caption("Targets (held-out loss): " + " · ".join(f"`{k}` {v:.4f}" for k, v in view.targets.items()))

        running = [r for r in records if r.status == "running"]
        st.subheader(f"Running trials ({len(running)})")
        if not running:
            st.caption("No trial is running right now." + (" The study is done." if view.progress >= 1 else ""))
        links = sources.run_links(summary.experiment_id, [r.run_id for r in running]) if summary else {}
        grid = st.columns(min(3, max(1, len(running))))
        for i, record in enumerate(running[:MAX_LIVE_TRIALS]):
            with grid[i % len(grid)].container(border=True):
                _running_trial(spec, record, view.targets.get(record.setting_id), links.get(record.run_id))
        if len(running) > MAX_LIVE_TRIALS:
            st.caption(f"… and {len(running) - MAX_LIVE_TRIALS} more running trials.")

        st.subheader("Workers")
        workers = sources.alive_workers()
        if not workers:
            st.info("No worker answers — start one with `cbs worker` (or everything with `cbs up`).",
                    icon=":material/memory:")
        else:
            now = time.time()
            st.dataframe(pd.DataFrame([{
                "worker": w.hostname, "device": w.device, "queue": w.queue, "concurrency": w.concurrency,
                "running": ", ".join(w.current_trials) or "idle",
                "heartbeat": f"{now - w.heartbeat_s:.0f} s ago",
            } for w in workers]), hide_index=True, width="stretch")


def _running_trial(spec, record, target: float | None, link: str | None) -> None:
    curve = sources.curve(record.run_id) if record.run_id else {}
    rate = study_view.last_value(curve, "perf/tokens_per_s")
    budget = study_view.trial_budget_tokens(spec, record)
    eta = study_view.eta_s(budget, record.tokens, rate)
    st.markdown(f"**{record.setting_id} · B = {record.batch_size}** · lr {record.lr:.3g}"
                + (f" · [run in MLflow]({link})" if link else ""))
    speed = study_view.throughput_text(curve, spec.devices_per_trial)
    st.caption(f"step {record.last_step:,} · {units.count(record.tokens)} tokens · {speed} · "
               f"ETA ≤ {units.duration(eta)}", help="Throughput of all the trial's devices, per device where it "
               "runs on several (DDP), and MFU: model FLOPs (6·(N + d·V) + 12·L·d·T per token, the LM head and "
               "attention included) over the exact device's dense bf16 peak; n/a on a CPU or an unknown GPU. "
               "ETA: time to spend the trial's budget at its current throughput; it stops earlier when it "
               "reaches the target.")
    st.plotly_chart(charts.loss_curve_figure([study_view.loss_curve(record, spec.context_tokens, curve)],
                                             target_loss=target, height=260),
                    key=f"studies.curve.{record.trial_id}", config={"displayModeBar": False})
    gns_panels.noise_scale_chart(record, spec.context_tokens, curve)
    if (st.button("Cancel this trial", key=f"studies.cancel.{record.trial_id}", icon=":material/stop_circle:")
            and _may_cancel(spec.name, f"trial {record.trial_id}")):
        sources.cancel_trial(record.trial_id)
        sources.refresh()
        st.toast(f"Stopping {record.trial_id}", icon=":material/stop_circle:")


def trials_table(name: str) -> None:
    """Every trial of the study with its outcome and a link to its MLflow run."""
    records = sources.records(name)
    summary = panels.study_summary(name)
    links = sources.run_links(summary.experiment_id, [r.run_id for r in records]) if summary else {}
    with st.expander(f"All trials ({len(records)})", icon=":material/table_rows:"):
        st.dataframe(pd.DataFrame(study_view.trial_rows(records, links)), hide_index=True, width="stretch",
                     placeholder="—", column_config={
                         "run": st.column_config.LinkColumn("run", display_text="open in MLflow"),
                         "S (steps)": st.column_config.NumberColumn(format="%.1f"),
                         "final loss": st.column_config.NumberColumn(format="%.4f"),
                         "tokens": st.column_config.NumberColumn(format="compact"),
                     })
        if not links:
            st.caption("Run links appear when the MLflow UI answers (`cbs tracking`).")


def loss_curves(name: str) -> None:
    """Held-out loss against tokens of any set of trials, overlaid: pick a setting, batch
    sizes and outcomes; up to study_view.MAX_OVERLAY trials at once."""
    import dataclasses

    records = sources.records(name)
    if not records:
        return
    spec = sources.spec(name)
    with st.expander("Loss curves of many trials", icon=":material/stacked_line_chart:"):
        settings = sorted({r.setting_id for r in records})
        cols = st.columns([2, 2, 2])
        setting = cols[0].selectbox("Setting", ["every setting", *settings], key="studies.overlay.setting")
        sizes = cols[1].multiselect("Batch sizes", sorted({r.batch_size for r in records}),
                                    key="studies.overlay.sizes", help="Empty: every batch size.")
        outcomes = cols[2].multiselect("Outcomes", sorted({r.status for r in records}), key="studies.overlay.outcomes",
                                       help="Empty: any outcome, running trials included.")
        one = setting != "every setting"
        chosen = study_view.overlay_records(records, setting=setting if one else None, batch_sizes=sizes,
                                            outcomes=outcomes)
        st.caption(f"{len(chosen)} trial(s): held-out loss of the averaged weights against training tokens"
                   + (f" (the first {study_view.MAX_OVERLAY})" if len(chosen) == study_view.MAX_OVERLAY else "")
                   + ("; dashed: the setting's target." if one else "."))
        curves = []
        stored = sources.eval_curves(name) if any(not r.eval_steps for r in chosen) else {}
        for r in chosen:
            curve = study_view.loss_curve(r, spec.context_tokens,
                                          None if r.eval_steps else {"eval/loss_ewa": stored.get(r.trial_id, ((), ()))})
            curves.append(dataclasses.replace(curve, label=study_view.overlay_label(r, one)))
        target = None
        if one:  # the planner's own target of the setting (pure, from the records in hand)
            from cbscore.study.targets import setting_targets

            target = setting_targets(spec, records)[0].get(setting)
        st.plotly_chart(charts.loss_curve_figure(curves, target_loss=target, height=460),
                        key="studies.overlay.chart", config={"displaylogo": False})


def _may_cancel(study: str, what: str) -> bool:
    """Only the study's owner (read afresh from MLflow) or an admin may cancel it (app/auth.py);
    anyone else is told who may, where they clicked."""
    return _allowed(auth.check_cancel, study, what)


def _may_change(study: str, what: str) -> bool:
    """Only the study's owner or an admin may extend it or run its trials again (app/auth.py)."""
    return _allowed(auth.check_change, study, what)


def _allowed(check, study: str, what: str) -> bool:
    try:
        check(auth.current_user(), sources.study_owner(study), what)
    except auth.NotAllowed as exc:
        st.error(str(exc), icon=":material/block:")
        return False
    return True


def _grow(name: str) -> None:
    """Extend the study by a patch, or run its failed trials and censored cells again."""
    import yaml

    from cbscore.study.extend import EXTENSIBLE

    spec = sources.study_spec(name)
    current = {k: v for k, v in spec.to_dict().items() if k in ("batch_sizes", "seeds")}
    if spec.search.kind == "grid":  # not runs_rates: an extension adds rates to a grid only (cbscore.study.extend)
        current["search"] = {"lrs": list(spec.search.lrs)}
    st.markdown(f"**Extend {name}**: change the fields below (a spec's fields; an extension may change "
                f"{', '.join(f'`{k}`' for k in EXTENSIBLE)}). Every trial already run keeps its result; only the new "
                "cells and trials run, and every target found so far is kept.")
    patch = st.text_area("Patch (YAML)", value=yaml.safe_dump(current, sort_keys=False), height=120,
                         key=f"studies.extend.{name}")
    if st.button("Extend the study", type="primary", key="studies.extend_go") and \
            _may_change(name, f"extend the study {name}"):
        with failures.shown_as_message("extending the study"):
            _, changes = sources.extend_study(name, patch, author=auth.current_user())
            sources.refresh()
            st.success("Extended: " + "; ".join(changes))
    st.divider()
    st.markdown("**Run again** what did not end well: failed trials as new trials, and censored cells (nothing "
                "reached the target) at a larger cap. The old runs stay as they ended.")
    cols = st.columns(2)
    factor = cols[1].number_input("Cap ×", min_value=1.25, max_value=16.0, value=2.0, step=0.25,
                                  key="studies.retry_factor", help="The censored cells' new cap and budget as a "
                                                                   "multiple of the old.")
    failed = cols[0].button("Retry failed trials", key="studies.retry_failed")
    censored = cols[0].button("Retry censored cells", key="studies.retry_censored")
    if (failed or censored) and _may_change(name, f"run trials of {name} again"):
        with failures.shown_as_message("retrying"):
            started = sources.retry_study(name, failed=failed, censored=censored, budget_factor=factor,
                                          author=auth.current_user())
            sources.refresh()
            if started:
                st.success(f"{len(started)} trial(s) run again: " + ", ".join(f"`{t}`" for t in started))
            else:
                st.info("Nothing to run again: no " + ("failed trial." if failed else "censored cell."))


def _delete(name: str) -> None:
    """Delete the study as a whole (workers.studies.delete), once its name is typed; refused while trials run."""
    st.markdown(f"Delete **{name}** as a whole: its MLflow runs and experiment (soft-deleted: `mlflow gc` purges "
                "them), its ledger entries, Optuna studies, trials' checkpoints and kept artifacts. It cannot be "
                "undone here. Studies that reused its trials keep their own copies.")
    busy = [r for r in sources.records(name) if r.status in ("queued", "running", "lost")]
    if busy:
        st.warning(f"{len(busy)} trial(s) are queued or running: cancel the study first (Cancel…) and delete it "
                   "once they have stopped.", icon=":material/hourglass_top:")
    typed = st.text_input("Type the study's name to confirm", key="studies.delete_confirm", placeholder=name)
    if (st.button("Delete the study", type="primary", key="studies.delete_go", icon=":material/delete_forever:",
                  disabled=typed.strip() != name)
            and _may_change(name, f"delete the study {name}")):
        from workers.query.api import StudyInFlight

        with failures.shown_as_message("deleting the study"):
            try:
                report = sources.delete_study(name)
            except StudyInFlight as exc:
                st.error(f"{name} has {len(exc.trial_ids)} trial(s) queued or running, so it was not deleted: "
                         "cancel it first (Cancel…) and delete it once they have stopped.", icon=":material/block:")
                return
            sources.refresh()
            kept = f" {', '.join(report.dependants)} keep their copies of its trials." if report.dependants else ""
            st.session_state["studies.deleted"] = (f"Deleted {name}: {report.runs_deleted} MLflow run(s) "
                                                   f"soft-deleted, {report.leases_deleted} ledger entries, "
                                                   f"{report.checkpoints_removed} checkpoint folder(s).{kept}")
            st.rerun()


def _deleted_notice() -> None:
    """After a delete (which reruns the page): say so, and forget the deleted study as the choice."""
    message = st.session_state.pop("studies.deleted", None)
    if message is None:
        return
    for key in ("studies.study", "studies.selected", "studies.delete_confirm"):
        st.session_state.pop(key, None)
    if "study" in st.query_params:
        del st.query_params["study"]
    st.success(message, icon=":material/delete_forever:")


def actions(name: str) -> None:
    """Links to MLflow, cancelling and deleting, outside the live fragment so a confirmation survives refreshes."""
    summary = panels.study_summary(name)
    cols = st.columns([1, 1, 1, 1.2, 1.2, 0.6])
    url = sources.experiment_url(summary.experiment_id) if summary else None
    if url:
        cols[0].link_button("Study in MLflow", url, icon=":material/open_in_new:")
    cols[1].page_link("app_pages/curves.py", label="Curves", icon=":material/show_chart:", query_params={"study": name})
    with cols[3].popover("Extend or retry…", icon=":material/add_circle:"):
        _grow(name)
    with cols[4].popover("Delete study…", icon=":material/delete:"):
        _delete(name)
    with cols[2].popover("Cancel…", icon=":material/cancel:"):
        st.markdown(f"Stop every unfinished trial of **{name}** and end the study?")
        if (st.button("Cancel the study", type="primary", key="studies.cancel_study")
                and _may_cancel(name, f"the study {name}")):
            n = sources.cancel_study(name)
            sources.refresh()
            st.success(f"Cancelled {name}: {n} unfinished trial(s) stopped.")
        records = [r for r in sources.records(name) if r.status in ("queued", "running")]
        if records:
            trial = st.selectbox("…or one trial", [r.trial_id for r in records], key="studies.cancel_pick")
            if st.button("Cancel this trial", key="studies.cancel_one") and _may_cancel(name, f"trial {trial}"):
                outcome = sources.cancel_trial(trial)
                sources.refresh()
                st.success(f"{trial}: {outcome}.")


_deleted_notice()
overview()
try:
    have_studies = bool(sources.studies())
except Exception:  # the overview above already says why
    have_studies = False
if have_studies:
    with failures.shown_as_message("the Studies page"):
        study = panels.study_picker("studies")
        actions(study)
        live(study)
        trials_table(study)
        loss_curves(study)
