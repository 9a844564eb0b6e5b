"""The power analysis's truth and arms (benchmarks/power_reproduce.py, issue 27): the truth it
simulates is the one its README states."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.power_reproduce import B_NOISE_0, arms, slope, truth_for
from cbscore.study import StudySpec

DESIGN = Path(__file__).resolve().parents[1] / "docs/results/reproduce-design/design-f.yaml"


def test_the_truth_puts_the_exponent_on_b_noise_and_s_b_ref_at_the_reference_runs_length():
    spec = StudySpec.from_yaml(DESIGN.read_text())
    settings = spec.resolve_settings()
    fixed_n, fixed_d = arms(spec)
    assert [settings[i].tokens for i in fixed_n] == [31_250, 78_750, 198_400, 500_000]
    assert sorted(settings[i].n_params for i in fixed_d) == sorted({s.n_params for s in settings})
    truth = truth_for(spec, 0.47)
    d = [settings[i].tokens for i in fixed_n]
    b_noise = [truth[settings[i].setting_id].b_noise for i in fixed_n]
    assert slope(d, b_noise) == pytest.approx(0.47)
    middle = math.exp(sum(math.log(x) for x in d) / len(d))
    assert B_NOISE_0 * (d[0] / middle) ** 0.47 == pytest.approx(b_noise[0])
    for s in settings:  # S(B_ref) = D/(B_ref·T): the reference run's length
        assert truth[s.setting_id].steps(spec.b_ref) == pytest.approx(s.tokens / (spec.b_ref * spec.context_tokens))
    # the fixed-D arm shares its D's curve (α_N = 0)
    assert len({(truth[settings[i].setting_id].s_min, truth[settings[i].setting_id].b_noise) for i in fixed_d}) == 1


def test_a_missing_b_star_gives_no_slope():
    assert slope([1, 2], [1.0, None]) is None
    assert slope([1, 2, 4], [1.0, 2.0, 4.0]) == pytest.approx(1.0)
