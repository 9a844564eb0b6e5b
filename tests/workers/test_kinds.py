"""The workers' side of the study kinds: one entry per kind, an unknown kind refused by name."""

import pytest

from cbscore.errors import ConfigError
from cbscore.study import load_preset, plan
from cbscore.study.kinds import STUDY_KINDS, require_kind
from workers.studies.kinds import WORKER_KINDS, worker_kind


def test_every_kind_has_one_entry():
    assert tuple(WORKER_KINDS) == tuple(STUDY_KINDS)
    assert all(worker_kind(name).name == name for name in STUDY_KINDS)


def test_unknown_kind_refused_naming_field_and_value():
    with pytest.raises(ConfigError) as e:
        worker_kind("grid")
    assert (e.value.field, e.value.value) == ("kind", "grid")


@pytest.mark.parametrize(("preset", "readout", "recipe"), [("demo", False, True), ("local-demo", True, False),
                                                         ("ablation-schedule", True, True)])
def test_each_kind_answers(preset, readout, recipe):
    spec = load_preset(preset)
    kind = worker_kind(spec)
    tokens, setting_id, batch_size = kind.largest_trial(spec)
    assert tokens > 0 and setting_id in {s.setting_id for s in spec.resolve_settings()}
    assert batch_size in spec.batch_sizes or batch_size == getattr(spec.local, "base_batch_size", None)
    lines = kind.dry_run_lines(spec, plan(spec, [], 0.0), str)
    assert lines and all(isinstance(line, str) for line in lines)
    assert (kind.readout is not None) is readout and (kind.format_readout is not None) is readout
    assert kind.shows_recipe is recipe
    assert (kind.snapshots is None) is (spec.kind not in ("local", "schedule"))


def test_require_kind_names_the_study():
    spec = load_preset("demo")
    require_kind("demo", spec, spec.kind)
    with pytest.raises(ConfigError) as e:
        require_kind("demo", spec, "local")
    assert (e.value.field, e.value.value) == ("name", "demo") and "not a local one" in str(e.value)
