"""The ``experimental:`` block (issue 40): the rules that failed the criteria live there, off by
default; a spec from before that gives them at their old place loads, plans the same and says
where each field went."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from cbscore.errors import ConfigError
from cbscore.study import PRESET_NAMES, StudySpec, load_preset, plan
from cbscore.study.spec_parts import ExperimentalSpec

ROOT = Path(__file__).resolve().parents[3]
GRID = (0.004, 0.008, 0.016, 0.032)


def base(**changes) -> dict:
    d = dict(name="ex", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 2_000_000}],
             batch_sizes=[16, 32, 64], b_ref=16, context_tokens=128, search={"kind": "grid", "lrs": list(GRID)})
    d.update(changes)
    return d


def test_the_rules_are_off_by_default_and_absent_from_the_wire_format():
    spec = StudySpec.from_dict(base())
    assert spec.experimental == ExperimentalSpec(predict=False, lr_prior=None, prune_at_equal_tokens=False)
    d = spec.to_dict()
    assert "experimental" not in d and "prune_at_equal_tokens" not in d
    assert "predict" not in d["search"] and "lr_prior" not in d["search"]


def test_a_block_that_sets_a_rule_round_trips_through_yaml():
    spec = StudySpec.from_dict(base(experimental={"predict": True, "lr_prior": 0.008, "prune_at_equal_tokens": True}))
    assert spec.to_dict()["experimental"] == {"predict": True, "lr_prior": 0.008, "prune_at_equal_tokens": True}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new place warns of nothing
        assert StudySpec.from_yaml(spec.to_yaml()) == spec


@pytest.mark.parametrize("old, new", [
    ({"search": {"kind": "grid", "lrs": list(GRID), "predict": True}}, {"predict": True}),
    ({"search": {"kind": "grid", "lrs": list(GRID), "lr_prior": 0.008}}, {"lr_prior": 0.008}),
    ({"prune_at_equal_tokens": True}, {"prune_at_equal_tokens": True}),
])
def test_a_spec_from_before_loads_with_a_warning_naming_the_new_place_and_plans_the_same(old, new):
    field = next(iter(new))
    where = f"search.{field}" if "search" in old else field
    with pytest.warns(FutureWarning, match=rf"^{where} moved to experimental\.{field}\b"):
        before = StudySpec.from_dict(base(**old))
    after = StudySpec.from_dict(base(experimental=new))
    assert before == after
    assert getattr(before.experimental, field) == new[field]
    assert repr(plan(before, [], 0.0)) == repr(plan(after, [], 0.0))


def test_the_old_and_new_place_disagreeing_is_refused_naming_both():
    with pytest.raises(ConfigError, match=r"prune_at_equal_tokens.*experimental\.prune_at_equal_tokens.*False"):
        StudySpec.from_dict(base(prune_at_equal_tokens=True, experimental={"prune_at_equal_tokens": False}))


def test_replace_with_an_old_name_keeps_the_rest_of_the_block():
    spec = StudySpec.from_dict(base(experimental={"lr_prior": 0.008}))
    with pytest.warns(FutureWarning, match="prune_at_equal_tokens moved"):
        on = spec.replace(prune_at_equal_tokens=True)
    assert on.experimental == ExperimentalSpec(lr_prior=0.008, prune_at_equal_tokens=True)


@pytest.mark.parametrize("block, field, value", [
    ({"predict": "yes"}, "experimental.predict", "'yes'"),
    ({"prune_at_equal_tokens": 1}, "experimental.prune_at_equal_tokens", "1"),
    ({"lr_prior": 0.5}, "experimental.lr_prior", "0.5"),
    ({"shiny": True}, "experimental.shiny", "True"),
])
def test_a_bad_block_is_refused_naming_the_field_and_value(block, field, value):
    with pytest.raises(ConfigError) as err:
        StudySpec.from_dict(base(experimental=block))
    assert err.value.field == field and value in str(err.value)


def test_predict_applies_to_a_grid_search_only():
    with pytest.raises(ConfigError, match=r"experimental\.predict.*grid only, not chained"):
        StudySpec.from_dict(base(search={"kind": "chained", "lrs": list(GRID)}, experimental={"predict": True}))


def test_a_search_mapping_built_directly_names_the_moved_field():
    with pytest.raises(ConfigError, match=r"search\.predict.*moved to experimental\.predict"):
        StudySpec(name="ex", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 2_000_000}],
                  batch_sizes=[16, 32], b_ref=16, search={"kind": "grid", "predict": True})


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_no_preset_uses_an_experimental_rule(preset):
    assert load_preset(preset).experimental == ExperimentalSpec()
    assert not any(key in (ROOT / "cbscore/presets" / f"{preset}.yaml").read_text()
                   for key in ("predict:", "lr_prior:", "prune_at_equal_tokens:", "experimental:"))


def test_the_committed_specs_that_gave_a_rule_at_its_old_place_still_load():
    """docs/results/cheaper-search/study-rules-on ran with search.predict and prune_at_equal_tokens."""
    with pytest.warns(FutureWarning):
        spec = StudySpec.from_yaml(ROOT / "docs/results/cheaper-search/study-rules-on/spec.yaml")
    assert spec.experimental.predict and spec.experimental.prune_at_equal_tokens


def test_every_committed_spec_loads_and_those_from_before_name_where_each_rule_went():
    """The specs under docs/results/ load; each one that gives a rule at its old place warns for it
    (their dry runs and first plans were compared before and after the move: identical)."""
    paths = sorted(ROOT.glob("docs/results/**/*.yaml"))
    assert len(paths) >= 30
    for path in paths:
        text = path.read_text()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            spec = StudySpec.from_yaml(path)
        said = {str(w.message).split(" moved")[0] for w in caught if w.category is FutureWarning}
        import yaml

        raw = yaml.safe_load(text)
        old = {f"search.{k}" for k in ("predict", "lr_prior") if k in (raw.get("search") or {})}
        old |= {"prune_at_equal_tokens"} & set(raw)
        assert said == old, path
        assert spec.experimental.predict == bool((raw.get("search") or {}).get("predict", False)), path
