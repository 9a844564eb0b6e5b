"""cbs study extend's rules (cbscore.study.extend): what may grow, what is refused, what is pinned."""

from __future__ import annotations

import pytest

from cbscore.errors import ConfigError
from cbscore.recipe import spec_recipe
from cbscore.study import StudySpec
from cbscore.study.extend import extend_spec

BASE = dict(name="grow", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 50_000},
                                                  {"model": "tiny-0.1M", "tokens": 200_000}],
            batch_sizes=[4, 8, 16], b_ref=4, context_tokens=128, search={"kind": "grid", "lrs": [0.006, 0.012]})
TARGETS = {"tiny-0.1M_D50K": 5.9, "tiny-0.1M_D200K": 5.4}


def stored(**changes) -> StudySpec:
    return StudySpec.from_dict({**BASE, **changes})


def test_a_batch_size_and_a_seed_are_added_and_every_target_is_pinned():
    new, changes = extend_spec(stored(), {"batch_sizes": [4, 8, 16, 32], "seeds": [0, 1]}, targets=TARGETS,
                               ran_batch_sizes={4, 8, 16})
    assert new.batch_sizes == (4, 8, 16, 32) and new.seeds == (0, 1)
    assert new.pinned_targets == TARGETS  # a new seed's reference runs must not move the targets
    assert new.recipe_d_ref_tokens is None  # no new setting: the recipe's reference D cannot move
    assert changes[:2] == ["batch_sizes: + [32]", "seeds: + [1]"] and changes[2].startswith("targets pinned: ")
    # everything else is the stored spec
    assert {k: v for k, v in new.to_dict().items() if k not in ("batch_sizes", "seeds", "pinned_targets")} == \
        {k: v for k, v in stored().to_dict().items() if k not in ("batch_sizes", "seeds", "pinned_targets")}


def test_a_new_setting_keeps_the_fixed_recipe_of_every_cell_that_ran():
    old = stored()
    new, changes = extend_spec(old, {"settings": BASE["settings"] + [{"model": "tiny-0.1M", "tokens": 800_000}]},
                               targets=TARGETS)
    assert new.recipe_d_ref_tokens == 100_000  # √(50k·200k), not √(50k·800k) = 200k
    assert any(line.startswith("recipe_d_ref_tokens pinned at 100,000") for line in changes)
    for b in old.batch_sizes:
        for d in (50_000, 200_000):
            assert spec_recipe(new, batch_size=b, d_tokens=d) == spec_recipe(old, batch_size=b, d_tokens=d)
    # without the pin the new setting would have moved every cell's τ
    unpinned = new.replace(recipe_d_ref_tokens=None)
    assert spec_recipe(unpinned, batch_size=4, d_tokens=50_000) != spec_recipe(old, batch_size=4, d_tokens=50_000)


def test_rates_and_budgets_grow_and_a_second_extension_keeps_the_first_pins():
    first, _ = extend_spec(stored(), {"seeds": [0, 1]}, targets=TARGETS)
    second, changes = extend_spec(first, {"search": {"lrs": [0.003, 0.006, 0.012]}, "budget_margin": 0.5},
                                  targets={"tiny-0.1M_D50K": 5.8})  # a later estimate never replaces a pin ...
    assert second.search.lrs == (0.003, 0.006, 0.012) and second.budget_margin == 0.5
    assert second.pinned_targets == TARGETS  # ... the trials run since stopped at the pinned one
    assert "search.lrs: + [0.003]" in changes and "budget_margin: 0.25 → 0.5" in changes


@pytest.mark.parametrize("patch, field, words", [
    ({"b_ref": 8}, "b_ref", "cannot change it"),
    ({"context_tokens": 64}, "context_tokens", "cannot change it"),
    ({"recipe": "scaled"}, "recipe", "launch a new study"),
    ({"seeds": []}, "seeds", "must keep every value that ran"),
    ({"search": {"lrs": [0.006]}}, "search.lrs", "must keep every value that ran"),
    ({"search": {"kind": "optuna"}}, "search.kind", "cannot change in an extension"),
    ({"search": {"n_trials": 8}}, "search.n_trials", "Optuna search's trial count only"),
    ({"budget_margin": 0.1}, "budget_margin", "may only be raised"),
    ({"batch_sizes": [8, 16]}, "batch_sizes", "must keep the reference batch size B_ref = 4"),
    ({"batch_sizes": [4, 8]}, "batch_sizes", "drops [16], which have trials queued or running"),
    ({"seeds": [0]}, "patch", "changes nothing"),
    ({"name": "other"}, "name", "must be the study's own name"),
    ({"no_such": 1}, "no_such", "is not a study field"),
    ([], "patch", "must be a mapping"),
])
def test_what_an_extension_refuses_names_the_field(patch, field, words):
    with pytest.raises(ConfigError) as err:
        extend_spec(stored(), patch, targets=TARGETS, ran_batch_sizes={4, 8, 16}, busy_batch_sizes={16})
    assert err.value.field == field and words in str(err.value), str(err.value)


def test_dropping_a_batch_size_that_ran_hides_it_and_one_that_did_not_is_gone():
    new, changes = extend_spec(stored(batch_sizes=[4, 8, 16, 32]), {"batch_sizes": [4, 8]}, targets=TARGETS,
                               ran_batch_sizes={4, 8, 16})
    assert new.batch_sizes == (4, 8)
    assert "batch_sizes: [16] hidden (their trials stay in MLflow, out of the plan and the fit)" in changes
    assert "batch_sizes: - [32] (not run)" in changes


def test_pinned_targets_must_name_settings_and_be_losses():
    with pytest.raises(ConfigError, match="names no setting"):
        stored(pinned_targets={"nope": 5.0})
    with pytest.raises(ConfigError) as err:
        stored(pinned_targets={"tiny-0.1M_D50K": -1.0})
    assert err.value.field == "pinned_targets.tiny-0.1M_D50K"
