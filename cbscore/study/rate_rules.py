"""Which learning rates a cell runs next: one small rule per search kind, each with one job.

:func:`rate_rule` picks a cell's rule from the spec and the cell's role; the cell planner
(:mod:`cbscore.study.cell_plan`) asks it

* ``released(target, prev_resolved, centre)``: whether the cell may start trials;
* ``rates(recs, centre)``: the rates it runs, ascending, and whether it may still add one
  (``pending``); an Optuna cell names none;
* ``size(rates)``: the trials of its first attempts;
* ``order(rates, centre)``: the order its rates start in (``search.order``);
* ``note(recs, rates, centre)``: what the status pages say of its rates;
* ``orders_only()``: whether it reads ``centre`` only in ``order`` (a cell with nothing to start
  plans the same whatever its centre).

``centre`` is the planner's guess of the cell's best rate: a chained cell's centre
(:func:`cbscore.study.chained.chain_centres`), else the prediction from the setting's other cells
(:func:`cbscore.study.cell_rates.cell_prediction`, where the spec asks for one), else ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cbscore.study.budgets import cell_size
from cbscore.study.cell_rates import cell_rates, cell_rates_note
from cbscore.study.chained import chained_rates
from cbscore.study.spec import StudySpec
from cbscore.study.trials import TrialRecord


@dataclass(frozen=True)
class GridRates:
    """A grid cell (and a chained search's reference cell): the spec's rates, extended past an edge
    where a seed's best sits there (:func:`cbscore.study.cell_rates.cell_rates`); with
    ``experimental.predict``, the rates around the predicted optimum instead."""

    spec: StudySpec
    role: str
    """``reference`` or ``trial``."""
    batch_size: int

    def released(self, target: float | None, prev_resolved: bool, centre: float | None) -> bool:
        # The reference cell runs first; any other once the target is known and the next smaller
        # batch size resolved (its step cap reads the smaller cells' S).
        return self.role == "reference" or (target is not None and prev_resolved)

    def rates(self, recs: Sequence[TrialRecord], centre: float | None) -> tuple[tuple[float, ...], bool]:
        return cell_rates(self.spec, recs, self.role, centre if self.spec.experimental.predict else None)

    def size(self, rates: Sequence[float]) -> int:
        return len(rates) * len(self.spec.seeds) if rates else cell_size(self.spec, self.batch_size)

    def order(self, rates: Sequence[float], centre: float | None) -> Sequence[float]:
        # Nearest the predicted optimum first (search.order): the best crosses early, so the far
        # rates, started later, stop at the prune margin past it; and trials stopped at equal
        # tokens are compared with the leader, which should be running before them.
        return sorted(rates, key=lambda v: abs(math.log(v / centre))) if centre is not None else rates

    def note(self, recs: Sequence[TrialRecord], rates: Sequence[float], centre: float | None) -> str:
        if self.spec.experimental.predict:
            return cell_rates_note(self.spec, recs, self.role, rates, centre)
        return ""

    def orders_only(self) -> bool:
        return not self.spec.experimental.predict


@dataclass(frozen=True)
class ChainedRates(GridRates):
    """A chained search's cell other than the reference (:mod:`cbscore.study.chained`): three rates
    around its centre, one more past an edge only where the edge clearly wins."""

    def released(self, target: float | None, prev_resolved: bool, centre: float | None) -> bool:
        # Outward from B_ref: once the neighbour towards it settled, which gives the centre.
        return target is not None and centre is not None

    def rates(self, recs: Sequence[TrialRecord], centre: float | None) -> tuple[tuple[float, ...], bool]:
        # No centre: not released yet.
        return chained_rates(self.spec, recs, centre, self.batch_size) if centre is not None else ((), True)

    def note(self, recs: Sequence[TrialRecord], rates: Sequence[float], centre: float | None) -> str:
        if self.spec.experimental.predict:
            return cell_rates_note(self.spec, recs, self.role, rates, centre)
        return chained_note(rates, centre) if centre else ""

    def orders_only(self) -> bool:
        return False  # its rates are around the centre


@dataclass(frozen=True)
class AskedRates:
    """An Optuna cell: its sampler names each trial's rate; the cell runs ``search.n_trials``."""

    spec: StudySpec
    role: str
    batch_size: int

    def released(self, target: float | None, prev_resolved: bool, centre: float | None) -> bool:
        return self.role == "reference" or (target is not None and prev_resolved)

    def rates(self, recs: Sequence[TrialRecord], centre: float | None) -> tuple[tuple[float, ...], bool]:
        n = cell_size(self.spec)
        return (), not (len(recs) >= n and all(r.terminal for r in recs))

    def size(self, rates: Sequence[float]) -> int:
        return cell_size(self.spec)

    def order(self, rates: Sequence[float], centre: float | None) -> Sequence[float]:
        return rates

    def note(self, recs: Sequence[TrialRecord], rates: Sequence[float], centre: float | None) -> str:
        return ""

    def orders_only(self) -> bool:
        return True


def rate_rule(spec: StudySpec, batch_size: int) -> GridRates | ChainedRates | AskedRates:
    """The rule of the cell at ``batch_size``: its role is ``reference`` at B_ref when the target
    comes from reference runs, else ``trial``."""
    role = "reference" if (batch_size == spec.b_ref and spec.target_losses is None) else "trial"
    if not spec.search.runs_rates:
        return AskedRates(spec, role, batch_size)
    if spec.search.kind == "chained" and role == "trial":
        return ChainedRates(spec, role, batch_size)
    return GridRates(spec, role, batch_size)


def chained_note(rates: Sequence[float], centre: float) -> str:
    """A chained cell's centre and the rates it runs (for status pages and reports)."""
    return (f"centred at {centre:.3g} from its neighbour's best rate; runs "
            + ", ".join(f"{v:g}" for v in sorted(rates)))
