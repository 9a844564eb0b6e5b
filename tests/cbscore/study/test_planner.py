"""The planner as a pure function: targets, release order, pruning, caps, stale trials."""

from __future__ import annotations

import math

import pytest

from cbscore.analysis._points import FIT_NEIGHBOURS
from cbscore.study import StudySpec, TrialRecord, plan, skipped_trials, trial_from_ask

D = 100_000


def spec(**changes) -> StudySpec:
    base = dict(name="t", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": D}],
                batch_sizes=[4, 8, 16, 32], b_ref=8, context_tokens=32,
                search={"kind": "grid", "lrs": [0.01, 0.03], "lr_extensions": 0}, prune_margin=0.1)
    base.update(changes)
    # These tests name trials by where they start; the order by prediction (search.order) is
    # tested in test_cheaper_search.py.
    base["search"] = {"order": "grid", **base["search"]}
    return StudySpec.from_dict(base)


def rec(trial, status, **kw) -> TrialRecord:
    return TrialRecord(trial_id=trial.trial_id, cell_id=trial.cell_id, setting_id=trial.setting_id, role=trial.role,
                       batch_size=trial.batch_size, lr=trial.lr, status=status, **kw)


def finish_reference(s, losses=(3.2, 3.0)):
    first = plan(s, [], now_s=0)
    refs = first.start
    steps = D // (8 * 32)  # 390 optimizer steps at B_ref: D
    end = 125_000 // (8 * 32)  # 488: the reference budget, 1.25·D
    # By the end every run is below ~3.0 (it crosses the target: no neighbour needs a re-run).
    late = [min(loss * (end / steps) ** -0.1, 2.98) for loss in losses]
    return [rec(t, "finished", final_eval_loss=last, eval_steps=(100, 200, steps, end),
                eval_losses=(4.0, 3.5, loss, last), tokens=125_000, last_step=end)
            for t, loss, last in zip(refs, losses, late)]


def test_first_plan_starts_only_the_reference_cell():
    s = spec()
    p = plan(s, [], now_s=0)
    assert {t.batch_size for t in p.start} == {8}
    assert {t.role for t in p.start} == {"reference"}
    assert sorted(t.lr for t in p.start) == [0.01, 0.03]
    # The reference runs train (1 + budget_margin)·D: the target is their fitted loss at D, and they
    # must be able to cross it after D (S(B_ref) measured like any other cell's).
    assert all(t.target_loss is None and t.max_tokens == 125_000 for t in p.start)
    assert all(t.train_config["warmup_tokens"] == D // 4 for t in p.start)
    assert not p.done and p.targets == {}


def test_target_is_best_reference_loss_and_releases_two_chains():
    s = spec()
    records = finish_reference(s)
    p = plan(s, records, now_s=0)
    # The whole cell's loss at D (cbscore.analysis.reference_target): the best run's evaluated 3.0
    # at D, read off a local fit of its evaluations around D.
    target = p.targets["tiny-0.1M_D100K"]
    assert target == pytest.approx(3.0, abs=0.05)
    # The smallest batch size and the one above B_ref start; 16 waits for... nothing, 32 waits for 16.
    assert sorted({t.batch_size for t in p.start}) == [4, 16]
    assert all(t.target_loss == target for t in p.start)
    # Below B_ref: (1 + budget_margin)·D tokens, E(B) <= E(B_ref) = D (McCandlish et al., eq. 2.12).
    assert {t.max_tokens for t in p.start if t.batch_size == 4} == {125_000}
    assert {t.max_steps for t in p.start if t.batch_size == 4} == {None}
    # Above B_ref the step cap is the budget: 1.25 × S(B_ref), where the best reference crossed at its
    # last eval, whatever that is in tokens (S(B) does not grow with B, eq. 2.11).
    s_ref = {c.batch_size: c.steps_to_target for c in p.cells}[8]  # the reference cell's crossing
    assert 300 < s_ref <= 390  # the best run's crossing of the target, at or before D
    cap = math.ceil(1.25 * s_ref)
    assert {t.max_steps for t in p.start if t.batch_size == 16} == {cap}
    assert {t.max_tokens for t in p.start if t.batch_size == 16} == {cap * 16 * 32}
    states = {c.batch_size: c.state for c in p.cells}
    assert states == {4: "running", 8: "done", 16: "running", 32: "waiting"}


def test_replanning_is_idempotent():
    s = spec()
    records = finish_reference(s)
    assert plan(s, records, now_s=5) == plan(s, records, now_s=5)
    started = plan(s, records, now_s=5).start
    queued = records + [rec(t, "queued") for t in started]
    assert plan(s, queued, now_s=6).start == ()


RATES = [0.001, 0.002, 0.004, 0.008, 0.016]


def five_rates(**changes):
    return spec(search={"kind": "grid", "lrs": RATES, "lr_extensions": 0}, **changes)


def test_reach_prunes_slow_trials_and_releases_next_cell_with_cap():
    s = five_rates()
    records = finish_reference(s, losses=(3.2, 3.0, 3.1, 3.3, 3.4))
    cell16 = [t for t in plan(s, records, now_s=0).start if t.batch_size == 16]
    fast, near, slow = cell16[0], cell16[FIT_NEIGHBOURS], cell16[FIT_NEIGHBOURS + 1]
    records += [rec(fast, "reached", steps_to_target=200.0, last_step=200)]
    records += [rec(t, "running", last_step=221, heartbeat_s=99.0, eval_steps=(100, 221), eval_losses=(4, 3.1))
                for t in cell16[1:]]
    p = plan(s, records, now_s=100)
    # Past 1.1 × 200 at an evaluation: pruned, except the best rate's neighbours (S(B) is read off a
    # fit through the best rate and FIT_NEIGHBOURS rates on each side).
    assert near.trial_id not in dict(p.stop)
    assert (slow.trial_id, "pruned") in p.stop
    assert len(p.stop) == len(cell16) - 1 - FIT_NEIGHBOURS
    # Each stop names its rule (the runner tags the run with it; reports split pruned tokens by it).
    assert dict(p.stopped_by) == {tid: "prune_margin" for tid, _ in p.stop}
    b32 = [t for t in p.start if t.batch_size == 32]
    assert len(b32) == 5 and {t.max_steps for t in b32} == {250}  # ceil(1.25 × 200)


def test_pruning_compares_a_trial_with_the_best_of_its_own_seed():
    """Seeds are repeats: seed 1's fast crossing never stops seed 0's trials."""
    s = five_rates(seeds=[0, 1])
    refs = plan(s, [], now_s=0).start
    records = [rec(t, "finished", final_eval_loss=2.5 + 0.01 * i, eval_steps=(100, 200, 390, 488),
                   eval_losses=(4.0, 3.5, 3.0 + 0.01 * i, 2.5 + 0.01 * i), tokens=125_000, last_step=488, seed=t.seed)
               for i, t in enumerate(refs)]
    cell16 = [t for t in plan(s, records, now_s=0).start if t.batch_size == 16]
    by = {(t.seed, t.lr): t for t in cell16}
    far = RATES[FIT_NEIGHBOURS + 1]
    records += [rec(by[(1, RATES[0])], "reached", steps_to_target=200.0, last_step=200, seed=1),
                rec(by[(0, far)], "running", last_step=300, heartbeat_s=99.0, eval_steps=(100, 300),
                    eval_losses=(4, 3.1), seed=0),
                rec(by[(1, far)], "running", last_step=300, heartbeat_s=99.0, eval_steps=(100, 300),
                    eval_losses=(4, 3.1), seed=1)]
    assert plan(s, records, now_s=100).stop == ((by[(1, far)].trial_id, "pruned"),)


def test_a_trial_past_the_limit_but_not_yet_evaluated_there_is_not_pruned():
    """Pruning looks at evaluated steps only: trained to step 300 (> 1.1 × 200) but last evaluated
    at 210 above the target, the trial may have crossed at 215 < 220 and be the cell's best."""
    s = five_rates()
    records = finish_reference(s, losses=(3.2, 3.0, 3.1, 3.3, 3.4))
    cell16 = [t for t in plan(s, records, now_s=0).start if t.batch_size == 16]
    fast, slow = cell16[0], cell16[FIT_NEIGHBOURS + 1]
    records += [rec(fast, "reached", steps_to_target=200.0, last_step=200),
                rec(slow, "running", last_step=300, heartbeat_s=99.0, eval_steps=(100, 210), eval_losses=(4, 3.01))]
    assert plan(s, records, now_s=100).stop == ()
    records[-1] = rec(slow, "running", last_step=300, heartbeat_s=99.0, eval_steps=(100, 210, 230),
                      eval_losses=(4, 3.01, 3.005))
    assert plan(s, records, now_s=100).stop == ((slow.trial_id, "pruned"),)


def skip_spec():
    """B_ref = 32, the largest: the cells 4 -> 8 -> 16 below it share a token budget of 1.25·D."""
    return spec(b_ref=32)


def reference32(s, loss=3.0):
    refs = plan(s, [], now_s=0).start
    steps = D // (32 * 32)
    return [rec(t, "finished", final_eval_loss=loss, eval_steps=(50, steps), eval_losses=(4.0, loss), tokens=D,
                last_step=steps) for t in refs]


def censor_cell8(s, records, statuses=("censored", "censored"), tokens=None):
    """B=4 reached at 700 steps; the B=8 cell ends with no trial at the target after its whole
    token budget (1.25·D = 125,000 tokens is 488 steps of 256 tokens) unless ``tokens`` says
    otherwise."""
    cell4 = [t for t in plan(s, records, now_s=0).start if t.batch_size == 4]
    records = records + [rec(t, "reached", steps_to_target=700.0, tokens=700 * 4 * 32, last_step=700)
                         for t in cell4]
    cell8 = [t for t in plan(s, records, now_s=0).start if t.batch_size == 8]
    budget = (125_000 // (8 * 32)) * 8 * 32
    return records + [rec(t, st, tokens=budget if tokens is None else tokens, last_step=488,
                          eval_steps=(100, 488), eval_losses=(3.6, 3.2)) for t, st in zip(cell8, statuses)]


def rerun_censored(s, records):
    """The planner re-runs a cell whose every rate ended censored once at twice its budget: end
    those second runs censored too, after twice the tokens."""
    p = plan(s, records, now_s=0)
    again = [t for t in p.start if t.trial_id.endswith(".x2")]
    first = {r.trial_id: r for r in records}
    return records + [rec(t, "censored", tokens=2 * first[t.trial_id[:-3]].tokens,
                          last_step=2 * first[t.trial_id[:-3]].last_step, eval_steps=(100, 976),
                          eval_losses=(3.6, 3.2)) for t in again]


def test_a_cell_censored_at_its_budget_is_re_run_once_at_twice_it():
    s = skip_spec()
    records = censor_cell8(s, reference32(s))
    p = plan(s, records, now_s=0)
    again = [t for t in p.start if t.batch_size == 8]
    assert len(again) == 2 and all(t.trial_id.endswith(".x2") for t in again)
    assert {t.max_tokens for t in again} == {250_000}  # twice (1 + budget_margin)·D
    assert {c.batch_size: c.state for c in p.cells}[16] == "waiting"


def test_cells_above_a_cell_censored_at_its_budget_are_skipped():
    """E(B) = B·T·S(B) never falls with B (McCandlish et al. 2018, eq. 2.12): once B=8 needs more
    than twice the budget (its re-run censored too), B=16 (the first budget) could only be
    censored, so it is skipped."""
    s = skip_spec()
    records = rerun_censored(s, censor_cell8(s, reference32(s)))
    p = plan(s, records, now_s=0)
    states = {c.batch_size: c.state for c in p.cells}
    assert states[8] == "done" and states[16] == "skipped" and states[32] == "done"
    assert p.start == ()
    assert skipped_trials(p) == 2
    assert p.done


@pytest.mark.parametrize("statuses,tokens", [
    (("censored", "failed"), None),  # a learning rate that never ran: E(8) unknown
    (("censored", "censored"), 150 * 8 * 32),  # censored at a step cap, well inside the budget
    (("diverged", "diverged"), None),  # no learning rate trained without blowing up
])
def test_a_cell_is_not_skipped_without_a_bound_above_its_budget(statuses, tokens):
    s = skip_spec()
    records = rerun_censored(s, censor_cell8(s, reference32(s), statuses, tokens))
    p = plan(s, records, now_s=0)
    assert {c.batch_size: c.state for c in p.cells}[16] == "running"
    assert sorted({t.batch_size for t in p.start}) == [16] and skipped_trials(p) == 0


def test_a_diverged_learning_rate_does_not_stop_the_skip():
    s = skip_spec()
    p = plan(s, rerun_censored(s, censor_cell8(s, reference32(s), ("censored", "diverged"))), now_s=0)
    assert {c.batch_size: c.state for c in p.cells}[16] == "skipped"


def test_a_cell_censored_above_b_ref_is_re_run_once_at_twice_its_cap_then_bounds_the_next():
    """Above B_ref budgets are steps: B=16 censored at its cap is re-run once at twice the cap (the
    cap came from a noisy smaller cell); censored again, S(16) > 2·cap is a lower bound, and
    E(32) ≥ E(16) > 2·cap·16·T = cap·32·T, B=32's whole budget at the same cap: it is skipped."""
    s = spec()
    records = finish_reference(s)
    cell16 = [t for t in plan(s, records, now_s=0).start if t.batch_size == 16]
    cap = cell16[0].max_steps
    records += [rec(t, "censored", tokens=cap * 16 * 32, last_step=cap, eval_steps=(100, cap),
                    eval_losses=(3.6, 3.2), max_steps=cap) for t in cell16]
    p = plan(s, records, now_s=0)
    again = [t for t in p.start if t.batch_size == 16]
    assert sorted(t.trial_id for t in again) == sorted(t.trial_id + ".x2" for t in cell16)
    assert {t.max_steps for t in again} == {2 * cap}
    assert {c.batch_size: c.state for c in p.cells}[32] == "waiting"
    records += [rec(t, "censored", tokens=2 * cap * 16 * 32, last_step=2 * cap, eval_steps=(100, 2 * cap),
                    eval_losses=(3.6, 3.2), max_steps=2 * cap) for t in again]
    p = plan(s, records, now_s=0)
    assert not [t for t in p.start if t.batch_size == 16]  # once only
    assert {c.batch_size: c.state for c in p.cells}[32] == "skipped"


def test_a_reference_neighbour_that_did_not_cross_the_target_is_run_on_to_it():
    """S(B_ref) is read off the best rate and its neighbours like any cell's: a neighbour that had not
    crossed the target by the end of its (1 + margin)·D is run again to twice that, stopping at the
    target. Its re-run never moves the target, and the cells above B_ref do not wait for it."""
    s = spec()
    refs = plan(s, [], now_s=0).start
    records = [rec(refs[0], "finished", final_eval_loss=3.1, eval_steps=(100, 200, 390, 488),
                   eval_losses=(4.0, 3.5, 3.2, 3.1), tokens=125_000, last_step=488),
               rec(refs[1], "finished", final_eval_loss=2.95, eval_steps=(100, 200, 390, 488),
                   eval_losses=(4.0, 3.5, 3.0, 2.95), tokens=125_000, last_step=488)]
    p = plan(s, records, now_s=0)
    target = p.targets["tiny-0.1M_D100K"]
    again = [t for t in p.start if t.batch_size == 8]
    assert [t.trial_id for t in again] == [refs[0].trial_id + ".x2"]
    assert again[0].role == "reference" and again[0].target_loss == target and again[0].max_tokens == 250_000
    assert sorted({t.batch_size for t in p.start}) == [4, 8, 16]  # B = 16 released beside it
    records.append(rec(again[0], "reached", steps_to_target=700.0, last_step=700, tokens=700 * 8 * 32))
    p = plan(s, records, now_s=0)
    assert p.targets["tiny-0.1M_D100K"] == target
    assert {c.batch_size: c.state for c in p.cells}[8] == "done"


def test_a_cell_whose_best_rate_is_at_an_edge_gets_the_next_rate_past_it():
    s = spec(search={"kind": "grid", "lrs": [0.003, 0.01, 0.03], "lr_extensions": 1})
    records = finish_reference(s, losses=(3.2, 3.1, 3.0))  # the largest rate is the best
    p = plan(s, records, now_s=0)
    assert p.targets == {}  # the reference cell may still change: no target yet
    extra = [t for t in p.start if t.batch_size == 8]
    assert [t.lr for t in extra] == [0.09]  # 0.03 × (0.03 / 0.01), the grid's outermost ratio
    records += [rec(extra[0], "finished", final_eval_loss=2.95, eval_steps=(100, 200, 390, 488),
                    eval_losses=(4.0, 3.5, 3.05, 2.95), tokens=125_000, last_step=488)]
    p = plan(s, records, now_s=0)
    assert set(p.targets) == {"tiny-0.1M_D100K"}
    assert not [t for t in p.start if t.batch_size == 8]


def test_stale_heartbeat_is_lost_then_failed_at_attempt_cap():
    s = spec()
    ref = plan(s, [], now_s=0).start
    running = [rec(ref[0], "running", heartbeat_s=0.0, attempt=1), rec(ref[1], "running", heartbeat_s=0.0, attempt=3)]
    p = plan(s, running, now_s=500, stale_after_s=120, max_attempts=3)
    assert p.lost == (ref[0].trial_id,)
    assert p.fail == (ref[1].trial_id,)
    assert plan(s, running, now_s=100, stale_after_s=120).lost == ()


def test_all_reference_runs_diverged_stops_the_setting_with_a_reason():
    s = spec()
    refs = plan(s, [], now_s=0).start
    records = [rec(t, "diverged", final_eval_loss=math.inf) for t in refs]
    p = plan(s, records, now_s=0)
    assert p.start == () and p.done
    assert p.errors and "no reference run" in p.errors[0] and "tiny-0.1M_D100K" in p.errors[0]


def test_study_is_done_when_every_cell_is_complete():
    s = spec(batch_sizes=[8, 16, 32])
    records = finish_reference(s)
    for _ in range(3):
        for t in plan(s, records, now_s=0).start:
            records.append(rec(t, "reached", steps_to_target=100.0, last_step=100))
    p = plan(s, records, now_s=0)
    assert p.start == () and p.done


def test_explicit_targets_skip_reference_runs():
    s = spec(target_losses={"tiny-0.1M_D100K": 4.2})
    p = plan(s, [], now_s=0)
    assert p.targets == {"tiny-0.1M_D100K": 4.2}
    assert {(t.batch_size, t.role, t.target_loss) for t in p.start} == {(4, "trial", 4.2)}


def test_optuna_cells_ask_within_the_parallel_limit():
    s = spec(search={"kind": "optuna", "n_trials": 3, "parallel_per_cell": 2})
    p = plan(s, [], now_s=0)
    assert p.start == ()
    (ask,) = p.ask
    assert (ask.batch_size, ask.role, ask.count, ask.first_number) == (8, "reference", 2, 0)
    trials = [trial_from_ask(s, ask, lr=0.02, number=n) for n in range(2)]
    assert trials[0].trial_id == "t.tiny-0.1M_D100K.b8.o0.s0" and trials[0].search_number == 0
    one_running = [rec(trials[0], "finished", final_eval_loss=3.0), rec(trials[1], "running", heartbeat_s=0.0)]
    (ask,) = plan(s, one_running, now_s=1).ask
    assert (ask.count, ask.first_number) == (1, 2)


def test_micro_batch_applies_above_it_only():
    """Gradient accumulation splits the batch sizes above the micro-batch; smaller ones run whole."""
    s = spec(micro_batch_size=8)
    trials = plan(s, finish_reference(s), now_s=0).start
    assert {t.batch_size: t.train_config["micro_batch_size"] for t in trials} == {4: None, 16: 8}
    assert plan(s, [], now_s=0).start[0].train_config["micro_batch_size"] is None  # B_ref = 8 itself
    with pytest.raises(Exception, match=r"^micro_batch_size: must divide every larger batch size \(it does not divide \[32\]\)"):
        spec(micro_batch_size=12, batch_sizes=[4, 8, 32])


def test_devices_per_trial_splits_each_batch_and_the_micro_batch_applies_per_device():
    """Two devices per trial: every trial's config asks for 2 ranks; the micro-batch splits the
    per-device batch (B/2) only where it is larger."""
    s = spec(micro_batch_size=4, devices_per_trial=2)
    trials = plan(s, finish_reference(s), now_s=0).start
    assert {t.train_config["devices"] for t in trials} == {2}
    assert {t.batch_size: t.train_config["micro_batch_size"] for t in trials} == {4: None, 16: 4}
    assert plan(s, [], now_s=0).start[0].train_config["micro_batch_size"] is None  # B_ref = 8: 4 per device
    assert spec().to_dict()["devices_per_trial"] == 1
    with pytest.raises(Exception, match=r"^devices_per_trial: must divide every batch size \(it does not divide \[4\]\), but got 8\.$"):
        spec(devices_per_trial=8, batch_sizes=[4, 8, 16])
    with pytest.raises(Exception, match=r"^micro_batch_size: must divide every larger per-device batch \(batch size / 2\)"):
        spec(micro_batch_size=3, devices_per_trial=2, batch_sizes=[4, 8, 16])


def test_gns_split_applies_to_the_chosen_cells_with_a_half_life_in_tokens_of_d():
    """``gns_micro_batch_size`` splits the cells that measure the noise scale; 10% of D smooths them."""
    s = spec(gns_micro_batch_size=2)
    refs = plan(s, [], now_s=0).start
    assert {t.train_config["gns_micro_batch_size"] for t in refs} == {2}
    trials = plan(s, finish_reference(s), now_s=0).start
    assert {t.batch_size: t.train_config["gns_micro_batch_size"] for t in trials} == {4: 2, 16: 2}
    assert {t.train_config["gns_half_life_tokens"] for t in refs + trials} == {D // 10}
    only_ref = spec(gns_micro_batch_size=2, gns_cells="reference")
    assert {t.train_config["gns_micro_batch_size"] for t in plan(only_ref, [], now_s=0).start} == {2}
    later = plan(only_ref, finish_reference(only_ref), now_s=0).start
    assert {t.batch_size: t.train_config["gns_micro_batch_size"] for t in later} == {4: None, 16: None}
    # with micro_batch_size the split must divide the pass it splits
    assert spec(micro_batch_size=8, gns_micro_batch_size=4).gns_batch_sizes() == (8, 16, 32)


def test_gns_spec_fields_are_checked():
    with pytest.raises(Exception, match=r"^gns_micro_batch_size: must be smaller than b_ref=8 .*but got 8\.$"):
        spec(gns_micro_batch_size=8)
    with pytest.raises(Exception, match=r"^gns_micro_batch_size: must divide batch size 4, but got 3\.$"):
        spec(gns_micro_batch_size=3)
    with pytest.raises(Exception, match=r"^gns_micro_batch_size: must divide micro_batch_size=4, but got 3\.$"):
        spec(micro_batch_size=4, batch_sizes=[8, 16], gns_micro_batch_size=3)
    with pytest.raises(Exception, match=r"^gns_micro_batch_size: must be a positive integer, but got 0\.$"):
        spec(gns_micro_batch_size=0)
    with pytest.raises(Exception, match=r"^gns_cells: must be one of all, reference, but got 'some'\.$"):
        spec(gns_cells="some")
    with pytest.raises(Exception, match=r"^forecast_from: must name another study, not this one, but got 't'\.$"):
        spec(forecast_from="t")
    s = spec(gns_micro_batch_size=4, gns_cells="reference", forecast_from="earlier")
    assert StudySpec.from_dict(s.to_dict()) == s
