"""The study kinds' registry: one object per kind of StudySpec, an unknown kind refused by name."""

import pytest

from cbscore.errors import ConfigError
from cbscore.study import grid_tokens, grid_trials, load_preset, plan
from cbscore.study.kinds import STUDY_KINDS, GridKind, LocalKind, ScheduleKind, study_kind
from cbscore.study.spec import KINDS


def test_every_kind_has_one_object():
    assert tuple(STUDY_KINDS) == KINDS
    assert all(study_kind(name).name == name for name in KINDS)
    assert isinstance(study_kind("local"), LocalKind) and isinstance(study_kind("schedule"), ScheduleKind)
    assert all(isinstance(study_kind(n), GridKind) for n in ("chinchilla", "fixed_n", "fixed_d", "custom"))


@pytest.mark.parametrize("bad", ["grid", "Local", "", None])
def test_unknown_kind_refused_naming_field_and_value(bad):
    with pytest.raises(ConfigError) as e:
        study_kind(bad)
    assert e.value.field == "kind" and e.value.value == bad
    assert "local" in str(e.value) and "schedule" in str(e.value)


@pytest.mark.parametrize("preset", ["demo", "local-demo", "ablation-schedule"])
def test_each_kind_answers(preset):
    spec = load_preset(preset)
    kind = study_kind(spec)
    assert kind is study_kind(spec.kind)
    assert kind.grid_trials(spec) == grid_trials(spec) > 0
    assert kind.grid_tokens(spec) == grid_tokens(spec) > 0
    per_setting = [kind.setting_grid_tokens(spec, s) for s in spec.resolve_settings()]
    assert sum(per_setting) == kind.grid_tokens(spec)
    assert kind.stops_at_target is (spec.kind != "schedule")
    first = kind.plan(spec, [], 0.0, snapshots=None, stale_after_s=120.0, max_attempts=3)
    assert first == plan(spec, [], 0.0)
