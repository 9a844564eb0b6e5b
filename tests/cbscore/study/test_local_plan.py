"""Issue 24: the ``local`` kind's spec (checkpoints on step boundaries, windows of whole steps of
every branch, bad input named) and its pure planner (base runs first, each branch once its
snapshot is reported, a base that ended without a snapshot named and the study still able to end)."""

from __future__ import annotations

import pytest

from cbscore.errors import ConfigError
from cbscore.study import LocalSnapshots, StudySpec, TrialRecord, estimate, plan
from cbscore.study.local_plan import local_trials, study_checkpoints
from cbscore.study.local_spec import window_unit_tokens


def spec(**local) -> StudySpec:
    fields = {"base_batch_size": 4, "multipliers": [1, 2, 4]}
    fields.update(local)
    return StudySpec.from_dict(dict(name="loc", kind="local", models=["tiny-0.1M"], tokens=[4096], context_tokens=16,
                                    local=fields))


FOLDERS = {0: "/snap/s0"}


def record(trial_id: str, status: str, tokens: int = 0) -> TrialRecord:
    return TrialRecord(trial_id=trial_id, cell_id="c", setting_id="tiny-0.1M_D4.096K", role="base", batch_size=4,
                       lr=0.01, status=status, tokens=tokens)


def test_default_checkpoints_are_halvings_of_d_on_whole_steps_with_windows_of_whole_branch_steps():
    s = spec(checkpoint_count=3, window_rule="growing")
    assert s.batch_sizes == (4, 8, 16) and s.b_ref == 4  # derived: every k·B0, and B0
    cps = study_checkpoints(s)
    assert [c.tokens for c in cps] == [512, 1024, 2048]  # D/8, D/4, D/2: multiples of B0·T = 64
    assert window_unit_tokens(s.local, 16) == 16 * 16  # lcm(4, 8, 16) sequences of 16 tokens
    assert [c.window_tokens for c in cps] == [256, 512, 1024]  # growing: t/2, rounded up to 256
    odd = spec(checkpoint_count=0, checkpoint_tokens=[640], multipliers=[1, 1.5, 3])  # lcm(4, 6, 12) = 12
    [c] = study_checkpoints(odd)
    assert c.window_tokens == 2 * 12 * 16  # 320 tokens rounded up to 384
    assert StudySpec.from_dict(odd.to_dict()) == odd


def test_early_multipliers_go_to_the_first_checkpoints_only():
    s = spec(checkpoint_count=2, early_multipliers=[0.5], early_checkpoints=1)
    first, second = study_checkpoints(s)
    assert first.multipliers == (0.5, 1.0, 2.0, 4.0) and second.multipliers == (1.0, 2.0, 4.0)
    assert s.batch_sizes == (2, 4, 8, 16)


@pytest.mark.parametrize(("local", "message"), [
    ({"multipliers": [1, 1.3]}, "local.multipliers: must make k·B0 a whole batch (B0 = 4), but got 1.3."),
    ({"multipliers": [2, 4]}, "local.multipliers: must contain 1 (the base run's own batch), but got [2.0, 4.0]."),
    ({"early_multipliers": [0.3]}, "local.early_multipliers: must make k·B0 a whole batch (B0 = 4), but got 0.3."),
    ({"checkpoint_tokens": [100]}, "local.checkpoint_tokens: must be a multiple of B0·T = 64 tokens"),
    ({"checkpoint_tokens": [4096]}, "local.checkpoint_tokens: must be below the base run's D = 4096 tokens"),
    ({"window_tokens": 100}, "local.window_tokens: must be a multiple of 256 tokens"),
    ({"lr_rule": "cubic"}, "local.lr_rule: must be one of sqrt, linear, but got 'cubic'."),
    ({"base_lr": -1}, "local.base_lr: must be in (0, 10], but got -1."),
    ({"colour": "red"}, "local.colour: is not a local field"),
])
def test_bad_local_input_names_the_field_and_the_value(local, message):
    with pytest.raises(ConfigError) as err:
        spec(**local)
    assert str(err.value).startswith(message)


def test_a_local_study_takes_one_model_and_one_budget_and_no_other_kind_takes_local():
    with pytest.raises(ConfigError, match="^tokens: a local study takes exactly one token budget"):
        StudySpec.from_dict(dict(name="x", kind="local", models=["tiny-0.1M"], tokens=[4096, 8192], context_tokens=16))
    with pytest.raises(ConfigError, match="^local: applies to kind local only"):
        StudySpec.from_dict(dict(name="x", kind="fixed_n", models=["tiny-0.1M"], tokens=[4096], batch_sizes=[4],
                                 b_ref=4, local={}))


def test_branches_start_once_their_snapshot_is_reported_and_carry_the_base_on():
    s = spec(checkpoint_count=2).replace(seeds=(0, 1))
    folders = {0: "/snap/s0", 1: "/snap/s1"}
    first = plan(s, [], 0.0, snapshots=LocalSnapshots(folders=folders))
    assert [t.trial_id for t in first.start] == ["loc.base.s0", "loc.base.s1"] and not first.done
    base0 = first.start[0].train_config
    assert base0["branch"]["snapshot_dir"] == "/snap/s0" and base0["branch"]["snapshot_tokens"] == [1024, 2048]
    running = [record("loc.base.s0", "running", 1100), record("loc.base.s1", "running", 900)]
    p = plan(s, running, 0.0, snapshots=LocalSnapshots(folders=folders, ready={0: frozenset({1024}),
                                                                                1: frozenset()}))
    assert [t.trial_id for t in p.start] == ["loc.t1024.k1.s0", "loc.t1024.k2.s0", "loc.t1024.k4.s0"]
    k2 = p.start[1]
    tc = k2.train_config
    assert (k2.batch_size, k2.role, k2.cell_id) == (8, "branch", "tiny-0.1M_D4.096K.t1024.k2")
    assert k2.lr == pytest.approx(0.01 * 2 ** 0.5)  # √k·η0 (Malladi et al. 2022)
    assert tc["branch"]["branch_from"] == "/snap/s0/tokens-000000000001024" and tc["branch"]["branch_tokens"] == 1024
    assert tc["branch"]["branch_step"] == 1024 // 64 and tc["max_tokens"] == 1024 + 512
    assert tc["beta2"] == base0["beta2"] and tc["warmup_tokens"] == base0["warmup_tokens"]  # the base's recipe
    assert estimate(s).trials == 2 * (1 + 2 * 3) == len(local_trials(s, folders))


def test_a_base_that_ended_without_a_snapshot_is_named_and_the_study_can_end():
    s = spec(checkpoint_count=2)
    ended = [record("loc.base.s0", "diverged", 1500)]
    branches = [record(f"loc.t1024.k{k}.s0", "finished") for k in (1, 2, 4)]
    p = plan(s, ended + branches, 0.0, snapshots=LocalSnapshots(folders=FOLDERS, ready={0: frozenset({1024})}))
    assert not p.start and p.done
    assert p.errors == tuple(f"branch loc.t2048.k{k}.s0: base run loc.base.s0 ended diverged before its snapshot at "
                             "2048 tokens" for k in (1, 2, 4))
    assert [c.state for c in p.cells] == ["done", "done", "done", "done", "skipped", "skipped", "skipped"]


def test_a_lost_branch_runs_again_and_keeps_the_study_open():
    s = spec(checkpoint_count=1)
    recs = [record("loc.base.s0", "finished", 4096), record("loc.t2048.k1.s0", "lost"),
            record("loc.t2048.k2.s0", "finished"), record("loc.t2048.k4.s0", "finished")]
    p = plan(s, recs, 0.0, snapshots=LocalSnapshots(folders=FOLDERS, ready={0: frozenset({2048})}))
    assert p.lost == ("loc.t2048.k1.s0",) and not p.start and not p.done


# ------------------------------------------------------------------ issue 39: fixed windows, the branches' averages
def test_the_default_window_is_fixed_in_tokens_across_checkpoints_and_the_growing_rule_is_an_option():
    s = spec(checkpoint_count=3)
    assert (s.local.window_rule, s.local.averaging) == ("fixed", "branch")
    # Merrill et al.: one Δ at every checkpoint, window_fraction × the first (512 → 256 tokens, whole steps of k = 4)
    assert [c.window_tokens for c in study_checkpoints(s)] == [256, 256, 256]
    assert [c.window_tokens for c in study_checkpoints(spec(checkpoint_count=3, window_tokens=768))] == [768] * 3
    grow = spec(checkpoint_count=3, window_rule="growing")
    assert [c.window_tokens for c in study_checkpoints(grow)] == [256, 512, 1024]
    for s in (spec(checkpoint_count=3), grow, spec(averaging="tokens", window_tokens=512)):
        assert StudySpec.from_dict(s.to_dict()) == s


def test_a_spec_stored_before_issue_39_keeps_its_growing_window_and_carried_averages():
    stored = spec(checkpoint_count=3, window_rule="growing", averaging="carry").to_dict()
    del stored["local"]["window_rule"], stored["local"]["averaging"]  # as an earlier to_dict wrote it
    earlier = StudySpec.from_dict(stored)
    assert (earlier.local.window_rule, earlier.local.averaging) == ("growing", "carry")
    assert [c.window_tokens for c in study_checkpoints(earlier)] == [256, 512, 1024]
    stored["local"]["window_tokens"] = 256  # then a given Δ was already fixed
    assert StudySpec.from_dict(stored).local.window_rule == "fixed"


@pytest.mark.parametrize(("local", "message"), [
    ({"window_rule": "sliding"}, "local.window_rule: must be one of fixed, growing, but got 'sliding'."),
    ({"window_rule": "growing", "window_tokens": 256}, "local.window_tokens: is a fixed Δ: it needs window_rule fixed"),
    ({"averaging": "ewa"}, "local.averaging: must be one of branch, tokens, carry, but got 'ewa'."),
])
def test_bad_window_rules_and_averagings_name_the_field_and_the_value(local, message):
    with pytest.raises(ConfigError) as err:
        spec(**local)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(("averaging", "branch_ewa", "ewa_batch_size"),
                         [("branch", "reset", 4), ("tokens", "carry", 4), ("carry", "carry", None)])
def test_branches_train_on_the_average_the_spec_names(averaging, branch_ewa, ewa_batch_size):
    from cbscore.local import AVERAGING
    from cbscore.study.local_spec import AVERAGING as SPEC_AVERAGING
    from cbscore.train.config import TrainConfig

    assert SPEC_AVERAGING == AVERAGING  # the spec's copy (it imports no torch) is the branches' list
    s = spec(checkpoint_count=2, averaging=averaging)
    for t in local_trials(s, FOLDERS):
        config = TrainConfig.from_dict(t.train_config)
        if t.role == "branch":  # k·B0 sequences a step decay by τ^k with an anchor of B0 = 4
            assert (config.branch.branch_ewa, config.ewa_batch_size) == (branch_ewa, ewa_batch_size)
        else:
            assert (config.branch.branch_ewa, config.ewa_batch_size) == ("carry", None)
