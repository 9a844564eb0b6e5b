"""``trials.built`` and ``trials.replaced``: the planner's and simulator's copies without ``__init__``
equal what the dataclass would build, and refuse a missing or unknown field as ``__init__`` would."""

from __future__ import annotations

import dataclasses

import pytest

from cbscore.study.trials import TrialRecord, built, replaced


def _record() -> TrialRecord:
    return TrialRecord(trial_id="s.a.b4.lr1e-2.s0", cell_id="s.a.b4", setting_id="a", role="trial", batch_size=4,
                       lr=0.01, status="running", seed=0)


def test_replaced_equals_dataclasses_replace_and_leaves_the_original():
    r = _record()
    new = replaced(r, status="reached", steps_to_target=120.5, last_step=130)
    assert new == dataclasses.replace(r, status="reached", steps_to_target=120.5, last_step=130)
    assert r.status == "running" and r.steps_to_target is None


def test_built_equals_the_dataclass_built_from_every_field():
    r = _record()
    fields = {f.name: getattr(r, f.name) for f in dataclasses.fields(TrialRecord)}
    assert built(TrialRecord, **fields) == r


def test_a_missing_or_unknown_field_is_refused():
    r = _record()
    fields = {f.name: getattr(r, f.name) for f in dataclasses.fields(TrialRecord)}
    del fields["seed"]
    with pytest.raises(TypeError, match="seed"):
        built(TrialRecord, **fields)
    with pytest.raises(TypeError, match="staus"):
        replaced(r, staus="reached")  # a typo would otherwise add an attribute and leave status as it was
