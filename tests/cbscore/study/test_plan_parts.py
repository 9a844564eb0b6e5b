"""The planner's small parts, each on its own: a search kind's rates (rate_rules), the rules that
stop running trials (stop_rules), when a cell is done (cell_done), and the Planner that plans again
only what changed."""

from __future__ import annotations

import dataclasses
import math

import pytest

from cbscore.study import StudySpec, TrialRecord, plan
from cbscore.study.budgets import RERUN_TAG
from cbscore.study.cell_done import cell_state, censored_bound, reruns, skipped
from cbscore.study.planner import Planner
from cbscore.study.rate_rules import AskedRates, ChainedRates, GridRates, rate_rule
from cbscore.study.stop_rules import (
    EqualTokenFraction,
    EqualTokenMargin,
    FarRates,
    PruneMargin,
    RunningCell,
    stop_rules,
)

D = 100_000


def spec(**changes) -> StudySpec:
    base = dict(name="t", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": D}],
                batch_sizes=[4, 8, 16, 32], b_ref=8, context_tokens=32,
                search={"kind": "grid", "lrs": [0.01, 0.03], "lr_extensions": 0, "order": "grid"}, prune_margin=0.1)
    base.update(changes)
    return StudySpec.from_dict(base)


def rec(lr, status, *, seed=0, b=16, steps=None, evals=(), losses=(), tokens=0, rerun=False, max_steps=None):
    tid = f"t.s.b{b}.{lr:g}.s{seed}" + ("." + RERUN_TAG if rerun else "")
    return TrialRecord(trial_id=tid, cell_id=f"s.b{b}", setting_id="s", role="trial", batch_size=b, lr=lr,
                       status=status, seed=seed, steps_to_target=steps, eval_steps=evals, eval_losses=losses,
                       tokens=tokens, last_step=int(evals[-1]) if evals else 0, max_steps=max_steps)


# ---------------------------------------------------------------- which rates a cell runs


def test_each_cell_gets_its_search_kinds_rule():
    grid = spec()
    assert isinstance(rate_rule(grid, 8), GridRates) and rate_rule(grid, 8).role == "reference"
    assert type(rate_rule(grid, 16)) is GridRates and rate_rule(grid, 16).role == "trial"
    chained = spec(search={"kind": "chained", "lrs": [0.01, 0.03]})
    assert type(rate_rule(chained, 8)) is GridRates  # the reference cell runs the grid
    assert type(rate_rule(chained, 32)) is ChainedRates
    optuna = spec(search={"kind": "optuna", "lrs": [0.01, 0.03], "n_trials": 4})
    assert type(rate_rule(optuna, 16)) is AskedRates
    # Explicit targets: no reference role at B_ref.
    assert rate_rule(spec(target_losses={"tiny-0.1M_D100K": 3.0}), 8).role == "trial"


def test_a_grid_cell_is_released_by_its_smaller_neighbour_and_a_chained_one_by_its_centre():
    s = spec(search={"kind": "chained", "lrs": [0.01, 0.03]})
    ref, grid, chained = rate_rule(s, 8), GridRates(s, "trial", 16), rate_rule(s, 16)
    assert ref.released(None, False, None)
    assert not grid.released(None, True, None) and not grid.released(3.0, False, None) and grid.released(3.0, True, None)
    # Outward from B_ref: the centre is what releases it, not the smaller batch size.
    assert not chained.released(3.0, True, None) and chained.released(3.0, False, 0.02)


def test_a_grid_cell_whose_best_is_its_largest_rate_adds_the_next_one():
    s = spec(search={"kind": "grid", "lrs": [0.01, 0.03], "lr_extensions": 1})
    rule = rate_rule(s, 16)
    assert rule.rates([], None) == ((0.01, 0.03), True)
    ended = [rec(0.01, "reached", steps=300.0), rec(0.03, "reached", steps=200.0)]
    # The grid's outermost ratio continued: 0.03 × 3 = 0.09; pending until it ran.
    assert rule.rates(ended, None) == ((0.01, 0.03, 0.09), True)
    assert rule.size((0.01, 0.03, 0.09)) == 3
    done = ended + [rec(0.09, "reached", steps=250.0)]
    assert rule.rates(done, None) == ((0.01, 0.03, 0.09), False)


def test_a_chained_cell_brackets_its_centre_and_starts_nothing_without_one():
    s = spec(search={"kind": "chained", "lrs": [0.01, 0.03], "bracket_ratio": 2.0})
    rule = rate_rule(s, 16)
    assert rule.rates([], None) == ((), True)
    assert rule.rates([], 0.02) == ((0.01, 0.02, 0.04), True)
    assert rule.note([], (0.01, 0.02, 0.04), 0.02) == "centred at 0.02 from its neighbour's best rate; runs 0.01, 0.02, 0.04"


def test_rates_start_nearest_the_centre_first():
    rule = rate_rule(spec(), 16)
    assert list(rule.order((0.001, 0.01, 0.03, 0.1), 0.03)) == [0.03, 0.01, 0.1, 0.001]
    assert list(rule.order((0.001, 0.01), None)) == [0.001, 0.01]


def test_an_optuna_cell_names_no_rate_and_runs_its_trials():
    s = spec(search={"kind": "optuna", "lrs": [0.01, 0.03], "n_trials": 2})
    rule = rate_rule(s, 16)
    assert rule.rates([], None) == ((), True) and rule.size(()) == 2
    assert rule.rates([rec(0.01, "reached", steps=1.0), rec(0.02, "censored")], None) == ((), False)


# ---------------------------------------------------------------- when a running rate stops


def running_cell(s, recs, *, seed_best=None, rates=(0.001, 0.01, 0.1, 1.0), best=None, prev_best=None, cap=None,
                 lost=frozenset()):
    seed_best = {} if seed_best is None else seed_best
    return RunningCell(spec=s, setting=s.resolve_settings()[0], batch_size=16, recs=recs, target=3.0,
                       seed_best=seed_best, best=best if best is not None else min(seed_best.values(), default=None),
                       rates=rates, prev_best=prev_best, cap=cap, lost=lost)


def test_the_prune_margin_stops_a_far_rate_evaluated_past_its_seeds_best_crossing():
    s = spec()
    recs = [rec(0.001, "reached", steps=200.0, evals=(100.0, 200.0), losses=(3.5, 2.9)),
            rec(0.01, "running", evals=(100.0, 221.0), losses=(4.0, 3.1)),   # the best's neighbour: kept
            rec(0.1, "running", evals=(100.0, 221.0), losses=(4.0, 3.1)),    # past 1.1 × 200 = 220
            rec(1.0, "running", evals=(100.0, 219.0), losses=(4.0, 3.1))]    # not evaluated past it yet
    rule = PruneMargin(0.1)
    assert rule.stops(running_cell(s, recs, seed_best={0: 200.0}), set()) == [recs[2].trial_id]
    # A lost trial runs again instead; no crossing yet: nothing to compare with.
    assert rule.stops(running_cell(s, recs, seed_best={0: 200.0}, lost=frozenset({recs[2].trial_id})), set()) == []
    assert rule.stops(running_cell(s, recs), set()) == []


def test_far_rates_stop_only_from_their_fraction_of_the_expected_steps_and_never_a_rerun():
    s = spec()
    steps = (100.0, 200.0, 300.0)
    leader = rec(0.001, "running", evals=steps, losses=(3.5, 3.3, 3.2))
    far = rec(1.0, "running", evals=steps, losses=(3.7, 3.5, 3.4))  # 0.2 nats behind, outside the window
    rule = FarRates(margin_nats=0.05, fraction=0.5)
    assert rule.stops(running_cell(s, [leader, far], prev_best=500.0), set()) == [far.trial_id]
    # Its last evaluation (300) before half of 700 expected steps: not judged yet.
    assert rule.stops(running_cell(s, [leader, far], prev_best=700.0), set()) == []
    again = rec(1.0, "running", evals=steps, losses=(3.7, 3.5, 3.4), rerun=True)
    assert rule.stops(running_cell(s, [leader, again], prev_best=500.0), set()) == []
    # Stopped by an earlier rule at this call: not judged again.
    assert rule.stops(running_cell(s, [leader, far], prev_best=500.0), {far.trial_id}) == []
    # At any step with prune_at_equal_tokens' margin.
    assert EqualTokenMargin(0.05).stops(running_cell(s, [leader, far], prev_best=700.0), set()) == [far.trial_id]


def test_the_fits_own_rate_stops_once_it_trained_its_fraction_and_needs_clearly_more_steps():
    s = spec()
    steps = (100.0, 200.0, 400.0)
    leader = rec(0.001, "running", evals=steps, losses=(3.5, 3.3, 3.1))
    # It reaches its own 3.4 and 3.3 at 200 and 400 steps, the leader at 141 and 200: 1.68 times its steps.
    trailing = rec(0.01, "running", evals=steps, losses=(3.6, 3.4, 3.3))
    rule = EqualTokenFraction(0.5)
    assert rule.stops(running_cell(s, [leader, trailing], prev_best=700.0), set()) == [trailing.trial_id]
    # Its last evaluation (400) before half of 1000 expected steps: not judged yet.
    assert rule.stops(running_cell(s, [leader, trailing], prev_best=1000.0), set()) == []


def test_a_cells_expected_steps_are_its_best_else_its_neighbours_else_its_budgets_share():
    s = spec(budget_margin=0.25)
    assert running_cell(s, [], seed_best={0: 210.0}, prev_best=300.0).expected_steps == 210.0
    assert running_cell(s, [], prev_best=300.0).expected_steps == 300.0
    # B = 16 at T = 32 under a cap of 250 steps: the cap's share of (1 + budget_margin).
    assert running_cell(s, [], cap=250).expected_steps == pytest.approx(250 / 1.25)


def test_the_specs_stop_rules_in_the_order_they_judge():
    assert stop_rules(spec(stop_far_rates=False)) == (PruneMargin(0.1),)
    far = stop_rules(spec(stop_far_rates=True, far_rate_margin=0.07, far_rate_fraction=0.4))
    assert far == (PruneMargin(0.1), FarRates(0.07, 0.4))
    equal = stop_rules(spec(experimental={"prune_at_equal_tokens": True}))
    assert [type(r) for r in equal] == [PruneMargin, EqualTokenMargin, EqualTokenFraction]
    assert [r.rule for r in equal] == ["prune_margin", "equal_token_margin", "equal_token_fraction"]


# ---------------------------------------------------------------- when a cell is done


def test_an_all_censored_cell_runs_its_censored_trials_again():
    s = spec(stop_far_rates=False)
    first = [rec(0.01, "censored", tokens=500), rec(0.03, "diverged")]
    assert reruns(s, "trial", first, first, 3.0, None, (0.01, 0.03)) == [first[0]]
    assert reruns(s, "trial", first, first, None, None, (0.01, 0.03)) == []  # no target: nothing is read yet


def test_a_pruned_neighbour_of_the_best_runs_again_and_a_far_rate_does_not():
    s = spec(stop_far_rates=False)
    rates = (0.001, 0.01, 0.1, 1.0)
    first = [rec(0.001, "pruned"), rec(0.01, "reached", steps=200.0), rec(0.1, "censored"), rec(1.0, "pruned")]
    assert reruns(s, "trial", first, first, 3.0, 200.0, rates) == [first[0], first[2]]
    # Stopped at equal tokens, a neighbour's steps are projected from its curve: only censored ones again.
    equal = spec(experimental={"prune_at_equal_tokens": True})
    assert reruns(equal, "trial", first, first, 3.0, 200.0, rates) == [first[2]]


def test_a_cell_is_skipped_once_the_smaller_cells_bound_reaches_what_it_could_train():
    s = spec(budget_margin=0.25)
    # A cap of 100 steps at B = 16, T = 32: 51,200 tokens trainable.
    assert skipped(s, s.resolve_settings()[0], 16, 100, 51_200.0)
    assert not skipped(s, s.resolve_settings()[0], 16, 100, 51_199.0)
    assert not skipped(s, s.resolve_settings()[0], 16, 100, 0.0)


def test_a_censored_cell_hands_on_the_fewest_tokens_any_rate_trained():
    recs = [rec(0.01, "censored", tokens=500), rec(0.01, "censored", tokens=800, rerun=True),
            rec(0.03, "censored", tokens=600), rec(0.1, "diverged", tokens=50)]
    assert censored_bound(recs, 0.0) == 600.0  # 0.01 trained 800 at most, 0.03 600
    assert censored_bound(recs, 700.0) == 700.0
    assert censored_bound([rec(0.1, "diverged")], 10.0) == 10.0


def test_a_cells_state():
    assert cell_state("trial", True, True, 200.0, 3.0, True) == ("done", True)
    assert cell_state("trial", False, False, 200.0, 3.0, True) == ("resolved", True)
    assert cell_state("trial", False, False, None, 3.0, True) == ("running", False)
    assert cell_state("trial", False, False, None, None, False) == ("waiting", False)
    # The reference cell resolves once its first runs ended and the target is known.
    assert cell_state("reference", False, True, None, 3.0, True) == ("resolved", True)
    assert cell_state("reference", False, True, None, None, True) == ("running", False)


# ---------------------------------------------------------------- the planner reads what changed


def reference_records(s):
    refs = plan(s, [], now_s=0).start
    steps, end = D // (8 * 32), 125_000 // (8 * 32)
    return [TrialRecord(trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id, role=t.role,
                        batch_size=t.batch_size, lr=t.lr, status="finished", final_eval_loss=2.95,
                        eval_steps=(100, 200, steps, end), eval_losses=(4.0, 3.5, loss, 2.95), tokens=125_000,
                        last_step=end) for t, loss in zip(refs, (3.2, 3.0))]


def as_record(t, status, **kw):
    return TrialRecord(trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id, role=t.role,
                       batch_size=t.batch_size, lr=t.lr, status=status, seed=t.seed, max_steps=t.max_steps, **kw)


def test_a_planner_called_again_plans_only_the_cells_that_changed_and_as_a_fresh_one():
    s = spec()
    planner = Planner(s)
    records = reference_records(s)
    first = planner.plan(records, 0.0)
    assert first == plan(s, records, 0.0)
    started = [as_record(t, "running", heartbeat_s=0.0, eval_steps=(50.0,), eval_losses=(3.5,)) for t in first.start]
    records = records + started
    second = planner.plan(records, 1.0)
    assert second == plan(s, records, 1.0)
    # The b16 trial reaches the target: only its cell (and the one it releases) are planned again.
    at16 = next(i for i, r in enumerate(records) if r.batch_size == 16)
    records[at16] = as_record(records[at16], "reached", steps_to_target=200.0, last_step=200,
                              eval_steps=(50.0, 200.0), eval_losses=(3.5, 2.9))
    third = planner.plan(records, 2.0)
    assert third == plan(s, records, 2.0)
    by_b = {c.batch_size: (c2, c3) for c, c2, c3 in zip(second.cells, second.cells, third.cells)}
    assert by_b[4][0] is by_b[4][1] and by_b[8][0] is by_b[8][1]  # read off unchanged records: kept
    assert by_b[16][0] is not by_b[16][1] and by_b[16][1].steps_to_target == 200.0
    # The same records in another order, and a record gone: as a fresh planner.
    assert planner.plan(records[::-1], 3.0) == plan(s, records[::-1], 3.0)
    assert planner.plan(records[:-1], 4.0) == plan(s, records[:-1], 4.0)


def test_a_planner_without_trainer_configs_plans_the_same_trials_with_none():
    """The simulator's planner (``configs=False``) builds no trainer config: its plans are those of
    the runner's planner with every started trial's ``train_config`` empty."""
    s = spec()
    records = reference_records(s)
    told, bare = Planner(s), Planner(s, configs=False)
    for now in (0.0, 1.0):
        full, empty = told.plan(records, now), bare.plan(records, now)
        assert (len(full.start) > 0) == (now == 0.0) and all(t.train_config for t in full.start)
        assert [t.train_config for t in empty.start] == [{}] * len(full.start)
        assert empty == dataclasses.replace(full, start=tuple(dataclasses.replace(t, train_config={})
                                                              for t in full.start))
        records = records + [as_record(t, "running", heartbeat_s=now, eval_steps=(50.0,), eval_losses=(3.5,))
                             for t in full.start]


def test_a_planner_finds_stale_trials_among_the_running_ones():
    s = spec()
    planner = Planner(s)
    records = reference_records(s)
    started = planner.plan(records, 0.0).start
    records += [as_record(t, "running", heartbeat_s=0.0, attempt=a) for t, a in zip(started, (1, 3))]
    p = planner.plan(records, 500.0, stale_after_s=120.0, max_attempts=3)
    assert p.lost == (started[0].trial_id,) and p.fail == (started[1].trial_id,) and not p.done
    assert p == plan(s, records, 500.0, stale_after_s=120.0, max_attempts=3)
    assert planner.plan(records, 10.0).lost == ()
    assert math.isfinite(p.targets["tiny-0.1M_D100K"])


def _five_rates_with_their_reference_runs_ended():
    """A grid of five rates in the given order, a planner of it, and its reference trials finished."""
    s = spec(search={"kind": "grid", "lrs": [0.001, 0.002, 0.004, 0.008, 0.016], "lr_extensions": 0, "order": "grid"})
    refs = plan(s, [], now_s=0).start
    steps, end = D // (8 * 32), 125_000 // (8 * 32)
    records = [TrialRecord(trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id, role=t.role,
                           batch_size=t.batch_size, lr=t.lr, status="finished", final_eval_loss=2.9,
                           eval_steps=(100, 200, steps, end), eval_losses=(4.0, 3.5, loss, 2.9), tokens=125_000,
                           last_step=end) for t, loss in zip(refs, (3.2, 3.0, 3.1, 3.3, 3.4))]
    return s, Planner(s), records


def test_a_cell_whose_running_trials_only_evaluated_again_is_judged_again_by_its_stop_rules():
    """Between two calls a running trial only evaluated again: the cell's plan is kept but for its
    stops, which the prune margin now asks for, as a fresh planner would."""
    s, planner, records = _five_rates_with_their_reference_runs_ended()
    cell16 = [t for t in planner.plan(records, 0.0).start if t.batch_size == 16]
    records += [as_record(cell16[0], "reached", steps_to_target=200.0, last_step=200)]
    records += [as_record(t, "running", heartbeat_s=0.0, eval_steps=(100.0, 219.0), eval_losses=(4.0, 3.1))
                for t in cell16[1:]]
    before = planner.plan(records, 1.0)
    assert before.stop == () and before == plan(s, records, 1.0)
    slow = len(records) - 1  # the rate farthest from the best: outside its fit window
    records[slow] = as_record(cell16[-1], "running", heartbeat_s=1.0, eval_steps=(100.0, 221.0),
                              eval_losses=(4.0, 3.1))
    after = planner.plan(records, 2.0)
    assert after.stop == ((cell16[-1].trial_id, "pruned"),) and after.stopped_by == {cell16[-1].trial_id: "prune_margin"}
    assert after == plan(s, records, 2.0)
    at16 = [c.batch_size for c in after.cells].index(16)
    assert after.cells[at16] is before.cells[at16]  # the rest of its plan kept, not made again


def test_a_running_trial_that_crosses_at_a_new_evaluation_makes_its_cell_plan_afresh():
    """Only running trials' evaluations moved, none had crossed: the planner looks for a crossing in
    the records that changed alone. One that crosses there (its neighbours unchanged) makes the cell
    plan afresh, its best read off the running trial as a fresh planner reads it; one that moves
    without crossing keeps the plan but for its stops."""
    s, planner, records = _five_rates_with_their_reference_runs_ended()
    first = planner.plan(records, 0.0)
    target = first.targets["tiny-0.1M_D100K"]
    cell16 = [t for t in first.start if t.batch_size == 16]
    records += [as_record(t, "running", heartbeat_s=0.0, eval_steps=(100.0,), eval_losses=(target + 0.5,))
                for t in cell16]
    before = planner.plan(records, 1.0)
    at16 = [c.batch_size for c in before.cells].index(16)
    assert before == plan(s, records, 1.0) and before.cells[at16].steps_to_target is None
    # One trial evaluates again above the target: the plan is kept.
    records[-3] = as_record(cell16[-3], "running", heartbeat_s=1.0, eval_steps=(100.0, 150.0),
                            eval_losses=(target + 0.5, target + 0.2))
    kept = planner.plan(records, 2.0)
    assert kept == plan(s, records, 2.0) and kept.cells[at16] is before.cells[at16]
    # Another crosses the target at its new evaluation: the cell's best is now its crossing.
    records[-2] = as_record(cell16[-2], "running", heartbeat_s=2.0, eval_steps=(100.0, 160.0),
                            eval_losses=(target + 0.5, target - 0.1))
    crossed = planner.plan(records, 3.0)
    assert crossed == plan(s, records, 3.0)
    assert crossed.cells[at16] is not kept.cells[at16] and crossed.cells[at16].steps_to_target is not None


def test_only_a_chained_or_predicting_cell_reads_its_centre_beyond_the_order_it_starts_in():
    assert rate_rule(spec(), 16).orders_only()
    assert not rate_rule(spec(search={"kind": "chained", "lrs": [0.01, 0.03]}), 16).orders_only()
    assert not rate_rule(spec(search={"kind": "grid", "lrs": [0.01, 0.03]}, experimental={"predict": True}),
                         16).orders_only()


def test_a_planner_told_which_records_changed_plans_as_one_that_compares_them_all():
    s = spec()
    told, compares = Planner(s), Planner(s)
    records = reference_records(s)
    first = told.plan(records, 0.0, changed=())
    assert first == compares.plan(records, 0.0)
    records = records + [as_record(t, "running", heartbeat_s=0.0, eval_steps=(50.0,), eval_losses=(3.5,))
                         for t in first.start]
    assert told.plan(records, 1.0, changed=()) == compares.plan(records, 1.0)  # new records are read anyway
    at = len(records) - 1
    records[at] = as_record(records[at], "reached", steps_to_target=200.0, last_step=200,
                            eval_steps=(50.0, 200.0), eval_losses=(3.5, 2.9))
    assert told.plan(records, 2.0, changed=[at]) == compares.plan(records, 2.0) == plan(s, records, 2.0)


def test_a_queued_trial_that_starts_running_changes_its_cells_counts_as_a_fresh_plan_would():
    s = spec()
    planner = Planner(s)
    records = reference_records(s)
    started = planner.plan(records, 0.0).start
    records = records + [as_record(t, "queued") for t in started]
    queued = planner.plan(records, 1.0)
    records = records[:2] + [as_record(t, "running", heartbeat_s=1.0) for t in started]
    running = planner.plan(records, 2.0)
    assert running == plan(s, records, 2.0) and running != queued
    at16 = [c.batch_size for c in running.cells].index(16)
    assert queued.cells[at16].counts == {"queued": 2} and running.cells[at16].counts == {"running": 2}  # two rates


def test_plans_made_at_once_from_several_threads_are_each_the_plan():
    """plan() keeps nothing between calls (the web app plans from several page threads at once)."""
    from concurrent.futures import ThreadPoolExecutor

    s = spec(seeds=[0, 1])
    records = reference_records(s)
    expected = plan(s, records, 5.0)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: plan(s, records, 5.0), range(16)))
    assert all(p == expected for p in got)
