"""StudySpec on the config base (cbscore.config): each field's own check, in its metadata, speaks
first and with the words the hand-written checks had; the rules between fields come after."""

from __future__ import annotations

import math

import pytest

from cbscore.errors import ConfigError
from cbscore.study import SettingSpec, StudySpec


def small(**changes) -> dict:
    base = dict(name="t", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 100_000}],
                batch_sizes=[4, 8, 16, 32], b_ref=8, context_tokens=32, search={"kind": "grid", "lrs": [0.01, 0.03]})
    return {**base, **changes}


@pytest.mark.parametrize("changes, message", [
    ({'name': 'a b'}, "name: must be 1-64 letters, digits, '-' or '_', starting with a letter or digit, but got 'a b'."),
    ({'kind': 'sideways'}, "kind: must be one of chinchilla, fixed_n, fixed_d, custom, local, schedule, but got 'sideways'."),
    ({'models': 'tiny-0.1M'}, "models: must be a list, but got 'tiny-0.1M'."),
    ({'tokens': 5}, 'tokens: must be a list, but got 5.'),
    ({'tokens_per_param': 0}, 'tokens_per_param: must be a positive finite number, but got 0.'),
    ({'settings': [{'model': 'tiny-0.1M'}]}, "settings[0]: must be a mapping with exactly the keys model and tokens, but got {'model': 'tiny-0.1M'}."),
    ({'batch_sizes': '8'}, "batch_sizes: must be a list, but got '8'."),
    ({'context_tokens': 1.5}, 'context_tokens: must be a positive integer, but got 1.5.'),
    ({'overhead': math.inf}, 'overhead: must be a positive finite number, but got inf.'),
    ({'experimental': True}, 'experimental: must be a mapping of fields, but got True.'),
    ({'budget_multiple': 0.5}, 'budget_multiple: must be at least 1 (a trial gets at least D tokens), but got 0.5.'),
    ({'budget_margin': True}, 'budget_margin: must be a number in [0, 10], but got True.'),
    ({'prune_margin': -0.1}, 'prune_margin: must be a number in [0, 10], but got -0.1.'),
    ({'stop_far_rates': 'yes'}, "stop_far_rates: must be true or false, but got 'yes'."),
    ({'far_rate_fraction': 1.5}, 'far_rate_fraction: must be a number in [0, 1], but got 1.5.'),
    ({'far_rate_margin': 0}, 'far_rate_margin: must be a number in (0, 10] (nats), but got 0.'),
    ({'equal_token_fraction': 0}, 'equal_token_fraction: must be a number in (0, 1], but got 0.'),
    ({'equal_token_margin': 11}, 'equal_token_margin: must be a number in (0, 10] (nats), but got 11.'),
    ({'warmup_fraction': 1}, 'warmup_fraction: must be in [0, 1), but got 1.'),
    ({'schedule': 'linear'}, "schedule: must be one of constant, cosine, wsd (or constant_ewa), but got 'linear'."),
    ({'beta1': 1.0}, 'beta1: must be in [0, 1), but got 1.0.'),
    ({'recipe': 'linear'}, "recipe: must be one of fixed, scaled, paper_table, but got 'linear'."),
    ({'beta2': -0.1}, "beta2: must be in [0, 1) or null for the paper's table, but got -0.1."),
    ({'ewa_taus': []}, 'ewa_taus: must list at least one τ or be null, but got [].'),
    ({'ewa_taus': [0.9, 1.0]}, 'ewa_taus: each τ must be in (0, 1), but got 1.0.'),
    ({'weight_decay': -0.0001}, 'weight_decay: must be a non-negative number, but got -0.0001.'),
    ({'grad_clip': -1}, 'grad_clip: must be a positive finite number, but got -1.'),
    ({'micro_batch_size': 0}, 'micro_batch_size: must be a positive integer, but got 0.'),
    ({'devices_per_trial': True}, 'devices_per_trial: must be a positive integer, but got True.'),
    ({'gns_micro_batch_size': 2.0}, 'gns_micro_batch_size: must be a positive integer, but got 2.0.'),
    ({'gns_cells': 'some'}, "gns_cells: must be one of all, reference, but got 'some'."),
    ({'forecast_from': 'no name'}, "forecast_from: must be the name of another study, but got 'no name'."),
    ({'eval_windows': 0}, 'eval_windows: must be a positive integer, but got 0.'),
    ({'max_eval_fraction': 0}, 'max_eval_fraction: must be a positive finite number, but got 0.'),
    ({'seeds': []}, 'seeds: must list at least one seed, but got [].'),
    ({'seeds': [0, -1]}, 'seeds: each seed must be a non-negative integer, but got -1.'),
    ({'seeds': 3}, 'seeds: must be a list, but got 3.'),
    ({'max_trials': 10.0}, 'max_trials: must be a positive integer, but got 10.0.'),
    ({'max_total_tokens': -1}, 'max_total_tokens: must be a positive finite number, but got -1.'),
    ({'reuse_trials': 1}, 'reuse_trials: must be true or false, but got 1.'),
    ({'recipe_d_ref_tokens': 0}, 'recipe_d_ref_tokens: must be a positive integer, but got 0.'),
    ({'pinned_targets': [5.0]}, 'pinned_targets: must map setting ids to losses, but got [5.0].'),
    ({'target_losses': {'nope': 1.0}}, "target_losses: names no setting of this study (settings: ['tiny-0.1M_D100K']), but got 'nope'."),
])
def test_each_field_check_keeps_its_message(changes, message):
    """The messages of the checks before they moved into the fields' metadata, word for word."""
    with pytest.raises(ConfigError) as err:
        StudySpec.from_dict(small(**changes))
    assert str(err.value) == message


def test_a_field_check_speaks_before_the_rules_of_the_kind():
    """A schedule study with two models (its kind's rule) and no evaluation windows (a field's own
    check): the field's check runs first, as in every config on the base."""
    spec = dict(name="s", kind="schedule", models=["tiny-0.1M", "tiny-0.3M"], tokens=[100_000], batch_sizes=[4, 8],
                b_ref=4, eval_windows=0)
    with pytest.raises(ConfigError, match=r"^eval_windows: must be a positive integer, but got 0\.$"):
        StudySpec.from_dict(spec)
    with pytest.raises(ConfigError, match=r"^models: a schedule study takes exactly one model"):
        StudySpec.from_dict({**spec, "eval_windows": 8})


def test_a_search_that_is_no_mapping_is_refused_naming_it():
    """It used to build a spec that failed later, in to_dict or the planner."""
    for bad in (None, "grid", [0.01], 5):
        with pytest.raises(ConfigError, match=r"^search: must be a mapping of fields, but got "):
            StudySpec(**small(search=bad))


def test_settings_are_read_entry_by_entry_and_a_bad_entry_named_by_its_index():
    spec = StudySpec(**small(settings=[SettingSpec(model="tiny-0.1M", tokens=100_000),
                                       {"model": "tiny-0.3M", "tokens": 50_000}]))
    assert spec.settings == (SettingSpec(model="tiny-0.1M", tokens=100_000), SettingSpec(model="tiny-0.3M", tokens=50_000))
    with pytest.raises(ConfigError, match=r"^settings\[1\]: must be a mapping with exactly the keys model and tokens"):
        StudySpec.from_dict(small(settings=[{"model": "tiny-0.1M", "tokens": 1000}, {"model": "x", "tokens": 1, "n": 2}]))


def test_the_wire_form_is_a_copy_and_leaves_the_spec_as_it_was():
    spec = StudySpec.from_dict(small(target_losses={"tiny-0.1M_D100K": 5.0}, ewa_taus=[0.9]))
    wire = spec.to_dict()
    wire["data"]["source"] = "elsewhere"
    wire["target_losses"]["tiny-0.1M_D100K"] = 1.0
    wire["settings"][0]["tokens"] = 1
    assert spec.data == {"source": "builtin"} and spec.target_losses == {"tiny-0.1M_D100K": 5.0}
    assert spec.settings[0].tokens == 100_000
    assert StudySpec.from_dict(spec.to_dict()) == spec
    assert "experimental" not in wire  # the rules that failed the criteria appear only when one is used
    assert StudySpec.from_dict(small(experimental={"predict": True})).to_dict()["experimental"] == {
        "predict": True, "lr_prior": None, "prune_at_equal_tokens": False}
