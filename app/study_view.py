"""From a study's spec and trial records to what the Studies page shows (no Streamlit).

The cells and targets come from the pure planner (:func:`cbscore.study.plan`) run on the records
the page already read, so one MLflow query per refresh feeds the grid, the progress and the
live curves alike.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.charts import LossCurve

#: Outcomes in the order a cell's colour prefers them once nothing runs.
_OUTCOME_ORDER = ("reached", "finished", "censored", "diverged", "pruned", "stopped", "failed")


def cell_state(state: str, counts: Mapping[str, int]) -> str:
    """The colour key of a cell (:data:`app.charts.STATE_COLORS`) from the planner's cell state
    (``waiting``/``running``/``resolved``/``done``/``skipped``) and its trials by status."""
    if counts.get("running") or counts.get("lost"):
        return "running" if counts.get("running") else "lost"
    if counts.get("queued"):
        return "queued"
    if state == "skipped":
        return "skipped"
    if state == "waiting" or not counts:
        return "planned"
    for outcome in _OUTCOME_ORDER:
        if counts.get(outcome):
            return outcome
    return "planned"


@dataclass(frozen=True, kw_only=True)
class StudyView:
    """What the Studies page draws for one study at one moment."""

    settings: tuple[str, ...]
    """Setting ids, in the spec's order (rows of the grid)."""
    batch_sizes: tuple[int, ...]
    """Batch sizes (columns of the grid)."""
    states: Mapping[tuple[str, int], str]
    """Colour key per cell."""
    hover: Mapping[tuple[str, int], str]
    """Hover text per cell."""
    targets: Mapping[str, float]
    """Target loss per setting, where known."""
    counts: Mapping[str, int]
    """Trials by status."""
    ended: int
    """Trials with an outcome, plus the trials of skipped cells."""
    planned: int
    """Trials the study runs in all: the planner's count per cell (the grid, plus the re-runs and
    the learning rates past a grid edge it has added so far)."""
    tokens_spent: int
    """Training tokens spent so far."""
    grid_tokens: int = 0
    """Training tokens the same study would spend at fixed budgets (every trial to its budget)."""
    errors: tuple[str, ...]
    """Settings that cannot go on, and why."""
    costs: object = None
    """:class:`cbscore.study.costs.StudyCosts` of the records."""

    @property
    def progress(self) -> float:
        return min(1.0, self.ended / self.planned) if self.planned else 0.0


def study_view(spec, records: Sequence, now_s: float | None = None) -> StudyView:
    """The grid, progress and targets of ``spec`` given its trial ``records``."""
    from cbscore.study import ended_trials, grid_tokens, plan, status_counts
    from cbscore.study.costs import study_costs

    p = plan(spec, list(records), time.time() if now_s is None else now_s)
    states, hover = {}, {}
    for c in p.cells:
        key = (c.setting_id, c.batch_size)
        states[key] = cell_state(c.state, c.counts)
        outcome = ", ".join(f"{k} {v}" for k, v in sorted(c.counts.items())) or "no trials yet"
        s = "—" if c.steps_to_target is None else f"{c.steps_to_target:,.0f} steps"
        if c.state == "skipped":
            hover[key] = (f"<b>{c.setting_id} · B = {c.batch_size}</b><br>skipped: a smaller batch size already "
                          "needed more tokens than this cell's budget, so it could only end censored")
            continue
        hover[key] = (f"<b>{c.setting_id} · B = {c.batch_size}</b> ({c.role})<br>{c.state}: {outcome}"
                      f"<br>{c.n_trials} trials planned · S(B) so far: {s}"
                      + (f"<br>step cap {c.max_steps:,}" if c.max_steps else ""))
    counts = status_counts(records, p)
    return StudyView(
        settings=tuple(s.setting_id for s in spec.resolve_settings()), batch_sizes=tuple(spec.batch_sizes),
        states=states, hover=hover, targets=dict(p.targets), counts=counts,
        ended=ended_trials(counts), planned=sum(c.n_trials for c in p.cells),
        tokens_spent=sum(r.tokens for r in records), grid_tokens=grid_tokens(spec), errors=tuple(p.errors),
        costs=study_costs(spec, list(records)))


def waiting_notices(records: Sequence) -> list[str]:
    """One sentence per fault of a host that holds queued trials back, for the Studies page's
    banner: a full disk (the trials go on when there is room) and a host that cannot see the
    study's token store (they go to a host that can; the operator must mount it or set
    ``CBS_STORE_DIR``). Each names how many trials wait and the first one's note (the path and the
    setting to fix). Neither costs a trial an attempt (:meth:`workers.trials.trial.Attempt.give_back`)."""
    from workers.query.api import NO_STORE_PREFIX, OUT_OF_ROOM_PREFIX

    queued = [r for r in records if r.status == "queued" and r.note]
    out = []
    for prefix, what in ((OUT_OF_ROOM_PREFIX, "wait for room on a worker's host"),
                         (NO_STORE_PREFIX, "wait for a host that can see the study's token store")):
        waiting = [r for r in queued if r.note.startswith(prefix)]
        if waiting:
            out.append(f"{len(waiting)} trial(s) {what}: {waiting[0].note}")
    return out


def trial_budget_tokens(spec, record) -> int | None:
    """Tokens a trial may spend (``cbscore.study.planner.cell_budget_tokens``), capped by its step
    cap (``max_steps·B·T``)."""
    from cbscore.study.budgets import cell_budget_tokens

    setting = next((s for s in spec.resolve_settings() if s.setting_id == record.setting_id), None)
    if setting is None:
        return None
    budget = cell_budget_tokens(spec, setting, record.batch_size, record.role, record.max_steps)
    if record.max_steps:
        budget = min(budget, record.max_steps * record.batch_size * spec.context_tokens)
    return budget


def eta_s(budget_tokens: int | None, tokens: int, tokens_per_s: float | None) -> float | None:
    """Seconds left at ``tokens_per_s`` until the budget is spent (an upper bound: a trial stops
    at its target)."""
    if not budget_tokens or not tokens_per_s or tokens_per_s <= 0:
        return None
    return max(0.0, (budget_tokens - tokens) / tokens_per_s)


def throughput_text(curve: Mapping[str, Any], devices: int = 1) -> str:
    """A running trial's latest throughput: tokens/s of all its devices, per device when there are
    several, and MFU (per device, against the exact device's bf16 peak; PaLM appendix B).
    ``devices``: the spec's ``devices_per_trial``, used where the run has no per-device metric."""
    from app import units

    total = last_value(curve, "perf/tokens_per_s")
    per_device = last_value(curve, "perf/tokens_per_s_per_device")
    if per_device is not None and total is not None and per_device > 0:
        devices = max(1, round(total / per_device))  # what the worker ran it on (it may override the spec)
    elif total is not None:
        per_device = total / devices
    mfu = last_value(curve, "perf/mfu")
    text = units.rate(total)
    if devices > 1 and per_device is not None:
        text += f" ({units.count(per_device)} per device × {devices})"
    return text + (f" · MFU {mfu:.1%}" if mfu is not None else " · MFU n/a")


def last_value(curve: Mapping[str, Any], key: str) -> float | None:
    """The latest value of metric ``key`` in a ``trial_curve`` result."""
    steps_values = curve.get(key)
    if not steps_values or not steps_values[1]:
        return None
    value = float(steps_values[1][-1])
    return value if math.isfinite(value) else None


def loss_curve(record, context_tokens: int, curve: Mapping[str, Any] | None = None) -> LossCurve:
    """Held-out loss of the averaged weights against tokens for one trial.

    From the record's own evaluations (read with the records, so the newest), else from the
    run's ``eval/loss_ewa`` history in ``curve``.
    """
    steps, losses = ((record.eval_steps, record.eval_losses) if record.eval_steps
                     else (curve or {}).get("eval/loss_ewa", ((), ())))
    per_step = record.batch_size * context_tokens  # tokens per optimizer step
    return LossCurve(label=f"lr {record.lr:.3g}", tokens=tuple(float(s) * per_step for s in steps),
                     losses=tuple(float(v) for v in losses))


#: Most trials the Studies page overlays in one chart of loss curves.
MAX_OVERLAY = 500


def overlay_records(records: Sequence, *, setting: str | None, batch_sizes: Sequence[int] = (),
                    outcomes: Sequence[str] = ()) -> list:
    """The trials the loss-curve overlay draws: of ``setting`` (``None`` = every setting), at
    ``batch_sizes`` and with ``outcomes`` (empty = any), by setting, batch size, learning rate and
    seed; at most :data:`MAX_OVERLAY`."""
    chosen = [r for r in records if (setting is None or r.setting_id == setting)
              and (not batch_sizes or r.batch_size in batch_sizes) and (not outcomes or r.status in outcomes)]
    chosen.sort(key=lambda r: (r.setting_id, r.batch_size, r.lr, r.seed, r.trial_id))
    return chosen[:MAX_OVERLAY]


def overlay_label(record, one_setting: bool) -> str:
    """A trial's legend label in the overlay: ``B 8 · lr 0.006 · s1`` (the setting first when
    several are drawn)."""
    label = f"B {record.batch_size} · lr {record.lr:.3g} · s{record.seed}"
    return label if one_setting else f"{record.setting_id} · {label}"


def trial_rows(records: Sequence, links: Mapping[str, str]) -> list[dict[str, Any]]:
    """One row per trial for the trials table (``links``: run id → MLflow URL)."""
    return [{
        "trial": r.trial_id.split(".", 1)[-1],
        "setting": r.setting_id,
        "B": r.batch_size,
        "role": r.role,
        "lr": r.lr,
        "status": r.status,
        "S (steps)": r.steps_to_target,
        "final loss": r.final_eval_loss,
        "step": r.last_step,
        "tokens": r.tokens,
        "attempt": r.attempt,
        "note": r.note,
        "reused from": getattr(r, "reused_from", "") or None,  # study/run of the trial it was copied from
        "run": links.get(r.run_id or ""),
    } for r in records]


def summary_rows(summaries: Sequence) -> list[dict[str, Any]]:
    """One row per study for the overview table."""
    from cbscore.study import ended_trials

    rows = []
    for s in summaries:
        counts = dict(s.counts)
        ended = ended_trials(counts)
        rows.append({
            "study": s.name,
            "kind": s.kind,
            "owner": getattr(s, "owner", "") or "—",
            "status": s.status,
            "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(s.created_s)),
            "ended / created": f"{ended} / {s.n_trials}",
            "progress": ended / s.n_trials if s.n_trials else 0.0,
            "running": counts.get("running", 0),
            "reached": counts.get("reached", 0),
            "censored": counts.get("censored", 0),
            "diverged": counts.get("diverged", 0),
            "tokens spent": s.tokens_spent,
        })
    return rows
