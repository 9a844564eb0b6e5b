"""Issue 39, part 2: the local-CBS readout (``workers.studies.local_fit.local_readout``, pure) names
the window rule and the average its held-out losses were read on, reads the raw weights beside the
averaged ones, and says per checkpoint whether the noise (not the floor ε) ever decided the
noise-aware rule. Known answers on two seeds, two checkpoints and k ∈ {1, 2, 4}."""

from __future__ import annotations

import pytest

from cbscore.study import StudySpec, TrialRecord
from workers.studies.local_fit import format_local, local_readout

B0 = 4
Z = 1.6448536269514722


def spec(**local) -> StudySpec:
    """Checkpoints at 1,024 and 2,048 tokens of D = 4,096, T = 16, two seeds, ε = 0.01."""
    fields = {"base_batch_size": B0, "checkpoint_count": 2, "multipliers": [1, 2, 4], **local}
    return StudySpec.from_dict(dict(name="loc", kind="local", models=["tiny-0.1M"], tokens=[4096], context_tokens=16,
                                    seeds=[0, 1], local=fields))


#: (t, k) → per seed (averaged held-out loss, raw held-out loss). At 1,024 tokens the seeds disagree
#: on k = 2 by ±0.02 (SE of the paired difference 0.02: the noise's tolerance 1.645·0.02 = 0.0329
#: is above ε and decides k = 2's pass), k = 4 is 0.06 worse on both; the raw weights agree across
#: seeds and rise 0.05 a doubling (ε decides: k* = 1). At 2,048 tokens no seed differs: ε decides all.
LOSSES = {
    (1024, 1): ((5.00, 5.20), (5.10, 5.20)), (1024, 2): ((5.02, 5.25), (5.08, 5.25)),
    (1024, 4): ((5.06, 5.30), (5.16, 5.30)),
    (2048, 1): ((4.50, 4.60), (4.50, 4.60)), (2048, 2): ((4.505, 4.70), (4.505, 4.70)),
    (2048, 4): ((4.508, 4.80), (4.508, 4.80)),
}


def records(raw: bool = True) -> list[TrialRecord]:
    return [TrialRecord(trial_id=f"loc.t{t}.k{k}.s{seed}", cell_id="c", setting_id="s", role="branch",
                        batch_size=k * B0, lr=0.01, status="finished", final_eval_loss=averaged,
                        final_raw_loss=raw_loss if raw else None, seed=seed)
            for (t, k), seeds in LOSSES.items() for seed, (averaged, raw_loss) in enumerate(seeds)]


def read(s: StudySpec, raw: bool = True):
    return local_readout(s, records(raw), lambda r: [5.0] * 10)


def test_the_readout_says_where_the_noise_decided_on_averaged_and_raw_weights():
    fit = read(spec())
    first, second = fit.checkpoints
    assert first.raw_loss_nats == ((5.20, 5.20), (5.25, 5.25), (5.30, 5.30))
    assert first.noise_aware.k_star == 2.0 and first.noise_aware.tolerances[1] == (pytest.approx(Z * 0.02),)
    assert first.noise_aware_raw.k_star == 1.0  # 0.05 worse at every seed: beyond ε, no noise to widen it
    assert first.noise_decides == {"noise_aware": True, "noise_aware_raw": False}
    assert second.noise_decides == {"noise_aware": False, "noise_aware_raw": False}
    assert (second.noise_aware.k_star, second.noise_aware_raw.k_star) == (4.0, 1.0)
    assert fit.noise_ever_decided == {"noise_aware": True, "noise_aware_raw": False}
    assert any(n.startswith("noise_aware_raw: the noise never decided a comparison") for n in fit.notes)
    assert not any(n.startswith("noise_aware: the noise never") for n in fit.notes)


def test_the_readout_names_the_window_rule_and_the_average():
    fit = read(spec())
    assert (fit.window_rule, fit.averaging) == ("fixed", "branch")
    assert [c.window_tokens for c in fit.checkpoints] == [512, 512]  # Δ fixed in tokens
    text = format_local(fit)
    assert "window: fixed Δ in tokens (Merrill et al. 2025)" in text and "averaged from the branch" in text
    assert "noise_aware 8 (noise decided)" in text and "noise_aware_raw 4 (floor ε)" in text
    grown = read(spec(window_rule="growing", averaging="tokens"))
    assert (grown.window_rule, grown.averaging) == ("growing", "tokens")
    assert [c.window_tokens for c in grown.checkpoints] == [512, 1024]
    assert "window: growing Δ = window_fraction·t" in format_local(grown)


def test_branches_without_a_raw_loss_keep_the_averaged_reading_and_say_so():
    fit = read(spec(), raw=False)
    first = fit.checkpoints[0]
    assert first.noise_aware.k_star == 2.0 and first.noise_aware_raw is None
    assert first.noise_decides == {"noise_aware": True}
    assert "a branch logged no raw-weights loss at the window's end: no raw reading" in first.notes


def test_the_arms_are_read_on_averaged_and_raw_weights_paired_by_seed():
    s = spec(warmup_run=True, warmup_schedule=[[1024, 8, 2 ** 0.5], [2048, 16, 2.0]])
    # (averaged, raw) per seed: the warm-up matches the small control's average, its raw weights are 0.10 worse
    losses = {"warmup": ((5.00, 5.10), (5.02, 5.12)), "control-small": ((5.00, 5.00), (5.02, 5.02)),
              "control-large": ((5.20, 5.30), (5.22, 5.32))}
    steps = {"warmup": 30, "control-small": 64, "control-large": 16}
    arms = [TrialRecord(trial_id=f"loc.{role}.s{seed}", cell_id=role, setting_id="s", role=role, batch_size=4, lr=0.01,
                        status="finished", final_eval_loss=averaged, final_raw_loss=raw, last_step=steps[role],
                        tokens=4096, seed=seed)
            for role, seeds in losses.items() for seed, (averaged, raw) in enumerate(seeds)]
    out = local_readout(s, records() + arms, lambda r: [5.0] * 10).arms
    assert out.averaging == "per B0·T tokens (τ^(B/B0) per step of B)"
    warm = out.arm("warmup")
    assert warm.final_raw_loss.mean == pytest.approx(5.11) and warm.final_raw_loss.interval_kind == "range"
    assert out.comparison.matched and out.comparison.loss_difference_nats == pytest.approx(0.0)
    raw = out.comparison_raw
    assert raw.loss_difference_nats == pytest.approx(0.10) and raw.tolerance_nats == 0.01 and not raw.matched
