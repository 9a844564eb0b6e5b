"""``cbs study extend`` on a ``local`` study: a change to its ``local:`` fields (other than the
warm-up's, tests/workers/test_local_warmup.py) is refused naming every field changed and saying
what to do instead, with nothing changed; a new seed is added as for any study."""

from __future__ import annotations

import pytest

from cbs import main as cbs_main
from cbscore.errors import ConfigError
from tests.workers.test_local_study import local_spec
from workers.query import api


def test_changing_a_local_studys_local_fields_is_refused_by_name_with_what_to_do(worker_env, token_store, tmp_path,
                                                                             capsys):
    name = "locext"
    api.launch_study(local_spec(name))  # its base run is queued
    with pytest.raises(ConfigError) as one:
        api.extend_study(name, {"local": {"multipliers": [1, 2, 3, 4]}})
    assert str(one.value) == ("local.multipliers: decides what the base runs and branches measured (it is "
                              "[1.0, 2.0, 4.0]); an extension may change local.warmup_run and local.warmup_schedule "
                              "only: for other local fields, launch a new local study (another name), whose base "
                              "runs train again, but got [1, 2, 3, 4].")
    patch = tmp_path / "patch.yaml"
    patch.write_text("local:\n  multipliers: [1, 2, 4]\n  checkpoint_count: 3\n  epsilon: 0.02\n")
    capsys.readouterr()
    assert cbs_main(["study", "extend", name, str(patch)]) == 2
    err = capsys.readouterr().err
    # the unchanged multipliers are not named; both changed fields are, with their stored values
    assert err.startswith("cbs study: error: local.checkpoint_count, local.epsilon: decides what the base runs and "
                          "branches measured (they are local.checkpoint_count 2, local.epsilon 0.01)")
    assert "launch a new local study (another name)" in err
    assert api.study_spec(name) == local_spec(name)  # nothing changed
    # a new seed is an extension like any study's: its base run is queued beside the first
    _, changes = api.extend_study(name, {"seeds": [0, 1]})
    assert changes == ["seeds: + [1]"]
    assert sorted(r.trial_id for r in api.study_records(name)) == [f"{name}.base.s0", f"{name}.base.s1"]
