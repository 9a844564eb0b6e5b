"""Replicates of a chained cell (``search.replicate_batch_sizes``, ``search.replicates``): once a listed
cell settled, trials at its best rate with new training seeds, read through the seeds' two-way fit."""

from __future__ import annotations

import dataclasses
import math

import pytest

from cbscore.analysis import measure_points
from cbscore.analysis._points import seed_adjusted_levels
from cbscore.analysis._trial import TrialSteps
from cbscore.errors import ConfigError
from cbscore.study import plan
from cbscore.study.budgets import cell_size
from cbscore.study.chained import chain_centres, describe_chained, replicate_seeds
from tests.cbscore.study.test_chained import _reached, _reference, chained_spec


def _settled_cell(spec, b: int, centre: float) -> list:
    """A chained cell at ``b`` whose three rates crossed, the middle one best (settled on ``centre``)."""
    return [_reached(spec, b, round(centre / 2, 8), 110.0), _reached(spec, b, centre, 100.0),
            _reached(spec, b, round(centre * 2, 8), 112.0)]


def test_a_settled_listed_cell_starts_its_replicates_at_its_best_rate_with_new_seeds():
    spec = chained_spec(replicate_batch_sizes=[32], replicates=2).replace(pinned_targets={"tiny-0.1M_D2M": 3.2})
    assert replicate_seeds(spec) == (1, 2)
    ref = _reference(spec, best=0.008)
    centre = chain_centres(spec, {16: ref})[32]
    cell = [_reached(spec, 32, v, s) for v, s in zip(sorted(_rates(spec, centre)), (110.0, 100.0, 112.0))]
    p = plan(spec, ref + cell, 0.0)
    started = [(t.batch_size, t.lr, t.seed) for t in p.start if t.batch_size == 32]
    assert started == [(32, centre, 1), (32, centre, 2)]
    # Counted in the cell (three rates and two replicates) and in the dry run's trials per cell.
    assert {c.batch_size: c.n_trials for c in p.cells}[32] == 5
    assert cell_size(spec, 32) == 3 + 2 and cell_size(spec, 64) == 3
    # The cell above was released on the spec seed's best alone, and stays centred there.
    assert chain_centres(spec, {16: ref, 32: cell})[64] == chain_centres(
        spec, {16: ref, 32: cell + [_reached(spec, 32, centre, 90.0, seed=1)]})[64]


def _rates(spec, centre):
    from cbscore.study.chained import bracket

    return bracket(spec, centre)


def test_an_unsettled_or_unlisted_cell_starts_no_replicate_and_the_cell_waits_for_them():
    spec = chained_spec(replicate_batch_sizes=[32]).replace(pinned_targets={"tiny-0.1M_D2M": 3.2})
    ref = _reference(spec, best=0.008)
    centre = chain_centres(spec, {16: ref})[32]
    low, mid, high = _rates(spec, centre)
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


def _steps(b: int, lr: float, shift: float = 0.0) -> float:
    """S = 1000·(1 + 1000/B)·e^shift·e^(0.2·ln²(η/η*)), η* = 0.01·√(B/256): a parabola in ln η."""
    return 1000.0 * (1 + 1000.0 / b) * math.exp(shift + 0.2 * math.log(lr / (0.01 * math.sqrt(b / 256))) ** 2)


def _grid(shift: float = 0.0, seed: int = 0) -> list[TrialSteps]:
    out = []
    for b in (256, 512, 1024, 2048):
        opt = 0.01 * math.sqrt(b / 256)
        out += [TrialSteps(batch_size=b, outcome="reached", steps=_steps(b, lr, shift), seed=seed, lr=lr)
                for lr in (opt / 2.1, opt * 1.05, opt * 1.9)]
    return out


def test_at_zero_noise_a_replicate_with_its_own_seed_shift_changes_no_s_of_b():
    """The replicate seed's shift (+0.1 in ln S) and its rate off the optimum (×1.3) both come out."""
    base = measure_points(_grid())
    reps = [TrialSteps(batch_size=b, outcome="reached", steps=_steps(b, 1.3 * 0.01 * math.sqrt(b / 256), 0.1),
                       seed=1, lr=1.3 * 0.01 * math.sqrt(b / 256)) for b in (512, 2048)]
    both = measure_points(_grid() + reps)
    for p, q in zip(base, both):
        assert q.steps == pytest.approx(p.steps, rel=1e-12)
        assert q.lr_best == p.lr_best
    # Averaged as a plain mean over the seeds of a cell, the shift would move S(512) by e^0.05.
    assert dict(measure_points(_grid() + reps)[1].seed_cells)[1] == pytest.approx(
        math.exp(0.1) * base[1].steps, rel=1e-9)


def test_the_two_way_fit_reads_a_replicate_only_through_the_contrasts_its_seed_shares():
    # Seed 0 everywhere; seed 1 at B = 1 and 2, 0.2 higher and with a contrast 0.1 larger.
    table = {(1, 0): 1.0, (2, 0): 0.5, (4, 0): 0.2, (1, 1): 1.2, (2, 1): 0.8}
    mu = seed_adjusted_levels(table, [0])
    # Shift 0.25 (the mean difference); μ_1 = (1.0 + 1.2 − 0.25)/2, μ_2 = (0.5 + 0.8 − 0.25)/2, μ_4 = 0.2.
    assert mu == pytest.approx({1: 0.975, 2: 0.525, 4: 0.2})
    # At one batch size alone it changes nothing; a seed sharing none is not identified.
    assert seed_adjusted_levels({(1, 0): 1.0, (2, 0): 0.5, (2, 1): 0.9}, [0]) == pytest.approx({1: 1.0, 2: 0.5})
    assert seed_adjusted_levels({(1, 0): 1.0, (2, 1): 0.9}, [0]) is None


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
