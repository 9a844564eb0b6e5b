"""What :func:`cbscore.study.planner.plan` keeps between calls, so that a call costs what changed.

The planner is pure: the same spec and records give the same plan. The simulator calls it at every
event of a study (about 400 times a study), each time with every record, most of them ended and
passed again as the very same (frozen) objects. What is kept here is read off those records and is
used again only while they are the same:

* **cells** (:class:`CellSeen`): each cell's records at the last call, by identity, with their keys,
  the cell's measured best rate, its plan under the inputs it had, and (a reference cell) whether it
  may still add a rate;
* **settings**: a setting none of whose cells changed, under the same target and predictions, plans
  as at the last call;
* **targets**: read only off the reference cells, kept while those are unchanged;
* **predictions** of each cell's best rate, by the measured best rates they are fitted to;
* **cell plans** by their whole inputs, the cell's record keys among them.

Everything is kept for one spec at a time (a new spec object clears it), and one call at a time
reads and fills it (:attr:`PlanMemo.lock`: the web app plans from several page threads).
``tests/cbscore/study/test_simulate.py::test_the_planners_memos_never_change_a_plan`` checks every
plan of a simulated study against a planner that remembers nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cbscore.study.cell_plan import CellPlan, record_key
from cbscore.study.cell_rates import cell_best_rate, cell_prediction
from cbscore.study.cell_trials import cell_id
from cbscore.study.spec import StudySpec
from cbscore.study.targets import setting_targets
from cbscore.study.trials import TrialRecord

#: Entries a memo holds before it is emptied (a runner planning many studies in turn).
MAX_ENTRIES = 20_000


@dataclass
class CellSeen:
    """One cell's records at a call (the objects themselves) and what the planner read off them."""

    recs: tuple[TrialRecord, ...]
    lost: frozenset
    """The call's lost trials: they change the records' keys."""
    key: tuple
    """The records' keys (:func:`cbscore.study.cell_plan.record_key`)."""
    inputs: tuple | None = None
    """The cell plan's other inputs at the last call, and its plan then."""
    out: CellPlan | None = None
    best: tuple[float | None] | None = None
    """The cell's measured best rate (:func:`cbscore.study.cell_rates.cell_best_rate`), once read."""
    pending: tuple[float | None, bool] | None = None
    """A reference cell's predicted rate and whether it may still add a rate, at the last call."""

    def same(self, recs: Sequence[TrialRecord], lost: frozenset) -> bool:
        return lost == self.lost and _same_objects(recs, self.recs)


def _same_objects(a: Sequence, b: Sequence) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


@dataclass
class PlanMemo:
    """The planner's memos for one spec (module docstring)."""

    spec: StudySpec | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    cell_plans: dict[tuple, CellPlan] = field(default_factory=dict)
    cell_best: dict[tuple, float | None] = field(default_factory=dict)
    predictions: dict[tuple, dict[tuple[str, int], float | None]] = field(default_factory=dict)
    cells: dict[str, CellSeen] = field(default_factory=dict)
    targets: dict[str, object] = field(default_factory=dict)
    settings: dict[str, tuple] = field(default_factory=dict)
    ids: dict[tuple[str, int], str] = field(default_factory=dict)

    def clear(self) -> None:
        for memo in (self.cell_plans, self.cell_best, self.predictions, self.cells, self.targets, self.settings,
                     self.ids):
            memo.clear()
        self.spec = None

    def use(self, spec: StudySpec) -> None:
        """Keep what follows for ``spec``: another spec object starts from nothing."""
        if self.spec is not spec:
            self.clear()
            self.spec = spec
            self.ids.update({(s.setting_id, b): cell_id(s.setting_id, b)
                             for s in spec.resolve_settings() for b in (*spec.batch_sizes, spec.b_ref)})

    def cell_id(self, setting_id: str, batch_size: int) -> str:
        return self.ids[(setting_id, batch_size)]

    def seen_cells(self, by_cell: Mapping[str, list[TrialRecord]], lost: frozenset) -> dict[str, CellSeen]:
        """Every cell's :class:`CellSeen` at this call: the last call's where its records are the same."""
        seen: dict[str, CellSeen] = {}
        for cid, recs in by_cell.items():
            last = self.cells.get(cid)
            if last is None or not last.same(recs, lost):
                last = self.cells[cid] = CellSeen(tuple(recs), lost, tuple(record_key(r, lost) for r in recs))
            seen[cid] = last
        if len(self.cells) > 4 * len(seen) + 1_000:  # cells no longer planned
            for cid in [c for c in self.cells if c not in seen]:
                del self.cells[cid]
        return seen

    def setting_targets(self, spec: StudySpec, records: Sequence[TrialRecord],
                        by_cell: Mapping[str, list[TrialRecord]],
                        seen: Mapping[str, CellSeen]) -> tuple[dict[str, float], list[str]]:
        """:func:`cbscore.study.targets.setting_targets`, kept while the reference cells are unchanged."""
        refs = tuple(seen.get(self.cell_id(s.setting_id, spec.b_ref)) for s in spec.resolve_settings())
        last = self.targets.get("cells")
        if last is not None and _same_objects(last, refs):
            return dict(self.targets["targets"]), list(self.targets["errors"])
        targets, errors = setting_targets(spec, records, by_cell=by_cell)
        self.targets.update(cells=refs, targets=dict(targets), errors=list(errors))
        return targets, errors

    def best_rates(self, spec: StudySpec, seen: Mapping[str, CellSeen]) -> dict[str, dict[int, float]]:
        """``{setting id: {batch size: best rate}}`` of the cells measured so far
        (:func:`cbscore.study.cell_rates.cell_best_rate`), each kept with the cell's records."""
        out: dict[str, dict[int, float]] = {}
        for setting in spec.resolve_settings():
            rates: dict[int, float] = {}
            for b in spec.batch_sizes:
                cell = seen.get(self.cell_id(setting.setting_id, b))
                if cell is None:
                    continue
                if cell.best is None:
                    if cell.key not in self.cell_best:
                        if len(self.cell_best) >= MAX_ENTRIES:
                            self.cell_best.clear()
                        self.cell_best[cell.key] = cell_best_rate(spec, b, cell.recs)
                    cell.best = (self.cell_best[cell.key],)
                if cell.best[0] is not None:
                    rates[b] = cell.best[0]
            out[setting.setting_id] = rates
        return out

    def predictor(self, spec: StudySpec,
                  best_rates: Mapping[str, Mapping[int, float]] | None) -> Callable[[str, int], float | None]:
        """``predicted(setting id, batch size)``: :func:`cbscore.study.cell_rates.cell_prediction` of
        the cell from ``best_rates`` (``None`` without them), kept by those rates."""
        if not best_rates:
            return lambda setting_id, batch_size: None
        measured = tuple((sid, tuple(v.items())) for sid, v in best_rates.items())
        if measured not in self.predictions and len(self.predictions) >= 2_000:
            self.predictions.clear()
        known = self.predictions.setdefault(measured, {})

        def predicted(setting_id: str, batch_size: int) -> float | None:
            if (setting_id, batch_size) not in known:
                known[(setting_id, batch_size)] = cell_prediction(spec, setting_id, best_rates, batch_size)
            return known[(setting_id, batch_size)]

        return predicted

    def cell_plan(self, key: tuple, make: Callable[[], CellPlan]) -> CellPlan:
        """The cell plan of ``key`` (a cell's whole inputs), made once."""
        out = self.cell_plans.get(key)
        if out is None:
            if len(self.cell_plans) >= MAX_ENTRIES:
                self.cell_plans.clear()
            out = self.cell_plans[key] = make()
        return out

    def setting_plan(self, setting_id: str, inputs: tuple, cells: tuple, make: Callable[[], tuple]) -> tuple:
        """A setting's plan, as at the last call when its ``inputs`` are equal and its ``cells``
        (:class:`CellSeen` or ``None`` each) are the same objects."""
        last = self.settings.get(setting_id)
        if last is not None and last[0] == inputs and _same_objects(last[1], cells):
            return last[2]
        planned = make()
        self.settings[setting_id] = (inputs, cells, planned)
        return planned
