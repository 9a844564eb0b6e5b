"""Issue 41, finding 4: the lab's ceilings (cbscore.study.ceilings) are the operator's, not the
spec's, and a spec is measured against them by arithmetic, fast whatever it asks for."""

from __future__ import annotations

import time

import pytest
import yaml

from cbscore.errors import ConfigError
from cbscore.study import PRESET_NAMES, StudySpec, load_preset
from cbscore.study.ceilings import Ceilings, check_ceilings


def test_the_ceilings_come_from_the_environment_else_the_defaults():
    assert Ceilings.from_env({}) == Ceilings(max_trials=5000, max_total_tokens=1e14, max_list=64,
                                             max_context_tokens=8192)
    assert Ceilings.from_env({"CBS_MAX_TRIALS": "300", "CBS_MAX_TOTAL_TOKENS": "2e12", "CBS_MAX_LIST": "16",
                              "CBS_MAX_CONTEXT": "1024"}) == \
        Ceilings(max_trials=300, max_total_tokens=2e12, max_list=16, max_context_tokens=1024)
    with pytest.raises(ConfigError) as err:
        Ceilings.from_env({"CBS_MAX_TRIALS": "lots"})
    assert str(err.value) == "CBS_MAX_TRIALS: must be a positive number, but got 'lots'."


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_is_within_the_default_ceilings(name):
    check_ceilings(load_preset(name), Ceilings())


def test_a_spec_that_raises_its_own_max_trials_is_still_held_by_the_labs_ceiling():
    # 4 batch sizes x 25 rates x 40 seeds x 1 setting = 4,000 trials; the owner raised max_trials to allow it
    spec = load_preset("demo").replace(settings=load_preset("demo").settings[:1], batch_sizes=(4, 8, 16, 32),
                                       b_ref=8, seeds=tuple(range(40)), max_trials=10**7,
                                       search=load_preset("demo").search.__class__(
                                           kind="grid", lrs=tuple(1e-3 * (1 + i / 10) for i in range(25))))
    with pytest.raises(ConfigError) as err:
        check_ceilings(spec, Ceilings(max_trials=1000))
    assert err.value.field == "trials" and err.value.value == "4,000 trials"
    assert "lab's ceiling of 1,000 trials (CBS_MAX_TRIALS" in err.value.reason
    check_ceilings(spec, Ceilings(max_trials=4000))
    with pytest.raises(ConfigError) as err:
        check_ceilings(spec, Ceilings(max_trials=4000, max_total_tokens=1e3))
    assert err.value.field == "total_tokens" and "CBS_MAX_TOTAL_TOKENS" in err.value.reason


def test_a_64_kib_spec_is_refused_before_anything_per_trial_is_built():
    data = load_preset("demo").to_dict()
    data["batch_sizes"], data["b_ref"] = list(range(4, 9004)), 8  # 9,000 batch sizes: 135,000 trials
    text = yaml.safe_dump(data)
    assert 60_000 < len(text) <= 64 * 1024
    start = time.perf_counter()
    spec = StudySpec.from_yaml(text)
    with pytest.raises(ConfigError) as err:
        check_ceilings(spec, Ceilings())
    # a bound against building the 135,000 trials (20.8 s for 90,000 before the ceilings), not a
    # timing: the refusal took 0.3-0.4 s alone and 1.1 s at load 6 on the shared two cores
    assert time.perf_counter() - start < 10.0
    assert err.value.field == "batch_sizes" and err.value.value == "9,000 entries"
    assert err.value.reason.startswith("is longer than the lab's ceiling of 64 entries per list (CBS_MAX_LIST)")


def test_a_context_past_the_labs_ceiling_is_refused_naming_the_field():
    spec = load_preset("demo").replace(context_tokens=2**20)  # within the spec's own range (2**20)
    with pytest.raises(ConfigError) as err:
        check_ceilings(spec, Ceilings())
    assert str(err.value) == ("context_tokens: is longer than the lab's ceiling of 8,192 tokens (CBS_MAX_CONTEXT); "
                              "only an admin may launch past it, but got 1048576.")
    check_ceilings(load_preset("demo").replace(context_tokens=8192), Ceilings())
