"""What the workers keep of a trial's config stays as it was before TrainConfig.branch: the reuse
key (an MLflow tag that names a trial across studies), the MLflow params, and a stored trial's
snapshot paths re-rooted on this host, for configs of the old flat form and of the new one."""

from __future__ import annotations

import hashlib
import json

from cbscore.train.branch_config import BranchConfig
from cbscore.train.config import TrainConfig
from workers.studies.local_study import host_paths, snapshot_dir
from workers.studies.reuse import config_key
from workers.tracking import trial_params

PLAIN = dict(model="tiny-0.1M", batch_size=8, context_tokens=32, max_tokens=256 * 30, lr=1e-2)
OLD_DEFAULTS = {"batch_schedule": [], "branch_from": None, "branch_step": None, "branch_tokens": None,
                "branch_ewa": "carry", "snapshot_dir": None, "snapshot_tokens": []}
BRANCH = dict(branch_from="/host/a/loc/snapshots/s0/tokens-000000000001536", branch_step=6, branch_tokens=1536)


def old_dict(config: TrainConfig, **flat) -> dict:
    """``config``'s dict as the flat wire format held it."""
    return {**{k: v for k, v in config.to_dict().items() if k != "branch"}, **OLD_DEFAULTS, **flat}


def old_key(train_config: dict, store: str) -> str:
    """workers.studies.reuse.config_key as it was written before the sub-config."""
    text = json.dumps({"train_config": dict(train_config), "store": store}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def branched() -> TrainConfig:
    return TrainConfig(**PLAIN, beta2=0.99, ewa_taus=(0.9,), warmup_tokens=256, branch=BranchConfig(**BRANCH))


def test_the_reuse_key_of_a_trial_is_the_one_it_had_before():
    plain, branch = TrainConfig(**PLAIN), branched()
    assert config_key(plain.to_dict(), "d1") == old_key(old_dict(plain), "d1")
    assert config_key(branch.to_dict(), "d1") == old_key(old_dict(branch, **BRANCH), "d1")
    assert config_key(old_dict(plain), "d1") == old_key(old_dict(plain), "d1")  # a stored flat one too
    assert config_key(plain.to_dict(), "d1") != config_key(branch.to_dict(), "d1")


def test_mlflow_params_keep_their_flat_names():
    plain, branch = trial_params(TrainConfig(**PLAIN).to_dict()), trial_params(branched().to_dict())
    assert not any(k.startswith("branch") or k.startswith("snapshot") or k == "batch_schedule" for k in plain)
    assert {k: v for k, v in branch.items() if k.startswith("branch")} == {
        "branch_from": BRANCH["branch_from"], "branch_step": "6", "branch_tokens": "1536"}
    assert trial_params(old_dict(branched(), **BRANCH)) == branch


def test_a_stored_trial_gets_its_snapshot_paths_on_this_host_in_its_own_form(tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_SNAPSHOT_DIR", str(tmp_path))
    here = snapshot_dir("loc", 0) + "/tokens-000000000001536"
    new = branched().to_dict()
    over = host_paths("loc", new)
    assert over == {"branch": {**new["branch"], "branch_from": here}}
    assert TrainConfig.from_dict({**new, **over}).branch.branch_from == here
    old = old_dict(branched(), **BRANCH)
    assert host_paths("loc", old) == {"branch_from": here}
    assert TrainConfig.from_dict({**old, **host_paths("loc", old)}) == TrainConfig.from_dict({**new, **over})
    assert host_paths("loc", TrainConfig(**PLAIN).to_dict()) == {} == host_paths("loc", old_dict(TrainConfig(**PLAIN)))
