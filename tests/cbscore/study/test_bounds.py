"""Every number of a study spec is finite and inside its stated range, with the field named
(issue 21, finding 8): never a raw ValueError from deep in the recipe, never a trial without end."""

from __future__ import annotations

import math
import time

import pytest

from cbscore.config import Entry, Range
from cbscore.errors import ConfigError
from cbscore.study import StudySpec, load_preset
from cbscore.study.bounds import FINITE, MAX_BATCH, MAX_TOKENS, ranges


def spec_dict(**changes) -> dict:
    base = dict(name="t", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 100_000}],
                batch_sizes=[4, 8, 16], b_ref=8, context_tokens=32, search={"kind": "grid", "lrs": [0.01]})
    base.update(changes)
    return base


@pytest.mark.parametrize("changes, field", [
    ({"weight_decay": math.inf}, "weight_decay"),
    ({"prune_margin": True}, "prune_margin"),
    ({"warmup_fraction": False}, "warmup_fraction"),
    ({"beta1": True}, "beta1"),
    ({"budget_multiple": 1e300}, "budget_multiple"),
    ({"settings": [{"model": "tiny-0.1M", "tokens": 10**30}]}, "settings[0].tokens"),
    ({"kind": "fixed_n", "models": ["tiny-0.1M"], "tokens": [10**30], "settings": []}, "tokens"),
    ({"tokens_per_param": 1e300, "kind": "chinchilla", "models": ["tiny-0.1M"], "settings": []}, "tokens_per_param"),
    ({"context_tokens": 2**40}, "context_tokens"),
    ({"seeds": [2**70]}, "seeds"),
    ({"grad_clip": math.nan}, "grad_clip"),
    ({"max_total_tokens": 10**400}, "max_total_tokens"),
    ({"search": {"kind": "optuna", "n_trials": 10**9}}, "search.n_trials"),
    ({"search": {"kind": "grid", "lrs": [0.01], "parallel_per_cell": 10**6}}, "search.parallel_per_cell"),
    ({"target_losses": {"tiny-0.1M_D100K": 1e300}}, "target_losses.tiny-0.1M_D100K"),
    ({"target_losses": {"tiny-0.1M_D100K": 10**400}}, "target_losses.tiny-0.1M_D100K"),
    ({"overhead": 10**400}, "overhead"),
    ({"data": {"source": "builtin", "max_documents": math.inf}}, "data.max_documents"),
    ({"data": {"source": "x" * 5000}}, "data.source"),
])
def test_an_out_of_range_number_is_refused_naming_the_field(changes, field):
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        StudySpec.from_dict(spec_dict(**changes))
    assert time.perf_counter() - start < 1.0
    assert err.value.field == field


def test_the_reason_states_the_range():
    with pytest.raises(ConfigError) as err:
        StudySpec.from_dict(spec_dict(budget_multiple=1e300))
    assert str(err.value) == "budget_multiple: must be a finite number in [1, 100], but got 1e+300."


def test_every_preset_is_inside_the_ranges():
    from cbscore.study import PRESET_NAMES, load_preset

    for name in PRESET_NAMES:
        load_preset(name)  # raises if a preset left a range


#: The table of ranges the spec kept apart from its fields before they moved into the fields'
#: metadata (cbscore/study/bounds.py's RANGES): the known answer of the table walked from them.
OLD_RANGES = {
    "tokens": Range(1, MAX_TOKENS, integer=True),
    "settings.tokens": Range(1, MAX_TOKENS, integer=True),
    "tokens_per_param": Range(0, 1e4, lo_open=True),
    "batch_sizes": Range(1, MAX_BATCH, integer=True),
    "context_tokens": Range(1, 2**20, integer=True),
    "b_ref": Range(1, MAX_BATCH, integer=True),
    "overhead": Range(0, 10, lo_open=True),
    "target_losses": Range(0, 100),
    "budget_multiple": Range(1, 100),
    "budget_margin": Range(0, 10),
    "prune_margin": Range(0, 10),
    "equal_token_margin": Range(0, 10),
    "far_rate_margin": Range(0, 10),
    "far_rate_fraction": Range(0, 1),
    "warmup_fraction": Range(0, 1, hi_open=True),
    "beta1": Range(0, 1, hi_open=True),
    "beta2": Range(0, 1, hi_open=True),
    "ewa_taus": Range(0, 1, lo_open=True, hi_open=True),
    "weight_decay": Range(0, 10),
    "grad_clip": Range(0, 1e6, lo_open=True),
    "micro_batch_size": Range(1, MAX_BATCH, integer=True),
    "devices_per_trial": Range(1, 1024, integer=True),
    "gns_micro_batch_size": Range(1, MAX_BATCH, integer=True),
    "eval_windows": Range(1, 10**6, integer=True),
    "max_eval_fraction": Range(0, 10, lo_open=True),
    "seeds": Range(0, 2**32 - 1, integer=True),
    "max_trials": Range(1, 10**7, integer=True),
    "max_total_tokens": Range(0, 1e18, lo_open=True),
    "search.lrs": Range(0, 10, lo_open=True),
    "search.lr_min": Range(0, 10, lo_open=True),
    "search.lr_max": Range(0, 10, lo_open=True),
    "search.n_trials": Range(1, 10_000, integer=True),
    "search.parallel_per_cell": Range(1, 1024, integer=True),
    "search.lr_extensions": Range(0, 8, integer=True),
    "experimental.lr_prior": Range(0, 10, lo_open=True),
}
#: Ranges the fields state now that the old table did not (each field's own check already held its
#: value there, so the walk refuses nothing new): the search's chained-bracket numbers, the
#: local and decay blocks.
ADDED = {
    "equal_token_fraction": Range(0, 1, lo_open=True),
    "search.chain_exponent": Range(0, 2, lo_open=True),
    "search.bracket_ratio": Range(1.1, 10),
    "search.extension_gain": Range(0, 1),
    "search.max_extensions": Range(0, 8, integer=True),
    "search.replicate_batch_sizes": Range(1, MAX_BATCH, integer=True),
    "search.replicates": Range(1, 4, integer=True),
    "search.bracket_top_cells": Range(1, 1_000, integer=True),
    "local.base_batch_size": Range(1, MAX_BATCH, integer=True),
    "local.base_lr": Range(0, 10, lo_open=True),
    "local.checkpoint_count": Range(0, 30, integer=True),
    "local.checkpoint_tokens": Range(1, MAX_TOKENS, integer=True),
    "local.multipliers": Range(0, 1024, lo_open=True),
    "local.early_multipliers": Range(0, 1024, lo_open=True),
    "local.early_checkpoints": Range(0, 30, integer=True),
    "local.window_fraction": Range(0, 4, lo_open=True),
    "local.window_tokens": Range(1, MAX_TOKENS, integer=True),
    "local.epsilon": Range(0, 10),
    "local.z": Range(0, 10),
    "local.smooth_fraction": Range(0, 1, lo_open=True),
    "local.warmup_schedule": Entry(Range(1, MAX_TOKENS, integer=True), Range(1, MAX_BATCH, integer=True),
                                   Range(0, 1024, lo_open=True)),
    "decay.decay_fraction": Range(0, 0.5, lo_open=True),
    "decay.min_lr_ratio": Range(0, 1, hi_open=True),
    "decay.horizon_low": Range(0, 1, lo_open=True),
    "decay.horizon_high": Range(1, 16),
    "decay.wsd_ratio": Range(1, 4, lo_open=True),
    "decay.cosine_ratio": Range(1, 4, lo_open=True),
    "decay.cosine_high": Range(1, 16),
    "decay.lr_exponent": Range(-1, 1),
}
#: Numeric fields that state no range (only finite, within ±ANY_NUMBER): their checks bound them
#: below, and no upper bound was ever stated for them.
UNSTATED = {"recipe_d_ref_tokens", "pinned_targets", "search.bracket_min_batch_size", "search.narrow_rates"}


def test_every_numeric_field_of_every_spec_block_states_its_range():
    table = ranges(StudySpec)
    assert [path for path, rng in table.items() if rng is None] == []  # a new field cannot come without one
    assert {path.split(".")[0] for path in table if "." in path} == {"settings", "search", "experimental", "local",
                                                                      "decay"}


def test_the_table_walked_from_the_fields_is_the_old_table_and_the_added_ranges():
    table = ranges(StudySpec)
    assert {path for path, rng in table.items() if rng is FINITE} == UNSTATED
    assert {path: rng for path, rng in table.items() if rng is not FINITE} == {**OLD_RANGES, **ADDED}


def _outside(rng: Range) -> list:
    """A value just past each edge of ``rng``."""
    step = 1 if rng.integer else 1e-9 * max(1.0, abs(rng.hi))
    low = rng.lo if rng.lo_open else rng.lo - (1 if rng.integer else 1e-9 * max(1.0, abs(rng.lo)))
    return [low, rng.hi if rng.hi_open else rng.hi + step]


def _spec_with(path: str, value) -> dict:
    """A spec that is valid but for ``value`` at ``path`` (a list field gets ``[value]``)."""
    block, _, name = path.rpartition(".")
    listed = name in {"tokens", "batch_sizes", "ewa_taus", "seeds", "lrs", "checkpoint_tokens", "multipliers",
                      "early_multipliers", "replicate_batch_sizes"}
    given = [value] if listed else {"tiny-0.1M_D100K": value} if name in ("target_losses", "pinned_targets") else value
    if name == "batch_sizes":
        given = [8, value]  # b_ref's among them
    if block in ("local", "decay"):
        base = load_preset("local-demo" if block == "local" else "ablation-schedule").to_dict()
        return {**base, block: {**(base.get(block) or {}), name: given}}
    if block == "settings":
        return spec_dict(settings=[{"model": "tiny-0.1M", "tokens": value}])
    if block:
        kind = {"n_trials": "optuna", "parallel_per_cell": "optuna"}.get(name, "chained")
        return spec_dict(**{block: {**({"kind": kind, "lrs": [0.01]} if block == "search" else {}), name: given}})
    if name == "tokens":
        return spec_dict(kind="fixed_n", models=["tiny-0.1M"], settings=[], tokens=given)
    return spec_dict(**{name: given})


@pytest.mark.parametrize("path", sorted(set(OLD_RANGES) | set(ADDED)))
def test_each_stated_range_is_held(path):
    """A number just past either edge of a field's stated range is refused, naming the field (by its
    own check's words or the range's), so what ``cbs study fields`` states is what a spec gets."""
    rng = ranges(StudySpec)[path]
    if isinstance(rng, Entry):  # local.warmup_schedule: each position of a switch
        cases = [[[*(v if i == j else good for j, good in enumerate((4096, 16, 2.0)))]]
                 for i, r in enumerate(rng.items) for v in _outside(r)]
        for case in cases:
            spec = _spec_with(path, None)
            spec["local"].update(warmup_run=True, warmup_schedule=case)
            with pytest.raises(ConfigError) as err:
                StudySpec.from_dict(spec)
            assert err.value.field.startswith(path)
        return
    for value in _outside(rng):
        with pytest.raises(ConfigError) as err:
            StudySpec.from_dict(_spec_with(path, value))
        shown = path.replace("settings.", "settings[0].")
        # (lr_min above lr_max's default is named as the rule between the two names it)
        assert err.value.field.startswith(shown) or (path, err.value.field) == ("search.lr_min", "search.lr_max"), (
            path, value, str(err.value))
