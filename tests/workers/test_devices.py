"""GPU groups of a worker (``cbs worker --gpus … --devices-per-trial K``) and its trials' devices."""

from __future__ import annotations

import os

import pytest

from cbscore.errors import ConfigError
from workers.cli_processes import worker_argv
from workers.trials.devices import parse_gpus, pin_child, slot_gpus, trial_devices


def test_four_gpus_at_two_per_trial_run_two_trials_on_disjoint_pairs():
    gpus = parse_gpus("0,1,2,3")
    assert [slot_gpus(gpus, 2, i) for i in range(2)] == [(0, 1), (2, 3)]
    assert [slot_gpus(parse_gpus("4, 6,7,5"), 1, i) for i in range(4)] == [(4,), (6,), (7,), (5,)]
    with pytest.raises(ConfigError, match=r"^--devices-per-trial: must divide the number of GPUs \(3: 0,1,2\), but got 2\.$"):
        slot_gpus((0, 1, 2), 2, 0)
    with pytest.raises(ConfigError, match=r"^--gpus: must list GPU indices"):
        parse_gpus("0,x")
    with pytest.raises(ConfigError, match=r"^--gpus: must not repeat a GPU, but got '1,1'\.$"):
        parse_gpus("1,1")


def test_a_pool_child_sees_only_its_own_gpu_group(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    env = {"CBS_WORKER_GPUS": "0,1,2,3", "CBS_TRIAL_DEVICES": "2"}
    assert pin_child(env, index=1) == (2, 3)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert pin_child({}, index=0) is None  # a CPU worker: nothing to pin


def test_the_workers_devices_per_trial_overrides_the_spec_and_drops_a_micro_batch_that_no_longer_divides():
    config = {"batch_size": 64, "micro_batch_size": 32, "devices": 1}
    assert trial_devices(config, {"CBS_TRIAL_DEVICES": "2"}) == {"devices": 2}  # 32 per device: 32 still divides
    assert trial_devices(config, {"CBS_TRIAL_DEVICES": "4"}) == {"devices": 4, "micro_batch_size": None}  # 16 per device
    assert trial_devices(config, {}) == {}
    with pytest.raises(ConfigError, match=r"^devices: of this worker .* batch_size=64, but got 3\.$"):
        trial_devices(config, {"CBS_TRIAL_DEVICES": "3"})


def test_worker_command_line_for_gpu_groups(monkeypatch, tmp_path):
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    argv, env = worker_argv(None, None, gpus=(0, 1, 2, 3), devices_per_trial=2)
    assert argv[argv.index("-c") + 1] == "2" and argv[argv.index("-Q") + 1] == "gpu"
    assert argv[argv.index("-n") + 1].startswith("gpu0-1-2-3@")
    assert env["CBS_WORKER_GPUS"] == "0,1,2,3" and env["CBS_TRIAL_DEVICES"] == "2" and env["CBS_TRIAL_DEVICE"] == "cuda"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # --gpu N is nvidia-smi's GPU N
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str((tmp_path / "home" / "inductor").resolve())  # compiled once per host
    argv, env = worker_argv(3, None)
    assert argv[argv.index("-c") + 1] == "1" and env["CUDA_VISIBLE_DEVICES"] == "3" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    with pytest.raises(ConfigError, match=r"^--concurrency: must be 2 on 4 GPU\(s\) at 2 per trial"):
        worker_argv(None, 3, gpus=(0, 1, 2, 3), devices_per_trial=2)
    with pytest.raises(ConfigError, match=r"^--gpus: .*exclude each other"):
        worker_argv(0, None, gpus=(1, 2))
    argv, env = worker_argv(None, None, devices_per_trial=2)  # a CPU worker: two gloo ranks per trial
    assert env["CBS_TRIAL_DEVICES"] == "2" and env["CUDA_VISIBLE_DEVICES"] == "" and argv[argv.index("-c") + 1] == "1"
