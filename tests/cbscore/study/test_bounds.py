"""Every number of a study spec is finite and inside its stated range, with the field named
(issue 21, finding 8): never a raw ValueError from deep in the recipe, never a trial without end."""

from __future__ import annotations

import math
import time

import pytest

from cbscore.errors import ConfigError
from cbscore.study import StudySpec
from cbscore.study.bounds import RANGES


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


def test_every_ranged_field_exists():
    import dataclasses

    from cbscore.study import SearchSpec
    from cbscore.study.spec_parts import ExperimentalSpec

    names = {f.name for f in dataclasses.fields(StudySpec)} | {"settings.tokens"}
    names |= {f"search.{f.name}" for f in dataclasses.fields(SearchSpec)}
    names |= {f"experimental.{f.name}" for f in dataclasses.fields(ExperimentalSpec)}
    assert set(RANGES) <= names
