"""TrainConfig.branch (cbscore.train.branch_config): a plain trial carries no branch fields, and a
trial stored in the flat form of before (MLflow's trial_spec tag, the ledger, a checkpoint) reads
back as the same config and compares as the same trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cbscore.errors import ConfigError
from cbscore.train.branch_config import BranchConfig, flat_dict
from cbscore.train.config import TrainConfig
from cbscore.train.progress import check_same_trial

ROOT = Path(__file__).resolve().parents[2]
PLAIN = dict(model="tiny-0.1M", batch_size=8, context_tokens=32, max_tokens=256 * 30, lr=1e-2)
# the flat fields as TrainConfig.to_dict() wrote them for every trial before the sub-config
OLD_DEFAULTS = {"batch_schedule": [], "branch_from": None, "branch_step": None, "branch_tokens": None,
                "branch_ewa": "carry", "snapshot_dir": None, "snapshot_tokens": []}


def old_dict(config: TrainConfig, **flat) -> dict:
    """``config``'s dict as the flat wire format held it (written out here, not by flat_dict)."""
    d = {k: v for k, v in config.to_dict().items() if k != "branch"}
    return {**d, **OLD_DEFAULTS, **flat}


def branched() -> TrainConfig:
    return TrainConfig(**PLAIN, beta2=0.99, ewa_taus=(0.9,), warmup_tokens=256,
                       branch=BranchConfig(branch_from="/snap/tokens-000000000001536", branch_step=6,
                                           branch_tokens=1536, branch_ewa="reset"))


def test_a_plain_trial_has_no_branch_fields_and_round_trips():
    config = TrainConfig(**PLAIN)
    d = config.to_dict()
    assert d["branch"] is None and not set(OLD_DEFAULTS) & set(d)
    assert TrainConfig.from_dict(d) == config and TrainConfig.from_dict(d).to_dict() == d
    # an empty sub-config is the plain trial (one form: equal configs, equal dicts)
    assert TrainConfig(**PLAIN, branch=BranchConfig()) == config
    assert TrainConfig(**PLAIN, branch={}).to_dict() == d


def test_an_old_flat_dict_reads_back_as_the_same_config():
    plain = TrainConfig(**PLAIN)
    assert TrainConfig.from_dict(old_dict(plain)) == plain
    assert TrainConfig.from_dict(old_dict(plain)).to_dict()["branch"] is None
    config = branched()
    old = old_dict(config, branch_from="/snap/tokens-000000000001536", branch_step=6, branch_tokens=1536,
                   branch_ewa="reset")
    assert TrainConfig.from_dict(old) == config
    assert TrainConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["branch"]["branch_tokens"] == 1536 and config.start_tokens == 1536
    snapshots = TrainConfig(**PLAIN, branch=BranchConfig(snapshot_dir="/snap", snapshot_tokens=(256, 512)))
    assert TrainConfig.from_dict(old_dict(snapshots, snapshot_dir="/snap", snapshot_tokens=[256, 512])) == snapshots
    schedule = TrainConfig(**PLAIN, branch=BranchConfig(batch_schedule=((2048, 16, 2.0),)))
    assert TrainConfig.from_dict(old_dict(schedule, batch_schedule=[[2048, 16, 2.0]])) == schedule
    # the flat form is what the old dicts held: flat_dict writes it back exactly
    assert flat_dict(config.to_dict()) == old
    assert flat_dict(plain.to_dict()) == old_dict(plain) and flat_dict(old) == old


def test_the_flat_fields_beside_a_branch_are_refused_and_still_checked():
    with pytest.raises(ConfigError, match=r"^snapshot_dir: must be given in branch, not beside it"):
        TrainConfig.from_dict({**branched().to_dict(), "snapshot_dir": "/elsewhere"})
    with pytest.raises(ConfigError, match=r"^branch_step: needs branch_from"):
        TrainConfig.from_dict({**TrainConfig(**PLAIN).to_dict(), "branch_step": 6})
    with pytest.raises(ConfigError, match=r"^branch: must be a BranchConfig, a dict of its fields or None"):
        TrainConfig(**PLAIN, branch=[1])
    with pytest.raises(ConfigError, match=r"^branch_tokens: must be a whole number of sequences of context_tokens=32"):
        branched().replace(branch=branched().branch.replace(branch_tokens=1500))


def test_a_checkpoint_of_the_flat_form_is_the_same_trial():
    config = branched().replace(checkpoint_dir="/c")
    old = old_dict(config, branch_from="/elsewhere/tokens-000000000001536", branch_step=6, branch_tokens=1536,
                   branch_ewa="reset")  # where the base lay is operational: another host's path
    check_same_trial(old, config)
    check_same_trial(old_dict(TrainConfig(**PLAIN)), TrainConfig(**PLAIN, checkpoint_dir="/c"))
    with pytest.raises(ConfigError, match=r"fields that differ: branch_step"):
        check_same_trial({**old, "branch_step": 5}, config)
    with pytest.raises(ConfigError, match=r"fields that differ: batch_schedule"):
        check_same_trial(old_dict(TrainConfig(**PLAIN)),
                         TrainConfig(**PLAIN, branch=BranchConfig(batch_schedule=((2048, 16, 2.0),))))


def test_a_trial_the_lab_stored_reads_back_and_writes_its_flat_form_byte_for_byte():
    stored = json.loads((ROOT / "docs/results/chaos/full-issue42/spec_b32.json").read_text())["train_config"]
    assert "branch_from" in stored and "branch" not in stored  # the flat form of before
    config = TrainConfig.from_dict(stored)
    assert config.branch is None and TrainConfig.from_dict(config.to_dict()) == config
    assert json.dumps(flat_dict(config.to_dict()), sort_keys=True) == json.dumps(stored, sort_keys=True)
