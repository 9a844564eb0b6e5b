"""What a study spent against what it had to: the fixed-budget grid, the grid stopped at the target,
and the oracle.

The **oracle** is what a study would spend if it knew each cell's best learning rate in advance:
per cell and seed, the tokens its best trial trained until it stopped at the target, and
at B_ref, D tokens per seed (the reference runs' loss at D *is* the target). ``spent / oracle`` is
the figure a cheaper search lowers; 1 is the floor. A cell that no trial crossed counts the fewest
tokens any of its trials trained (what any study spends to learn it is censored); a skipped cell
counts nothing.

The **stop-at-target grid** is every learning rate of the spec (with the rates the study added past
an edge) at every cell run until it crosses the target. A running or real study knows it only where
every trial crossed: a trial stopped earlier counts what it trained, so the figure is then a lower
bound (``stop_at_target_exact`` is False); the simulator knows it exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cbscore.study.spec import StudySpec
from cbscore.study.trials import TrialRecord


@dataclass(frozen=True, kw_only=True)
class StudyCosts:
    """Tokens of a study beside its three yardsticks."""

    spent_tokens: int
    """Training tokens the study spent (every trial, every attempt's progress)."""
    fixed_budget_grid_tokens: int
    """Every trial of the spec's grid run to its whole planned budget (``planner.grid_tokens``)."""
    stop_at_target_grid_tokens: int
    """Every rate run until it crosses the target (see ``stop_at_target_exact``)."""
    stop_at_target_exact: bool
    """False where some trial never crossed: its tokens so far stand in (a lower bound)."""
    oracle_tokens: int
    """The best trial of every cell and seed, run to its target; D per seed at B_ref."""
    oracle_cells: int
    """Cells counted in the oracle (cells still without a crossing count as censored)."""
    pruned_tokens_by_rule: Mapping[str, int] = field(default_factory=dict)
    """Tokens of ``pruned`` trials by the rule that stopped them (``plan_result.STOP_RULES``;
    ``unknown`` for runs pruned before the ``stopped_by`` tag existed), largest first."""

    @property
    def ratio_to_oracle(self) -> float | None:
        """``spent / oracle``; ``None`` before any cell has a crossing."""
        return self.spent_tokens / self.oracle_tokens if self.oracle_tokens > 0 else None

    def to_dict(self) -> dict:
        return {"tokens_spent": self.spent_tokens, "tokens_fixed_budget_grid": self.fixed_budget_grid_tokens,
                "tokens_stop_at_target_grid": self.stop_at_target_grid_tokens,
                "stop_at_target_exact": self.stop_at_target_exact, "tokens_oracle": self.oracle_tokens,
                "oracle_cells": self.oracle_cells, "ratio_to_oracle": self.ratio_to_oracle,
                "tokens_pruned_by_rule": dict(self.pruned_tokens_by_rule)}


def _crossing_tokens(r: TrialRecord, context_tokens: int) -> int | None:
    """Tokens a reached trial trained until it stopped at its target."""
    if r.status != "reached":
        return None
    return r.tokens if r.tokens > 0 else int((r.steps_to_target or 0) * r.batch_size * context_tokens)


def study_costs(spec: StudySpec, records: Sequence[TrialRecord]) -> StudyCosts:
    """The costs of a study from its trial records (a running study's too)."""
    from cbscore.study.budgets import grid_tokens

    settings = {s.setting_id: s for s in spec.resolve_settings()}
    by_cell: dict[str, list[TrialRecord]] = {}
    for r in records:
        by_cell.setdefault(r.cell_id, []).append(r)
    n_rates = len(spec.search.lrs) if spec.search.runs_rates else spec.search.n_trials
    oracle, cells, grid, exact = 0, 0, 0, True
    for recs in by_cell.values():
        setting = settings.get(recs[0].setting_id)
        if setting is None:
            continue
        seeds = {r.seed for r in recs}
        if recs[0].role == "reference":
            # Counted once a run of the seed ended (before, the oracle would run ahead of the study).
            oracle += setting.tokens * len({r.seed for r in recs if r.terminal})
            cells += any(r.terminal for r in recs)
            grid += sum(r.tokens for r in recs)
            continue
        cells += 1
        # Per (rate, seed): tokens to its crossing where a run of it crossed (a re-run's included),
        # else the most any run of it trained (a lower bound).
        runs: dict[tuple[float, int], list[TrialRecord]] = {}
        for r in recs:
            runs.setdefault((r.lr, r.seed), []).append(r)
        crossed: dict[tuple[float, int], int] = {}
        for key, rs in runs.items():
            got = [t for t in (_crossing_tokens(r, spec.context_tokens) for r in rs) if t is not None]
            if got:
                crossed[key] = min(got)
                grid += min(got)
            else:
                exact = False
                grid += max(r.tokens for r in rs)
        if len({lr for lr, _ in runs}) < n_rates:
            exact = False  # rates the study never ran (a predicted search): not counted
        for seed in seeds:
            mine = [t for (lr, s), t in crossed.items() if s == seed]
            if mine:
                oracle += min(mine)
            else:
                ended = [r.tokens for r in recs if r.seed == seed and r.terminal and r.tokens > 0]
                oracle += min(ended) if ended else 0
    return StudyCosts(spent_tokens=sum(r.tokens for r in records), fixed_budget_grid_tokens=grid_tokens(spec),
                      stop_at_target_grid_tokens=grid, stop_at_target_exact=exact, oracle_tokens=oracle,
                      oracle_cells=cells, pruned_tokens_by_rule=pruned_tokens_by_rule(records))


def pruned_tokens_by_rule(records: Sequence[TrialRecord]) -> dict[str, int]:
    """Tokens of the ``pruned`` trials by the rule that stopped them (``TrialRecord.stopped_by``),
    largest first."""
    out: dict[str, int] = {}
    for r in records:
        if r.status == "pruned":
            rule = r.stopped_by or "unknown"
            out[rule] = out.get(rule, 0) + r.tokens
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def format_pruned(by_rule: Mapping[str, int], spent: int, human=lambda n: f"{n:.3g}") -> str:
    """``pruned trials: 1.2M by prune_margin (8%), ...`` (empty when nothing was pruned)."""
    if not by_rule:
        return ""
    return "pruned trials: " + ", ".join(
        f"{human(t)} by {rule}" + (f" ({t / spent:.0%})" if spent else "") for rule, t in by_rule.items())


def format_costs(c: StudyCosts, human=lambda n: f"{n:.3g}") -> str:
    """One line for ``cbs study status`` and the Studies page."""
    ratio = c.ratio_to_oracle
    at = "" if c.stop_at_target_exact else "≥ "
    return (f"tokens: {human(c.spent_tokens)} spent; fixed-budget grid {human(c.fixed_budget_grid_tokens)}; "
            f"grid stopped at the target {at}{human(c.stop_at_target_grid_tokens)}; oracle "
            f"{human(c.oracle_tokens)} ({c.oracle_cells} cells); "
            + (f"study/oracle {ratio:.2f}×" if ratio is not None else "study/oracle not known yet"))
