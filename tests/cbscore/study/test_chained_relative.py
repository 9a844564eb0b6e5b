"""The chained search's relative fields (issue 40): ``search.bracket_top_cells`` and
``search.replicate_ends`` say which cells stay bracketed and which are replicated without naming
one grid's batch sizes, and plan exactly as the absolute fields they stand for."""

from __future__ import annotations

import json

import pytest

from cbscore.errors import ConfigError
from cbscore.study import load_preset
from cbscore.study.budgets import cell_size
from cbscore.study.chained import describe_chained, is_narrow
from cbscore.study.simulate import LAB_NOISE, SimConfig, paper_truth, simulate
from tests.cbscore.study.test_chained import chained_spec


def test_the_top_cells_keep_the_bracket_and_the_cells_below_them_are_narrow():
    # Batch sizes 4..64, B_ref = 16: the two largest (32, 64) keep the bracket, 4 and 8 are narrow.
    spec = chained_spec(bracket_top_cells=2, narrow_rates=2)
    assert spec.bracket_floor == 32
    assert [b for b in spec.batch_sizes if is_narrow(spec, b)] == [4, 8]
    assert "narrow cells (B < 32: 4, 8)" in "\n".join(describe_chained(spec))
    # One top cell: 32 is narrow too; the reference cell never is.
    one = chained_spec(bracket_top_cells=1, narrow_rates=2)
    assert [b for b in one.batch_sizes if is_narrow(one, b)] == [4, 8, 32]
    # As many top cells as the grid has (or more): every cell is bracketed.
    assert chained_spec(bracket_top_cells=5, narrow_rates=2).bracket_floor is None
    assert not any(is_narrow(s, b) for s in [chained_spec(bracket_top_cells=9, narrow_rates=2)] for b in s.batch_sizes)
    # Neither field: no floor.
    assert chained_spec().bracket_floor is None


def test_the_ends_are_the_smallest_and_largest_cells_other_than_b_ref():
    spec = chained_spec(replicate_ends=True)
    assert spec.replicated_batch_sizes == (4, 64)
    assert cell_size(spec, 4) == cell_size(spec, 8) + 1 and cell_size(spec, 64) == cell_size(spec, 32) + 1
    assert "replicates: B = 4, 64" in "\n".join(describe_chained(spec))
    # B_ref at an end: the next cell inward is that end.
    low = chained_spec(replicate_ends=True).replace(b_ref=4)
    assert low.replicated_batch_sizes == (8, 64)
    # Off: the absolute list, as given.
    assert chained_spec(replicate_batch_sizes=[8, 64]).replicated_batch_sizes == (8, 64)
    assert chained_spec().replicated_batch_sizes == ()


@pytest.mark.parametrize("search, field, words", [
    ({"bracket_top_cells": 2, "bracket_min_batch_size": 32}, "search.bracket_top_cells", "give one"),
    ({"replicate_ends": True, "replicate_batch_sizes": [8, 64]}, "search.replicate_ends", "without"),
    ({"bracket_top_cells": 0}, "search.bracket_top_cells", "positive integer"),
    ({"replicate_ends": "yes"}, "search.replicate_ends", ""),
])
def test_the_relative_fields_are_checked_by_name(search, field, words):
    with pytest.raises(ConfigError) as err:
        chained_spec(**search)
    assert err.value.field == field and words in str(err.value)


def test_replicate_ends_belongs_to_a_chained_search():
    spec = chained_spec()
    d = spec.to_dict()
    d["search"] = {**d["search"], "kind": "grid", "replicate_ends": True}
    with pytest.raises(ConfigError) as err:
        type(spec).from_dict(d)
    assert err.value.field == "search.replicate_ends" and "kind grid" in str(err.value)


def test_the_relative_fields_plan_as_the_absolute_ones_on_a_paper_preset():
    # paper-fixed-d: batch sizes 64..16384, B_ref 256; the top two cells are 8192 and 16384 and the
    # ends other than B_ref are 64 and 16384 (the best combination of docs/results/cheaper-search/chained/).
    common = {"kind": "chained", "chain_centre": "vertex", "local_exponent": True, "narrow_rates": 2}
    base = load_preset("paper-fixed-d")
    absolute = base.replace(search={**base.search.to_dict(), **common, "bracket_min_batch_size": 8192,
                                    "replicate_batch_sizes": [64, 16384]})
    relative = base.replace(search={**base.search.to_dict(), **common, "bracket_top_cells": 2,
                                    "replicate_ends": True})
    assert relative.bracket_floor == 8192 and relative.replicated_batch_sizes == (64, 16384)
    config = SimConfig(**dict(LAB_NOISE))
    a = simulate(absolute, paper_truth(absolute), config, seeds=2).to_json_dict()
    b = simulate(relative, paper_truth(relative), config, seeds=2).to_json_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a["tokens_study_mean"] > 0
