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
