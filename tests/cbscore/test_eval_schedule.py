"""Evaluation schedule: log-spaced early, regular later, denser near the target, always the end."""

from __future__ import annotations

from cbscore.eval_schedule import EvalSchedule, default_every_steps


def _steps(schedule: EvalSchedule, losses=lambda s: 10.0) -> list[int]:
    out, step = [0], 0
    while step < schedule.total_steps:
        step = schedule.next_step(step, losses(step))
        out.append(step)
    return out


def test_log_spaced_then_regular_then_the_last_step():
    s = EvalSchedule(total_steps=95, every_steps=20)
    assert _steps(s) == [0, 1, 2, 4, 8, 16, 20, 40, 60, 80, 95]


def test_dense_once_within_the_near_fraction_of_the_target():
    s = EvalSchedule(total_steps=200, every_steps=20, target_loss=3.0, near_fraction=0.05)
    # loss 3.1 ≤ 1.05 · 3 = 3.15 from step 100 on: every 20 // 5 = 4 steps after that
    steps = _steps(s, lambda step: 3.1 if step >= 100 else 4.0)
    assert steps[:10] == [0, 1, 2, 4, 8, 16, 20, 40, 60, 80]
    assert steps[10:14] == [100, 104, 108, 112]
    assert steps[-1] == 200


def test_no_target_never_goes_dense():
    s = EvalSchedule(total_steps=100, every_steps=50)
    assert _steps(s, lambda step: 0.0) == [0, 1, 2, 4, 8, 16, 32, 50, 100]


def test_next_step_is_the_same_from_any_step_between_two_evaluations():
    # what makes a resumed trial evaluate where the uninterrupted one did
    s = EvalSchedule(total_steps=1000, every_steps=30, target_loss=2.0)
    for last_eval in (0, 8, 16, 60, 90):
        nxt = s.next_step(last_eval, 5.0)
        assert all(s.next_step(c, 5.0) == nxt for c in range(last_eval, nxt))


def test_default_interval_gives_about_forty_regular_evaluations():
    assert default_every_steps(4000) == 100
    assert default_every_steps(10) == 1


def test_min_every_steps_caps_evaluation_compute():
    from cbscore.eval_schedule import EvalSchedule, min_every_steps

    # 3 weight sets × 120 windows × 128 tokens / 3 = 15,360 training-token equivalents per evaluation;
    # at 2,048 tokens a step and half of training compute, evaluations are ≥ 15 steps apart.
    k = min_every_steps(eval_windows=120, context_tokens=128, n_models=3, batch_tokens=2048, max_eval_fraction=0.5)
    assert k == 15
    schedule = EvalSchedule(total_steps=100, every_steps=10, target_loss=1.0, min_every_steps=k)
    steps, s = [], 0
    while s < 100:
        s = schedule.next_step(s, last_loss=1.01)  # near the target: the dense phase wants every 2 steps
        steps.append(s)
    assert steps == [15, 30, 45, 60, 75, 90, 100]
