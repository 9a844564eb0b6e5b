"""Centring a chained cell on what its neighbours measured (issue 40, "past 3×"): the continuous
optimum of a settled cell (``search.chain_centre: vertex``) and the slope between the last two
cells (``search.local_exponent``), both off by default."""

from __future__ import annotations

import math

import pytest

from cbscore.errors import ConfigError
from cbscore.study.chained import (
    LOCAL_EXPONENT_RANGE,
    chain_centres,
    describe_chained,
    local_exponent,
    loss_vertex,
    steps_vertex,
)
from tests.cbscore.study.test_chained import _reached, _reference, chained_spec

K = 0.2  # ln S = ln S0 + K·(ln η − ln η*)²


def _cell(spec, b: int, optimum: float, rates, s0: float = 100.0):
    """A settled cell whose steps to target are exactly the parabola in ln η around ``optimum``."""
    return [_reached(spec, b, lr, s0 * math.exp(K * math.log(lr / optimum) ** 2)) for lr in rates]


def test_the_defaults_hand_on_the_best_discrete_rate_with_the_fixed_exponent():
    spec = chained_spec()
    assert spec.search.chain_centre == "best" and spec.search.local_exponent is False
    ref = _reference(spec, best=0.007)
    # The reference's best discrete rate is 0.008 (the grid's nearest), not its optimum 0.007.
    assert chain_centres(spec, {16: ref})[32] == pytest.approx(0.008 * math.sqrt(2), rel=3e-3)


def test_the_reference_cell_hands_on_the_vertex_of_its_final_losses():
    spec = chained_spec(chain_centre="vertex")
    ref = _reference(spec, best=0.007)  # final loss 3 + 0.1·ln(η/0.007)²: a parabola in ln η
    assert loss_vertex(ref) == pytest.approx(0.007, rel=3e-3)
    assert chain_centres(spec, {16: ref})[32] == pytest.approx(0.007 * math.sqrt(2), rel=3e-3)
    # The best at an edge of the grid: no vertex (the chain keeps the best discrete rate).
    assert loss_vertex(_reference(spec, best=0.05)) is None


def test_a_settled_cell_hands_on_the_vertex_the_fit_across_rates_reads():
    spec = chained_spec(chain_centre="vertex").replace(batch_sizes=[4, 8, 16, 32, 64, 128])
    ref = _reference(spec, best=0.008)
    c32 = chain_centres(spec, {16: ref})[32]
    assert c32 == pytest.approx(0.008 * math.sqrt(2), rel=3e-3)
    c32_cell = _cell(spec, 32, c32, (c32 / 2, c32, c32 * 2))
    # One three-rate cell alone leaves the shared curvature no degree of freedom: no vertex, so
    # the chain hands on its best discrete rate, as by default.
    assert steps_vertex({32: c32_cell}, 32) is None
    c64 = chain_centres(spec, {16: ref, 32: c32_cell})[64]
    cell = _cell(spec, 64, 0.0135, (c64 / 2, c64, c64 * 2))
    # Its best discrete rate is the centre (0.016); the vertex is the optimum itself, read with the
    # curvature the two cells share.
    assert steps_vertex({32: c32_cell, 64: cell}, 64) == pytest.approx(0.0135, rel=3e-3)
    recs = {16: ref, 32: c32_cell, 64: cell}
    assert chain_centres(spec, recs)[128] == pytest.approx(0.0135 * math.sqrt(2), rel=3e-3)
    # The default hands on the best discrete rate of the same cell.
    plain = chained_spec().replace(batch_sizes=spec.batch_sizes)
    assert chain_centres(plain, recs)[128] == pytest.approx(c64 * math.sqrt(2), rel=3e-3)


def test_a_vertex_is_kept_within_the_rates_tried_and_one_crossing_keeps_the_best():
    spec = chained_spec(chain_centre="vertex")
    # Two bracketed cells give the shared curvature.
    shared = {8: _cell(spec, 8, 0.009, (0.005, 0.01, 0.02)), 16: _cell(spec, 16, 0.011, (0.005, 0.01, 0.02))}
    cell = _cell(spec, 32, 0.05, (0.005, 0.01, 0.02))  # optimum past the high edge
    assert steps_vertex({**shared, 32: cell}, 32) == pytest.approx(0.02, rel=3e-3)
    assert steps_vertex({**shared, 32: cell}, 16) == pytest.approx(0.011, rel=3e-3)
    one = [_reached(spec, 32, 0.01, 100.0)] + [_reached(spec, 32, lr, None, status="censored") for lr in (0.005, 0.02)]
    assert steps_vertex({**shared, 32: one}, 32) is None


def test_the_local_exponent_is_the_slope_between_the_last_two_cells_clamped():
    off, on = chained_spec(), chained_spec(local_exponent=True)
    history = [(16, 0.008), (32, 0.008 * 2 ** 0.3)]
    assert local_exponent(off, history) == 0.5
    assert local_exponent(on, history[:1]) == 0.5  # one cell: the fixed exponent
    assert local_exponent(on, history) == pytest.approx(0.3)
    assert local_exponent(on, [(16, 0.008), (32, None)]) == 0.5  # an optimum unknown
    assert local_exponent(on, [(16, 0.008), (32, 0.032)]) == LOCAL_EXPONENT_RANGE[1]
    assert local_exponent(on, [(16, 0.008), (32, 0.001)]) == LOCAL_EXPONENT_RANGE[0]
    # Downwards (B falling) the same slope.
    assert local_exponent(on, [(16, 0.008), (8, 0.008 / 2 ** 0.3)]) == pytest.approx(0.3)


def test_vertex_and_local_exponent_follow_an_optimum_that_turns():
    """η* ∝ √B up to B = 32 and B^-0.3 past it (the ``peak`` law): from the second cell past the turn,
    the chain is centred on the falling optimum, where the fixed √B rule points up."""
    spec = chained_spec(chain_centre="vertex", local_exponent=True).replace(batch_sizes=[4, 8, 16, 32, 64, 128])

    def eta(b: int) -> float:
        return 0.007 * (b / 16) ** 0.5 if b <= 32 else 0.007 * 2 ** 0.5 * (b / 32) ** -0.3

    recs = {16: _reference(spec, best=eta(16))}
    for b in (32, 64, 128):
        c = chain_centres(spec, recs)[b]
        recs[b] = _cell(spec, b, eta(b), (c / 2, c, c * 2))
    centres = chain_centres(spec, recs)
    # B = 64 is centred by the slope 16 → 32 (√B, past the turn); B = 128 by 32 → 64, on the law.
    assert centres[64] == pytest.approx(eta(32) * 2 ** 0.5, rel=5e-3)
    assert centres[128] == pytest.approx(eta(128), rel=5e-3)


@pytest.mark.parametrize("field,value", [("chain_centre", "mean"), ("chain_centre", 1), ("local_exponent", "yes"),
                                         ("local_exponent", 1)])
def test_the_centring_fields_are_checked_by_name(field, value):
    with pytest.raises(ConfigError, match=f"search.{field}") as err:
        chained_spec(**{field: value})
    assert str(value) in str(err.value)


def test_the_centring_fields_round_trip():
    from cbscore.study import StudySpec

    spec = chained_spec(chain_centre="vertex", local_exponent=True)
    back = StudySpec.from_dict(spec.to_dict())
    assert back.search.chain_centre == "vertex" and back.search.local_exponent is True


def test_the_dry_run_says_how_the_cells_are_centred():
    assert "(its neighbour's best rate)·(B/B_neighbour)^0.5," in describe_chained(chained_spec())[0]
    line = describe_chained(chained_spec(chain_centre="vertex", local_exponent=True))[0]
    assert "(its neighbour's fitted optimum)·(B/B_neighbour)^(the slope of the last two cells, in [-0.5, 1]" in line
