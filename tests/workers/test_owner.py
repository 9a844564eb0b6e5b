"""Every study records who launched it (the parent run's ``owner`` tag), for the pages' cancel rule."""

from __future__ import annotations

import getpass

import yaml

from cbs import main as cbs_main
from tests.workers.conftest import tiny_spec, tiny_spec_dict
from workers.query import api


def test_the_owner_is_recorded_and_listed(worker_env):
    api.launch_study(tiny_spec("owned"), owner="alice@lab.test")
    assert api.study_owner("owned") == "alice@lab.test"
    assert [(s.name, s.owner) for s in api.list_studies()] == [("owned", "alice@lab.test")]


def test_a_cli_launch_is_owned_by_the_operators_login(worker_env, tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(tiny_spec_dict("by-cli")))
    assert cbs_main(["study", "launch", str(path)]) == 0
    assert api.study_owner("by-cli") == f"cli:{getpass.getuser()}"


def test_a_study_owned_under_the_old_form_is_given_its_owner_by_the_operators_command(worker_env, capsys):
    """Issue 41: an owner ``oidc:<subject>`` (before owners named their issuer) is matched by no
    sign-in; the operator's ``cbs study owner NAME IDENTITY`` gives the study its user's identity."""
    import pytest

    from cbscore.errors import ConfigError

    api.launch_study(tiny_spec("legacy"), owner="oidc:alice")
    assert cbs_main(["study", "owner", "legacy"]) == 0 and capsys.readouterr().out == "oidc:alice\n"
    for bad in ("oidc:bob", "", "a b@lab.test", "x@lab.test,admin@lab.test"):
        with pytest.raises(ConfigError) as err:
            api.set_study_owner("legacy", bad)
        assert err.value.field == "owner"
    assert api.study_owner("legacy") == "oidc:alice"  # nothing changed by a refusal
    new = "oidc:https://idp.lab.test#alice"
    assert cbs_main(["study", "owner", "legacy", new]) == 0
    assert capsys.readouterr().out == f"cbs study: 'legacy' is owned by {new} (was oidc:alice)\n"
    assert api.study_owner("legacy") == new
