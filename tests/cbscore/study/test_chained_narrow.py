"""Narrow chained cells (issue 40, "past 3×"): below ``search.bracket_min_batch_size`` a chained cell
starts with ``search.narrow_rates`` rates instead of the three-rate bracket."""

from __future__ import annotations

import pytest

from cbscore.errors import ConfigError
from cbscore.study import plan
from cbscore.study.chained import chain_centres, chained_rates, describe_chained, first_rates, is_narrow, settled_best
from tests.cbscore.study.test_chained import _reached, _reference, chained_spec


def test_cells_below_the_floor_start_with_two_rates_a_bracket_ratio_apart_around_the_centre():
    spec = chained_spec(bracket_min_batch_size=32, narrow_rates=2)
    # B = 8 and 4 are narrow; B_ref = 16 is the reference cell; 32 and 64 keep the bracket.
    assert [b for b in spec.batch_sizes if is_narrow(spec, b)] == [4, 8]
    # c/√2 and c·√2 for c = 0.01: 0.00707 and 0.0141 (three significant digits).
    assert first_rates(spec, 0.01, 8) == (0.00707, 0.0141)
    assert first_rates(spec, 0.01, 32) == (0.005, 0.01, 0.02)
    assert first_rates(chained_spec(bracket_min_batch_size=32, narrow_rates=1), 0.01, 8) == (0.01,)
    # Off by default: every cell is bracketed.
    assert not any(is_narrow(chained_spec(), b) for b in chained_spec().batch_sizes)
    assert "narrow cells (B < 32: 4, 8) start with 2 rates" in "\n".join(describe_chained(spec))
    assert "narrow" not in "\n".join(describe_chained(chained_spec()))


def test_a_narrow_cell_extends_by_the_same_gate_and_hands_on_its_centre_when_bracketed():
    spec = chained_spec(bracket_min_batch_size=32, narrow_rates=2)
    # Both rates within 10% of each other: the optimum lies between them; the cell settles on its centre.
    near = [_reached(spec, 8, 0.00707, 100.0), _reached(spec, 8, 0.0141, 104.0)]
    assert chained_rates(spec, near, 0.01, 8) == ((0.00707, 0.0141), False)
    assert settled_best(spec, near, "trial", 0.01, 8) == (True, 0.01)
    # 0.0141 beats 0.00707 by 20% (> 10%): the next rate up, a factor 2 (bracket_ratio) on.
    far = [_reached(spec, 8, 0.00707, 120.0), _reached(spec, 8, 0.0141, 100.0)]
    assert chained_rates(spec, far, 0.01, 8) == ((0.00707, 0.0141, 0.0282), True)
    assert settled_best(spec, far, "trial", 0.01, 8) == (False, None)
    # The added rate is worse: settled, and the best rate (not the centre) is handed on.
    done = far + [_reached(spec, 8, 0.0282, 110.0)]
    assert chained_rates(spec, done, 0.01, 8) == ((0.00707, 0.0141, 0.0282), False)
    assert settled_best(spec, done, "trial", 0.01, 8) == (True, 0.0141)


def test_a_single_rate_cell_never_extends():
    spec = chained_spec(bracket_min_batch_size=32, narrow_rates=1)
    one = [_reached(spec, 8, 0.01, 100.0)]
    assert chained_rates(spec, one, 0.01, 8) == ((0.01,), False)
    assert settled_best(spec, one, "trial", 0.01, 8) == (True, 0.01)


def test_the_planner_starts_two_rates_in_the_narrow_cells_and_the_bracket_above():
    spec = chained_spec(bracket_min_batch_size=32, narrow_rates=2).replace(pinned_targets={"tiny-0.1M_D2M": 3.2})
    p = plan(spec, _reference(spec, best=0.008), 0.0)
    # Centres √2 × 0.008 up and 0.008/√2 down (as with every cell bracketed); B = 8 runs two rates.
    assert sorted((t.batch_size, t.lr) for t in p.start) == [(8, 0.004), (8, 0.008),
                                                             (32, 0.00565), (32, 0.0113), (32, 0.0226)]
    assert {c.batch_size: c.n_trials for c in p.cells}[8] == 2
    # B = 8 bracketed its optimum: B = 4 is centred at 0.00566/√2 = 0.004.
    cell = [_reached(spec, 8, 0.004, 100.0), _reached(spec, 8, 0.008, 103.0)]
    assert chain_centres(spec, {16: _reference(spec, best=0.008), 8: cell})[4] == pytest.approx(0.004, rel=3e-3)


@pytest.mark.parametrize("field,value", [("bracket_min_batch_size", 0), ("bracket_min_batch_size", 2.5),
                                         ("narrow_rates", 4), ("narrow_rates", True)])
def test_the_narrow_fields_are_checked_by_name(field, value):
    with pytest.raises(ConfigError, match=f"search.{field}") as err:
        chained_spec(**{field: value})
    assert str(value) in str(err.value)


def test_narrow_cells_find_b_star_at_zero_noise_on_a_hand_built_truth():
    """σ = 0, η* ∝ √B: with the cells below B_ref narrow, B* within 0.5% of the truth, in fewer tokens."""
    from cbscore.study.simulate import SimConfig, TruthCurve, simulate

    base = chained_spec().replace(batch_sizes=[2 ** k for k in range(2, 11)])
    narrow = chained_spec(bracket_min_batch_size=16, narrow_rates=2).replace(batch_sizes=base.batch_sizes)
    truth = {base.resolve_settings()[0].setting_id: TruthCurve(s_min=100.0, b_noise=64.0)}
    config = SimConfig(noise_sigma=0.0, lr_penalty=0.198)
    on, off = simulate(narrow, truth, config), simulate(base, truth, config)
    s = on.summary()[0]
    assert s["cbs_study_median"] == pytest.approx(s["cbs_truth"], rel=0.005)
    assert on.to_json_dict()["tokens_study_mean"] < off.to_json_dict()["tokens_study_mean"]
