"""Replicates of a chained cell (``search.replicate_batch_sizes``, ``search.replicates``): once a listed
cell settled, trials at its best rate with new training seeds (how the estimator reads them:
tests/cbscore/analysis/test_replicate_seeds.py)."""

from __future__ import annotations

import dataclasses

import pytest

from cbscore.errors import ConfigError
from cbscore.study import plan
from cbscore.study.budgets import cell_size
from cbscore.study.chained import bracket, chain_centres, describe_chained, replicate_seeds
from tests.cbscore.study.test_chained import _reached, _reference, chained_spec


def test_a_settled_listed_cell_starts_its_replicates_at_its_best_rate_with_new_seeds():
    spec = chained_spec(replicate_batch_sizes=[32], replicates=2).replace(pinned_targets={"tiny-0.1M_D2M": 3.2})
    assert replicate_seeds(spec) == (1, 2)
    ref = _reference(spec, best=0.008)
    centre = chain_centres(spec, {16: ref})[32]
    cell = [_reached(spec, 32, v, s) for v, s in zip(sorted(bracket(spec, centre)), (110.0, 100.0, 112.0))]
    p = plan(spec, ref + cell, 0.0)
    started = [(t.batch_size, t.lr, t.seed) for t in p.start if t.batch_size == 32]
    assert started == [(32, centre, 1), (32, centre, 2)]
    # Counted in the cell (three rates and two replicates) and in the dry run's trials per cell.
    assert {c.batch_size: c.n_trials for c in p.cells}[32] == 5
    assert cell_size(spec, 32) == 3 + 2 and cell_size(spec, 64) == 3
    # The cell above was released on the spec seed's best alone, and stays centred there.
    assert chain_centres(spec, {16: ref, 32: cell})[64] == chain_centres(
        spec, {16: ref, 32: cell + [_reached(spec, 32, centre, 90.0, seed=1)]})[64]


def test_an_unsettled_or_unlisted_cell_starts_no_replicate_and_the_cell_waits_for_them():
    spec = chained_spec(replicate_batch_sizes=[32]).replace(pinned_targets={"tiny-0.1M_D2M": 3.2})
    ref = _reference(spec, best=0.008)
    centre = chain_centres(spec, {16: ref})[32]
    low, mid, high = bracket(spec, centre)
    running = [_reached(spec, 32, low, 110.0), _reached(spec, 32, mid, 100.0)]
    assert not [t for t in plan(spec, ref + running, 0.0).start if t.seed != 0]
    cell = running + [_reached(spec, 32, high, 112.0)]
    rep = _reached(spec, 32, mid, None, seed=1, status="running")
    p = plan(spec, ref + cell + [rep], 0.0)
    state = {c.batch_size: c for c in p.cells}[32]
    assert state.state != "done" and state.counts.get("running") == 1
    # Unlisted cells (and every cell with the fields off) run none.
    assert not [t for t in plan(chained_spec().replace(pinned_targets={"tiny-0.1M_D2M": 3.2}), ref + cell, 0.0).start
                if t.seed != 0]


@pytest.mark.parametrize("search,field,value", [
    ({"replicate_batch_sizes": [16]}, "search.replicate_batch_sizes", "[16]"),  # b_ref
    ({"replicate_batch_sizes": [48]}, "search.replicate_batch_sizes", "[48]"),  # not a batch size
    ({"replicate_batch_sizes": [0]}, "search.replicate_batch_sizes", "0"),
    ({"replicate_batch_sizes": [32, 32]}, "search.replicate_batch_sizes", "[32, 32]"),
    ({"replicates": 0}, "search.replicates", "0"),
    ({"replicates": 5}, "search.replicates", "5"),
])
def test_the_replicate_fields_are_checked_by_name(search, field, value):
    with pytest.raises(ConfigError, match=field) as err:
        chained_spec(**search)
    assert value in str(err.value)


def test_the_dry_run_names_the_replicated_cells_and_their_seeds():
    text = "\n".join(describe_chained(chained_spec(replicate_batch_sizes=[8, 64])))
    assert "replicates: B = 8, 64 each run 1 more trial(s)" in text and "seed(s) 1" in text
    assert "replicates" not in "\n".join(describe_chained(chained_spec()))


def test_replicates_keep_b_star_at_zero_noise_for_more_tokens():
    """σ = 0, η* ∝ √B: with replicates at 8 and 1024, B* within 0.5% of the truth; the replicates cost tokens."""
    from cbscore.study.simulate import SimConfig, TruthCurve, simulate

    sizes = [2 ** k for k in range(2, 11)]
    base = chained_spec().replace(batch_sizes=sizes)
    reps = base.replace(search=dataclasses.replace(base.search, replicate_batch_sizes=(8, 1024)))
    truth = {base.resolve_settings()[0].setting_id: TruthCurve(s_min=100.0, b_noise=64.0)}
    config = SimConfig(noise_sigma=0.0, lr_penalty=0.198)
    on, off = simulate(reps, truth, config), simulate(base, truth, config)
    s_on, s_off = on.summary()[0], off.summary()[0]
    assert s_on["cbs_study_median"] == pytest.approx(s_on["cbs_truth"], rel=0.005)
    assert s_on["cbs_study_median"] == pytest.approx(s_off["cbs_study_median"], rel=0.002)
    assert on.to_json_dict()["tokens_study_mean"] > off.to_json_dict()["tokens_study_mean"]
