"""One trial on two gloo ranks (CPU) against the same trial in one process: known answers.

The two runs share the global batch (8 sequences of 32 tokens), the data order and the initial
weights, so DDP's averaged gradient is the one-process gradient up to float reassociation: the
loss trajectories agree to float tolerance and so do the steps to the target.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from cbscore.errors import ConfigError
from cbscore.train.callbacks import Callback
from cbscore.train.config import TrainConfig
from cbscore.train.distributed import RankFailed
from cbscore.train.trainer import train
from tests.cbscore.test_train import tiny as _tiny


def tiny(data, **changes) -> TrainConfig:
    """test_train.py's tiny trial: 40 steps, a short warm-up, a log every 2 steps, a 60 s collective timeout."""
    return _tiny(data, **{"max_tokens": 8 * 32 * 40, "warmup_tokens": 8 * 32 * 5, "log_every_steps": 2,
                          "dist_timeout_s": 60.0, **changes})


def test_two_gloo_ranks_train_the_same_trial_as_one_process(builtin_slice_config):
    # micro-batch 4 in both: the one-process run sums two micro-batch gradients, the two ranks
    # all-reduce theirs; the same numbers in another order
    one = train(tiny(builtin_slice_config, micro_batch_size=4, target_loss=6.0))
    two = train(tiny(builtin_slice_config, micro_batch_size=4, target_loss=6.0, devices=2))
    assert one.status == two.status == "reached"
    assert two.devices == 2 and two.steps == one.steps
    assert [s for s, _ in two.train_log] == [s for s, _ in one.train_log]
    torch.testing.assert_close([v for _, v in two.train_log], [v for _, v in one.train_log], rtol=1e-4, atol=1e-4)
    assert [e.step for e in two.eval_history] == [e.step for e in one.eval_history]
    torch.testing.assert_close([e.loss for e in two.eval_history], [e.loss for e in one.eval_history],
                               rtol=1e-4, atol=1e-4)
    assert two.steps_to_target == pytest.approx(one.steps_to_target, rel=1e-3)


def test_each_rank_accumulates_micro_batches_with_no_sync(builtin_slice_config):
    # 2 ranks × 2 micro-batches of 2 sequences: three syncs skipped a step, the same trajectory
    one = train(tiny(builtin_slice_config, max_steps=12))
    two = train(tiny(builtin_slice_config, max_steps=12, devices=2, micro_batch_size=2))
    torch.testing.assert_close([v for _, v in two.train_log], [v for _, v in one.train_log], rtol=1e-4, atol=1e-4)


def test_a_batch_that_does_not_split_evenly_is_refused():
    with pytest.raises(ConfigError, match=r"^devices: must divide batch_size=8 .*but got 3\.$"):
        TrainConfig(model="tiny-0.1M", batch_size=8, max_tokens=10**6, lr=1e-3, devices=3)
    with pytest.raises(ConfigError, match=r"micro_batch_size: must divide the per-device batch batch_size/devices = 4, but got 8\."):
        TrainConfig(model="tiny-0.1M", batch_size=8, max_tokens=10**6, lr=1e-3, devices=2, micro_batch_size=8)


def spawned_ranks() -> list[int]:
    """Pids of the rank processes this process started (``python -m cbscore.train.distributed``)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if ppid == os.getpid() and b"cbscore.train.distributed" in cmdline:
            pids.append(int(entry))
    return pids


class KillRankAt(Callback):
    """At ``step``, SIGKILL rank 1's process (what a lost GPU or the OOM killer does)."""

    def __init__(self, step: int):
        self.step = step
        self.killed: list[int] = []
        self.at = 0.0

    def post_step(self, state, metrics):
        if state.step == self.step and not self.killed:
            self.killed = spawned_ranks()
            assert len(self.killed) == 1
            os.kill(self.killed[0], signal.SIGKILL)
            self.at = time.monotonic()


@pytest.mark.slow
def test_kill_9_of_one_rank_ends_the_attempt_and_the_trial_resumes_from_its_checkpoint(builtin_slice_config, tmp_path):
    config = tiny(builtin_slice_config, max_steps=30, devices=2, micro_batch_size=4, dist_timeout_s=120.0,
                  checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every_steps=5)
    killer = KillRankAt(17)  # after the checkpoint of step 15, which falls inside a log interval
    with pytest.raises(RankFailed, match=r"rank 1 \(pid \d+, exit -9\) of 2 ended before the trial did"):
        train(config, callbacks=[killer])
    # no hang: gloo sees the closed socket at once, long before the 120 s deadline
    assert time.monotonic() - killer.at < 20
    assert killer.killed and not spawned_ranks()  # no rank left behind
    from cbscore.train.checkpoint import load_checkpoint

    assert load_checkpoint(tmp_path / "ckpt")["step"] == 15
    resumed = train(config)
    assert resumed.status == "finished" and resumed.steps == 30 and resumed.resumed_from_step == 15
    # the same trajectory as the uninterrupted trial in one process
    whole = train(tiny(builtin_slice_config, max_steps=30, micro_batch_size=4))
    assert [s for s, _ in resumed.train_log] == [s for s, _ in whole.train_log]
    torch.testing.assert_close([v for _, v in resumed.train_log], [v for _, v in whole.train_log], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close([e.loss for e in resumed.eval_history], [e.loss for e in whole.eval_history],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_ranks_die_with_a_killed_rank_0(builtin_slice_config, tmp_path):
    """kill -9 of rank 0 (the Celery child of a worker): the kernel ends the other ranks
    (PR_SET_PDEATHSIG), so no rank is left waiting on a collective."""
    import json
    import subprocess
    import sys

    config = tiny(builtin_slice_config, max_tokens=8 * 32 * 100_000, devices=2, allow_repeat=True)
    script = ("import json, sys; from cbscore.train.trainer import train; from cbscore.train.config import TrainConfig; "
              "train(TrainConfig.from_dict(json.loads(sys.stdin.read())))")
    leader = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)
    leader.stdin.write(json.dumps(config.to_dict()).encode())
    leader.stdin.close()

    def children() -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except (OSError, ValueError):
                continue
            if int(fields[1]) == leader.pid and b"cbscore.train.distributed" in cmdline:
                found.append(int(entry))
        return found

    deadline = time.monotonic() + 60
    while not (ranks := children()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(ranks) == 1
    time.sleep(3)  # training by now
    leader.kill()
    leader.wait(timeout=10)

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    deadline = time.monotonic() + 10
    while alive(ranks[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(ranks[0])


class _Metrics(Callback):
    def __init__(self):
        self.b_simple = []

    def post_step(self, state, metrics):
        if metrics is not None and metrics.get("gns_b_simple") is not None:
            self.b_simple.append(metrics["gns_b_simple"])


def test_two_ranks_measure_the_noise_scale_with_no_split(builtin_slice_config):
    # one pass per rank: the ranks are the two batch sizes (rank 0's 4 sequences, the global 8);
    # one process needs two micro-batches of 4 for the same. Both estimate the same B_simple.
    one, two = _Metrics(), _Metrics()
    train(tiny(builtin_slice_config, micro_batch_size=4, gns_half_life_tokens=8 * 32 * 10), callbacks=[one])
    train(tiny(builtin_slice_config, devices=2, gns_half_life_tokens=8 * 32 * 10), callbacks=[two])
    assert len(two.b_simple) == len(one.b_simple) > 5 and all(math.isfinite(b) and b > 0 for b in two.b_simple)
    # the same quantity from half the small-batch samples: within a factor of 3 at the end
    assert 1 / 3 < two.b_simple[-1] / one.b_simple[-1] < 3


# ---- the DDP keyword of this torch and of torch 2.11; the rendezvous opens no public port -------------
class _OldDDP:
    """The constructor of a torch without ``forward_sync_buffers`` (only ``broadcast_buffers``)."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True):
        self.kwargs = {"device_ids": device_ids, "broadcast_buffers": broadcast_buffers}


class _NewDDP:
    def __init__(self, module, device_ids=None, broadcast_buffers=None, forward_sync_buffers=None):
        self.kwargs = {"device_ids": device_ids, "broadcast_buffers": broadcast_buffers,
                       "forward_sync_buffers": forward_sync_buffers}


def test_ddp_is_built_with_whichever_buffer_keyword_this_torch_has():
    from cbscore.train.distributed import buffer_sync_keyword, make_ddp

    model = torch.nn.Linear(2, 2)
    assert buffer_sync_keyword(_OldDDP) == "broadcast_buffers"
    assert make_ddp(model, torch.device("cpu"), _OldDDP).kwargs == {"device_ids": None, "broadcast_buffers": False}
    assert buffer_sync_keyword(_NewDDP) == "forward_sync_buffers"
    assert make_ddp(model, torch.device("cpu"), _NewDDP).kwargs["forward_sync_buffers"] is False


def test_ddp_of_this_torch_trains_on_a_one_rank_group(tmp_path):
    # In a child process with a time limit: an in-process gloo group's destructor can block joining
    # its threads (seen once in a clean-clone CI run), which must fail this test, not hang the suite.
    code = textwrap.dedent(f"""
        import os, torch
        import torch.distributed as dist
        from cbscore.train.distributed import file_store, make_ddp
        dist.init_process_group("gloo", store=file_store({str(tmp_path / "store")!r}, 1, 30.0), rank=0, world_size=1)
        model = make_ddp(torch.nn.Linear(4, 1), torch.device("cpu"))
        model(torch.ones(3, 4)).sum().backward()
        ok = model.module.weight.grad is not None and torch.equal(model.module.weight.grad, torch.full((1, 4), 3.0))
        print("grad ok" if ok else f"grad {{model.module.weight.grad}}", flush=True)
        os._exit(0 if ok else 1)  # no teardown of the group: the result is in
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and "grad ok" in done.stdout, done.stdout + done.stderr


def _family_pids(root: int) -> list[int]:
    """``root`` and every process below it (from /proc/*/stat's parent pids)."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
    family, grew = {root}, True
    while grew:
        new = {pid for pid, ppid in parents.items() if ppid in family} - family
        family |= new
        grew = bool(new)
    return sorted(family)


def _listening_addresses(pids: list[int]) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp* write them) of the TCP sockets in LISTEN state
    that the processes ``pids`` hold."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with_target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if with_target.startswith("socket:["):
                    inodes.add(with_target[8:-1])
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    found.append(fields[1].split(":")[0])
    return found


def _is_loopback(address_hex: str) -> bool:
    if len(address_hex) == 8:  # IPv4, little-endian: 127.x.y.z ends in 7F
        return address_hex.endswith("7F")
    # IPv6 ::1, or IPv4-mapped ::ffff:127.x.y.z
    return address_hex == "00000000000000000000000001000000" or (
        address_hex.startswith("0000000000000000FFFF0000") and address_hex.endswith("7F"))


class _Listeners(Callback):
    def __init__(self):
        self.seen: list[str] = []

    def post_step(self, state, metrics):
        if state.step == 2:
            self.seen = _listening_addresses(_family_pids(os.getpid()))


def test_a_two_rank_trial_listens_on_loopback_only(builtin_slice_config):
    from cbscore.paths import subdir

    listeners = _Listeners()
    train(tiny(builtin_slice_config, max_steps=3, devices=2), callbacks=[listeners])
    # gloo's pair sockets listen (on 127.0.0.1); no TCPStore on [::] or 0.0.0.0, nothing public
    assert listeners.seen and all(_is_loopback(a) for a in listeners.seen), listeners.seen
    assert _is_loopback("0100007F") and not _is_loopback("00000000") and not _is_loopback("0" * 32)
    assert not list(subdir("rendezvous").glob(f"{os.getpid()}-*"))  # the store's file is removed
