"""Issue 40's speed-ups of the simulator and the planner read what they read before: each is the
same answer by another road (byte-identical plans are checked on simulated studies in
test_simulate.py; these hold the shortcuts to their long way on the cases that road skips)."""

from __future__ import annotations

import math
import random

import pytest

from cbscore.analysis import first_crossing
from cbscore.study.crossings import record_crossing
from cbscore.study.trials import TrialRecord

_IDS = iter(range(10**9))


def _record(steps, losses, status="running") -> TrialRecord:
    return TrialRecord(trial_id=f"speed.{next(_IDS)}", cell_id="c", setting_id="s", role="trial", batch_size=8,
                       lr=0.01, status=status, eval_steps=tuple(steps), eval_losses=tuple(losses))


def _long_way(steps, losses, target):
    try:
        return first_crossing(steps, losses, target)
    except (TypeError, ValueError) as exc:
        return type(exc)


def _short_way(record, target):
    try:
        return record_crossing(record, target)
    except (TypeError, ValueError) as exc:
        return type(exc)


@pytest.mark.parametrize("losses", [
    (4.0, 3.5, 3.2), (4.0, math.nan, 3.2), (4.0, math.inf, 3.1), (4.0, -math.inf, 3.5), (3.0,), (4.0, 2.9),
    (4.0, 3.0), (4.0, 3.2, 2.95, 3.3), (4, 3, 3.5), (4.0, "2.5"), (4.0, "3.5"),
])
@pytest.mark.parametrize("target", [3.0, 3, math.inf, math.nan])
def test_a_crossing_is_read_as_first_crossing_reads_it(losses, target):
    steps = tuple(10.0 * (i + 1) for i in range(len(losses)))
    assert _short_way(_record(steps, losses), target) == _long_way(steps, losses, target)


def test_steps_and_losses_of_other_kinds_or_lengths_go_the_long_way():
    for steps, losses in [((10, 20), (4.0, 3.5)), ((10.0, "x"), (4.0, 3.5)), ((10.0,), (4.0, 3.5)),
                          ((10.0, 20.0), (4.0, 2.0)), ((True, 20.0), (4.0, 3.5))]:
        assert _short_way(_record(steps, losses), 3.0) == _long_way(steps, losses, 3.0)


def test_random_histories_cross_where_first_crossing_says():
    rng = random.Random(40)
    for _ in range(2000):
        n = rng.randint(1, 12)
        steps = sorted(rng.sample(range(1, 500), n))
        losses = [rng.choice([rng.uniform(2.5, 4.0), math.nan, math.inf]) if rng.random() < 0.1
                  else rng.uniform(2.8, 4.0) for _ in range(n)]
        target = rng.uniform(2.7, 3.3)
        assert _short_way(_record([float(s) for s in steps], losses), target) == \
            _long_way([float(s) for s in steps], losses, target)


def test_a_loss_at_equal_steps_read_off_the_first_evaluations_is_loss_at_step_of_them():
    """The simulator's wake check reads a running trial's first ``n`` evaluations in place (no copy,
    ``loss_at_step(..., n)``): the same loss, to the bit, as ``loss_at_step`` of a copy of them,
    steps at 0 and non-finite losses included."""
    from cbscore.study.equal_tokens import loss_at_step

    rng = random.Random(41)
    for _ in range(3000):
        m = rng.randint(1, 10)
        steps = sorted({float(rng.choice([0, rng.randint(1, 400)])) for _ in range(m)})
        losses = [rng.choice([math.nan, math.inf]) if rng.random() < 0.1 else rng.uniform(2.5, 4.0) for _ in steps]
        n = rng.randint(0, len(steps))
        at = rng.choice([rng.uniform(-10, 450), *steps])
        want, got = loss_at_step(steps[:n], losses[:n], at), loss_at_step(steps, losses, at, n)
        assert (want is None and got is None) or (want == got or (math.isnan(want) and math.isnan(got)))


def test_a_restops_copy_of_a_cell_plan_is_dataclasses_replace_of_it():
    """``restop`` copies a cell's plan and state with new counts or stops without ``dataclasses.replace``
    (many times a study): the same objects, every field, the shared ``read`` included."""
    import dataclasses

    from cbscore.study.cell_plan import CellPlan, ChainState
    from cbscore.study.plan_result import CellState
    from cbscore.study.trials import replaced

    state = CellState(cell_id="s.b8", setting_id="s", batch_size=8, role="trial", state="running", n_trials=4,
                      counts={"running": 2}, steps_to_target=120.0, max_steps=180, rates_note="note")
    plan = CellPlan(cell=state, start=(), stop=(("a", "pruned"),), stopped_by=(("a", "prune_margin"),),
                    incomplete=True, chain=ChainState(False, 120.0, 3.0), released=True, rates=(0.01, 0.02),
                    ordered=False, read={"seed_best": {0: 120.0}})
    for obj, changes in [(state, {"counts": {"running": 1, "pruned": 1}}),
                         (plan, {"cell": state, "stop": (), "stopped_by": ()}),
                         (plan, {"stop": (("b", "pruned"),), "stopped_by": (("b", "stop_far_rates"),)})]:
        got, want = replaced(obj, **changes), dataclasses.replace(obj, **changes)
        assert type(got) is type(want) and got == want and got is not obj
        assert all(getattr(got, f.name) is getattr(want, f.name) for f in dataclasses.fields(want))
    assert replaced(plan, stop=()).read is plan.read


@pytest.mark.parametrize("estimator", ["fit", "min"])
def test_the_minimums_b_star_read_off_one_measurement_is_that_of_its_own(estimator, monkeypatch):
    """Each setting's B* under the paper's minimum comes from the points measured under the report's
    estimator (their ``steps_min``): the same B* as measuring them again under ``"min"``, on the
    study's trials and the full grid's of simulated studies, noisy ones with censored cells included."""
    from cbscore.study import load_preset, sim_outcomes
    from cbscore.study.simulate import SimConfig, paper_truth, simulate

    seen = {"n": 0}
    both = sim_outcomes._analyse_both

    def checked(trials, spec, est):
        got = both(trials, spec, est)
        assert got == (sim_outcomes._analyse(trials, spec, est), sim_outcomes._analyse(trials, spec, "min")[0])
        seen["n"] += 1
        return got

    monkeypatch.setattr(sim_outcomes, "_analyse_both", checked)
    spec = load_preset("paper-fixed-n", budget_margin=0.05)
    report = simulate(spec, paper_truth(spec), SimConfig(noise_sigma=0.25, estimator=estimator), seeds=2)
    assert seen["n"] == 2 * 2 * len(spec.resolve_settings())  # the study's and the full grid's, each seed
    assert any(s.censored_cells for o in report.seeds for s in o.settings)


def test_a_planners_crossings_read_each_record_once_and_a_new_record_afresh(monkeypatch):
    """Crossings (one per Planner: no module-wide memo) reads a record once per target; the same trial's
    next record (a new evaluation, here below the target) is another object and is read afresh."""
    from cbscore.study import crossings

    reads = []
    monkeypatch.setattr(crossings, "record_crossing", lambda r, t: reads.append(r) or record_crossing(r, t))
    memo = crossings.Crossings()
    before = _record((10.0, 20.0), (4.0, 3.5))
    after = TrialRecord(**{**before.__dict__, "eval_steps": (10.0, 20.0, 30.0), "eval_losses": (4.0, 3.5, 2.9)})
    assert memo.of(before, 3.0) is None and memo.of(before, 3.0) is None
    assert memo.of(after, 3.0) == record_crossing(after, 3.0) is not None
    assert memo.of(before, 3.5) == 20.0  # (another target: read again)
    assert reads == [before, after, before]
    assert crossings.Crossings().of(after, 3.0) == memo.of(after, 3.0)  # (another planner's: its own)

