"""The warm-up phase of a local study (issue 24): ``local.warmup_run`` and its schedule in the
spec (bad input named with its value), the three arms per seed in the pure planner (equal tokens,
the schedule, the rates, one learning-rate schedule in tokens for all three), and the extension
that switches it on once and only once."""

from __future__ import annotations

import math

import pytest

from cbscore.errors import ConfigError
from cbscore.study import LocalSnapshots, StudySpec, TrialRecord, estimate, plan
from cbscore.study.extend import extend_spec
from cbscore.study.local_plan import local_trials
from cbscore.train.config import TrainConfig

SQRT2 = math.sqrt(2)
SCHEDULE = [[1024, 8, SQRT2], [2048, 16, 2.0]]


def spec(**local) -> StudySpec:
    """B0 = 4, T = 16, D = 4,096 tokens, checkpoints at 1,024 and 2,048, k ∈ {1, 2}."""
    fields = {"base_batch_size": 4, "base_lr": 0.01, "checkpoint_count": 2, "multipliers": [1, 2]}
    fields.update(local)
    return StudySpec.from_dict(dict(name="loc", kind="local", models=["tiny-0.1M"], tokens=[4096], context_tokens=16,
                                    seeds=[0, 1], local=fields))


def test_the_arms_start_at_once_per_seed_at_equal_tokens_with_the_schedule_and_its_rates():
    s = spec(warmup_run=True, warmup_schedule=SCHEDULE)
    assert s.batch_sizes == (4, 8, 16)  # B = 16 is no branch's, but the large control's: its records are the study's
    assert StudySpec.from_dict(s.to_dict()) == s
    p = plan(s, [], 0.0, snapshots=LocalSnapshots(folders={0: "/snap/s0", 1: "/snap/s1"}))
    arms = {t.trial_id: t for t in p.start if t.role != "base"}
    assert sorted(arms) == sorted(f"loc.{r}.s{seed}" for r in ("warmup", "control-small", "control-large")
                                  for seed in (0, 1))
    configs = {t.role: TrainConfig.from_dict(t.train_config) for t in arms.values() if t.seed == 1}
    warm, small, large = configs["warmup"], configs["control-small"], configs["control-large"]
    assert warm.branch.batch_schedule == ((1024, 8, SQRT2), (2048, 16, 2.0)) and (warm.batch_size, warm.lr) == (4, 0.01)
    assert (small.batch_size, small.lr, small.branch) == (4, 0.01, None)  # one batch: no branch fields
    assert (large.batch_size, large.branch) == (16, None) and large.lr == pytest.approx(0.02)
    assert [c.batch_plan().end_tokens for c in (warm, small, large)] == [4096] * 3  # equal tokens
    assert [c.total_steps for c in (warm, small, large)] == [32, 64, 16]
    assert {c.seed for c in configs.values()} == {1} and not any(c.branch and c.branch.snapshot_tokens for c in configs.values())
    # one learning-rate schedule in tokens (the base's warm-up, anchored at B0): the same rate at every token
    base = TrainConfig.from_dict(next(t for t in p.start if t.trial_id == "loc.base.s1").train_config)
    for tokens in (0, 256, 1024, 3000):
        rates = [c.lr_schedule().lr_at_tokens(tokens) / c.lr for c in (warm, small, large)]
        assert rates == [pytest.approx(base.lr_schedule().lr_at_tokens(tokens) / base.lr)] * 3
    assert {(c.beta2, c.ewa_taus) for c in configs.values()} == {(base.resolved_beta2(), base.resolved_ewa_taus())}
    cells = {c.cell_id: c for c in p.cells}
    assert cells["tiny-0.1M_D4.096K.control-large"].batch_size == 16 and cells["tiny-0.1M_D4.096K.warmup"].n_trials == 2
    est = estimate(s)
    assert est.trials == 2 * (1 + 2 * 2 + 3) == len(local_trials(s, {0: "/a", 1: "/b"}))
    assert est.tokens == estimate(spec()).tokens + 2 * 3 * 4096


def test_the_study_is_done_only_once_its_arms_ended():
    s = spec(warmup_run=True, warmup_schedule=SCHEDULE).replace(seeds=(0,))
    ended = [TrialRecord(trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id, role=t.role,
                         batch_size=t.batch_size, lr=t.lr, status="finished")
             for t in local_trials(s, {0: "/snap/s0"}) if t.role in ("base", "branch")]
    snaps = LocalSnapshots(folders={0: "/snap/s0"}, ready={0: frozenset({1024, 2048})})
    p = plan(s, ended, 0.0, snapshots=snaps)
    assert [t.trial_id for t in p.start] == ["loc.warmup.s0", "loc.control-small.s0", "loc.control-large.s0"]
    assert not p.done
    arms = [TrialRecord(trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id, role=t.role,
                        batch_size=t.batch_size, lr=t.lr, status="finished") for t in p.start]
    assert plan(s, ended + arms, 0.0, snapshots=snaps).done


@pytest.mark.parametrize(("local", "message"), [
    ({"warmup_run": True}, "local.warmup_schedule: must list the warm-up's switches when local.warmup_run is true"),
    ({"warmup_schedule": SCHEDULE}, "local.warmup_run: must be true when local.warmup_schedule is given"),
    ({"warmup_run": "yes", "warmup_schedule": SCHEDULE}, "local.warmup_run: must be true or false, but got 'yes'."),
    ({"warmup_run": True, "warmup_schedule": [[1000, 8, SQRT2], [2048, 16, 2.0]]},
     "local.warmup_schedule: tokens_from must be a multiple of B_final·T = 256 tokens"),
    ({"warmup_run": True, "warmup_schedule": [[1024, 6, 1.2]]},
     "local.warmup_schedule: batch_size must be a multiple of B0 = 4 above the previous batch 4, but got [1024, 6, 1.2]."),
    ({"warmup_run": True, "warmup_schedule": [[1024, 8, 1.4], [2048, 12, 1.7]]},
     "local.warmup_schedule: batch_size must divide the final batch 12"),
    ({"warmup_run": True, "warmup_schedule": [[2048, 8, 1.4], [1024, 16, 2]]},
     "local.warmup_schedule: tokens_from must be above the previous switch's 2048"),
    ({"warmup_run": True, "warmup_schedule": [[4096, 16, 2.0]]},
     "local.warmup_schedule: tokens_from must be below the arms' equal budget of 4096 tokens"),
    ({"warmup_run": True, "warmup_schedule": [[1024, 8, -1]]},
     "local.warmup_schedule lr_multiplier: must be in (0, 1024], but got -1."),
])
def test_bad_warmup_input_names_the_field_and_the_value(local, message):
    with pytest.raises(ConfigError) as err:
        spec(**local)
    assert str(err.value).startswith(message)


def test_an_extension_switches_the_warmup_on_once():
    stored = spec()
    new, changes = extend_spec(stored, {"local": {"warmup_run": True, "warmup_schedule": SCHEDULE}}, targets={})
    assert new.local.warmup_run and new.local.warmup_schedule == ((1024, 8, SQRT2), (2048, 16, 2.0))
    assert new.local.epsilon == stored.local.epsilon and new.batch_sizes == (4, 8, 16)
    assert changes == ["local.warmup_run: the warm-up and its small- and large-batch controls, switches "
                       "8 at 1,024 tokens (lr ×1.41), 16 at 2,048 tokens (lr ×2)"]
    with pytest.raises(ConfigError, match=r"^local.epsilon: decides what the base runs and branches measured"):
        extend_spec(stored, {"local": {"epsilon": 0.5, "warmup_run": True, "warmup_schedule": SCHEDULE}}, targets={})
    with pytest.raises(ConfigError, match=r"^local.warmup_schedule: the warm-up and its controls were launched with"):
        extend_spec(new, {"local": {"warmup_run": True, "warmup_schedule": [[1024, 8, SQRT2]]}}, targets={})
    with pytest.raises(ConfigError, match=r"^patch: changes nothing"):
        extend_spec(new, {"local": {"warmup_run": True}}, targets={})
    with pytest.raises(ConfigError, match=r"^local.warmup_schedule: must list the warm-up's switches"):
        extend_spec(stored, {"local": {"warmup_run": True}}, targets={})


@pytest.mark.parametrize(("averaging", "anchor"), [("branch", 4), ("tokens", 4), ("carry", None)])
def test_the_arms_average_per_b0_tokens_unless_the_spec_carries_the_old_per_step_average(averaging, anchor):
    # issue 39: per step, the large control (B = 16) would average over 4× the tokens of the small one
    s = spec(warmup_run=True, warmup_schedule=SCHEDULE, averaging=averaging)
    configs = [TrainConfig.from_dict(t.train_config) for t in local_trials(s, {0: "/s0", 1: "/s1"})
               if t.role in ("warmup", "control-small", "control-large")]
    assert len(configs) == 6 and {c.ewa_batch_size for c in configs} == {anchor}
    large = next(c for c in configs if c.batch_size == 16)
    assert large.ewa_step_factor(16) == (4.0 if anchor else 1.0)  # τ^4 a step: the small control's τ per 4 sequences
