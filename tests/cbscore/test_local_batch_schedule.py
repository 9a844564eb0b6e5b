"""A batch-size schedule in tokens (TrainConfig.batch_schedule, cbscore.train.batch_plan): exact steps,
the budget in tokens, the data stream without gap or repeat, and resuming across a switch.

Schedule: 4 sequences of 32 tokens (128 tokens a step) to 2,048 tokens, 8 (×√2) to 6,144, then
16 (×2) to the budget of 12,288: 16 + 16 + 12 = 44 steps.
"""

from __future__ import annotations

import math

import pytest

from cbscore.data.stream import WindowStream
from cbscore.errors import ConfigError
from cbscore.train.batch_plan import build_plan
from cbscore.train.branch_config import BranchConfig
from cbscore.train.config import TrainConfig
from cbscore.train.trainer import train
from tests.cbscore.test_train import CrashAt, Recorder

SCHEDULE = ((2048, 8, math.sqrt(2)), (6144, 16, 2.0))


def scheduled(data, **changes) -> TrainConfig:
    fields = dict(
        model="tiny-0.1M", batch_size=4, context_tokens=32, max_tokens=12288, lr=1e-2, warmup_tokens=1024,
        ewa_taus=(0.9,), eval_windows=16, log_every_steps=1, data=data, device="cpu", threads=1,
        branch=BranchConfig(batch_schedule=SCHEDULE),
    )
    return TrainConfig(**{**fields, **changes})


def test_the_plan_counts_steps_exactly_and_rounds_a_switch_up_to_a_whole_step():
    plan = build_plan(start_tokens=0, batch_size=4, context_tokens=32, max_tokens=12288, schedule=SCHEDULE)
    assert [(s.first_step, s.first_tokens, s.batch_size, s.steps) for s in plan.segments] == [
        (0, 0, 4, 16), (16, 2048, 8, 16), (32, 6144, 16, 12)]
    assert (plan.total_steps, plan.end_tokens, plan.switch_steps) == (44, 12288, (16, 32))
    assert plan.first_sequence(17) == 64 + 8 and plan.tokens_at(16.5) == 2048 + 128
    # a switch between boundaries waits for the next one: 2,000 tokens → after step 16 (2,048)
    late = build_plan(start_tokens=0, batch_size=4, context_tokens=32, max_tokens=12288, schedule=((2000, 8, 1.0),))
    assert late.segments[1].first_tokens == 2048 and late.total_steps == 16 + (12288 - 2048) // 256
    # a step cap shortens the last segments
    capped = build_plan(start_tokens=0, batch_size=4, context_tokens=32, max_tokens=12288, schedule=SCHEDULE, max_steps=20)
    assert [s.steps for s in capped.segments] == [16, 4, 0] and capped.end_tokens == 2048 + 4 * 256


def test_a_scheduled_run_takes_the_exact_steps_tokens_and_learning_rates(builtin_slice_config, monkeypatch):
    reads = []
    real = WindowStream.windows
    monkeypatch.setattr(WindowStream, "windows", lambda s, start, count: reads.append((start, count)) or real(s, start, count))
    rec = Recorder()
    result = train(scheduled(builtin_slice_config), callbacks=[rec])
    assert (result.steps, result.total_steps, result.tokens) == (44, 44, 12288)
    assert reads == [(0 + 4 * i, 4) for i in range(16)] + [(64 + 8 * i, 8) for i in range(16)] + [
        (192 + 16 * i, 16) for i in range(12)]  # every window of 0..383 once, in order
    by_step = {m["step"]: m for m in rec.metrics}
    assert by_step[16]["tokens"] == 2048 and by_step[17]["tokens"] == 2048 + 256 and by_step[44]["tokens"] == 12288
    # metrics carry the lr of the step that ended there: update 7 is the warm-up's last (8 steps of 128 tokens)
    assert by_step[8]["lr"] == pytest.approx(1e-2 * (0.1 + 0.9 * 7 / 8)) and by_step[9]["lr"] == 1e-2
    assert by_step[17]["lr"] == pytest.approx(math.sqrt(2) * 1e-2) and by_step[33]["lr"] == pytest.approx(2e-2)
    assert result.eval_history[-1].tokens == 12288


def test_resuming_across_a_switch_reproduces_the_uninterrupted_run(builtin_slice_config, tmp_path):
    config = scheduled(builtin_slice_config, checkpoint_dir=str(tmp_path / "c"), checkpoint_every_steps=10)
    uninterrupted = train(config.replace(checkpoint_dir=str(tmp_path / "u"), checkpoint_every_steps=None))
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(config, callbacks=[CrashAt(25)])  # checkpoint at step 10 (batch 4), killed after the switch at 16
    resumed = train(config)
    assert resumed.resumed_from_step == 20  # the checkpoint at step 20 is in the second segment
    again_config = config.replace(checkpoint_dir=str(tmp_path / "c2"))
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(again_config, callbacks=[CrashAt(14)])
    across = train(again_config)  # from step 10 at batch 4, through the switch at step 16
    assert across.resumed_from_step == 10
    for run in (resumed, across):
        assert run.train_log == uninterrupted.train_log
        assert [e.to_dict() for e in run.eval_history] == [e.to_dict() for e in uninterrupted.eval_history]


def test_the_noise_scale_probe_follows_the_batch_through_a_schedule(builtin_slice_config):
    rec = Recorder()
    result = train(scheduled(builtin_slice_config, gns_micro_batch_size=2), callbacks=[rec])
    assert result.steps == 44 and result.micro_batch_size == 2  # passes of 2 at every batch: 2, 4, then 8 of them
    assert all(m["gns_g2"] is not None for m in rec.metrics[1:])  # measured before and after each switch


def test_a_bad_schedule_is_refused_naming_the_entry():
    base = dict(model="tiny-0.1M", batch_size=4, context_tokens=32, max_tokens=12288, lr=1e-2)
    with pytest.raises(ConfigError, match=r"batch_schedule: tokens_from must be above the previous switch"):
        TrainConfig(**base, branch=BranchConfig(batch_schedule=((4096, 8, 1.0), (2048, 16, 2.0))))
    with pytest.raises(ConfigError, match=r"batch_schedule: tokens_from must be below max_tokens=12288"):
        TrainConfig(**base, branch=BranchConfig(batch_schedule=((12288, 8, 1.0),)))
    with pytest.raises(ConfigError, match=r"batch_schedule: micro_batch_size=4 must divide"):
        TrainConfig(**base, micro_batch_size=4, branch=BranchConfig(batch_schedule=((2048, 6, 1.0),)))
    with pytest.raises(ConfigError, match=r"batch_schedule lr_multiplier: must be a positive finite number"):
        TrainConfig(**base, branch=BranchConfig(batch_schedule=((2048, 8, 0.0),)))
    config = TrainConfig(**base, branch=BranchConfig(batch_schedule=SCHEDULE))
    assert TrainConfig.from_dict(config.to_dict()) == config and config.to_dict()["branch"]["batch_schedule"][0] == [2048, 8, math.sqrt(2)]


def test_averages_anchored_on_b0_decay_per_token_through_a_schedule(builtin_slice_config, tmp_path):
    # issue 39 (the warm-up arms): ewa_batch_size = 4 makes a step of B decay by τ^(B/4), so after the
    # 12,288 tokens of 96 B0-steps the correction is 1 − 0.9^96 (per step it would be 1 − 0.9^44)
    from cbscore.train.checkpoint import load_checkpoint

    for anchor, steps in ((4, 96), (None, 44)):
        folder = tmp_path / f"anchor-{anchor}"
        train(scheduled(builtin_slice_config, ewa_batch_size=anchor, checkpoint_dir=str(folder), eval_every_steps=44))
        average = load_checkpoint(folder)["average"]
        assert average["count"] == 44 and average["decay"] == pytest.approx([0.9 ** steps], rel=1e-12)
