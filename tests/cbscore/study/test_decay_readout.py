"""The readout of a schedule study (cbscore.study.decay_readout) on synthetic runs with a known answer.

Every run's loss at horizon H (steps) at batch B is ``3 − 0.1·ln(H / S(B))`` with
``S(B) = 50 + 400/B`` (B_noise = 8): linear in ln H, so the horizon readout is exact. Each
schedule's target is its loss at D at B_ref = 1 (H_D = 256 steps), so every S(B) is read as
``S(B)·256/S(1)``: the same B_noise = 8, and B* = 1.2·1 + 0.2·8 = 2.8 (DESIGN.md §1's closed form).
"""

from __future__ import annotations

import math

import pytest

from cbscore.study import StudySpec, TrialRecord
from cbscore.study.decay_plan import decay_trials, stable_trial_id
from cbscore.study.decay_readout import format_schedule, schedule_readout


def truth(b: int) -> float:
    return 50 + 400 / b


def loss(h: float, b: int) -> float:
    return 3 - 0.1 * math.log(h / truth(b))


SPEC = StudySpec.from_dict({
    "name": "sched", "kind": "schedule", "models": ["tiny-0.1M"], "tokens": [8192], "batch_sizes": [1, 2, 4, 8],
    "b_ref": 1, "context_tokens": 32, "warmup_fraction": 0.1, "search": {"kind": "grid", "lrs": [0.01]},
    "seeds": [0], "decay": {"horizon_low": 0.25, "horizon_high": 3.0}})


def records(spec: StudySpec) -> list[TrialRecord]:
    folders = {stable_trial_id(spec, b, 0.01, 0): f"/snap/b{b}" for b in spec.batch_sizes}
    out = []
    for t in decay_trials(spec, folders):
        steps = t.max_tokens // (t.batch_size * spec.context_tokens)
        fields = dict(trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id, role=t.role,
                      batch_size=t.batch_size, lr=t.lr, status="finished", seed=t.seed, last_step=steps)
        if t.role == "stable":  # an EWA history every 8 steps
            evals = list(range(8, steps + 1, 8))
            fields.update(eval_steps=tuple(float(s) for s in evals),
                          eval_losses=tuple(loss(s, t.batch_size) for s in evals))
        else:  # the decayed run's raw loss at its end
            fields["final_raw_loss"] = loss(steps, t.batch_size)
        out.append(TrialRecord(**fields))
    return out


def test_every_schedule_reads_b_noise_and_b_star_of_the_known_curve():
    fit = schedule_readout(SPEC, records(SPEC), bootstrap=0)
    for name in ("wsd", "cosine"):
        entry = fit.schedules[name]
        assert entry.target_loss_nats == pytest.approx(loss(256, 1))
        steps = {p.batch_size: p.steps for p in entry.points}
        for b in (1, 2, 4, 8):
            assert steps[b] == pytest.approx(truth(b) * 256 / truth(1), rel=1e-6)
        assert entry.fit.b_noise == pytest.approx(8, rel=1e-5)
        assert entry.fit.cbs == pytest.approx(2.8, rel=1e-5)
    ewa = fit.schedules["constant_ewa"].fit  # the lab's crossing rule on an evaluation history
    assert ewa.b_noise == pytest.approx(8, rel=0.05)
    assert fit.schedules["wsd"].es_fit.better == "undecided"  # four points
    text = format_schedule(fit)
    assert "wsd: target" in text and "B_noise = 8" in text and "intervals" not in text.split("\n")[0]


def test_a_schedule_without_its_reference_runs_has_no_target_and_says_so():
    recs = [r for r in records(SPEC) if not (r.batch_size == 1 and r.role == "cosine")]
    fit = schedule_readout(SPEC, recs, bootstrap=0)
    assert fit.schedules["cosine"].target_loss_nats is None
    assert any(n.startswith("cosine: no target yet") for n in fit.notes)
    assert fit.schedules["wsd"].fit is not None
