"""One trial on several devices: k processes, PyTorch DDP, rank 0 the only one that talks.

``train(config)`` with ``config.devices = k > 1`` runs the trial as k processes: the calling
process is rank 0 and :func:`launch` starts ranks 1 … k−1 as fresh interpreters (``python -m
cbscore.train.distributed``; CUDA is not fork-safe, and a Celery pool child may not use
``multiprocessing``, see :func:`_spawn`). They meet through a ``FileStore``, a file under
``$CBS_HOME/rendezvous`` (a ``TCPStore`` would listen on every interface, ``[::]``, whatever host
it is given), and form a ``torch.distributed`` process group: NCCL on CUDA (rank r on the r-th
visible GPU), gloo on the CPU; their own sockets are bound to the loopback interface
(``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``, unless the operator set them), so a trial opens
no port that another host can reach (DESIGN.md §3). Nothing here implements a collective.

What each rank does (Goyal et al. 2017, arXiv 1706.02677, §2: a global batch split across
workers whose gradients are averaged is the same update as the whole batch on one worker):

- step ``t`` of global batch ``B`` takes the windows ``t·B … (t+1)·B − 1`` (the data stream's
  rule); rank r trains on its ``B/k`` of them, ``r·B/k …``, in micro-batches of
  ``micro_batch_size``; DDP averages the gradients over ranks in the backward of the last
  micro-batch only (``no_sync`` on the others), so one all-reduce per step;
- every rank steps its own AdamW on the same averaged gradient, so the weights stay equal
  (DDP broadcasts rank 0's at the start, after rank 0 loaded any checkpoint);
- rank 0 alone evaluates, keeps the weight averages, writes checkpoints and runs the callbacks
  (MLflow, the ledger's heartbeat). Its decisions (stop, when the next evaluation is) reach the
  other ranks through a gloo broadcast of two integers before every step: host memory only, so
  it never waits on the GPU;
- the logged train loss is the mean over all ranks (an all-reduce on log steps).

A rank that dies (``kill -9``, a lost GPU) makes the next collective on the others fail: gloo
sees the closed socket at once, and every collective has a ``dist_timeout_s`` deadline besides.
Rank 0 then raises :class:`RankFailed`, the other ranks are ended (and a rank whose parent dies
gets SIGKILL from the kernel, ``PR_SET_PDEATHSIG``), and the trial resumes from its last
checkpoint when it is run again: every rank loads the same one.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

#: Seconds a finished rank 0 waits for the others to exit before ending them.
JOIN_TIMEOUT_S = 30.0


class RankFailed(RuntimeError):
    """Another rank of a multi-device trial died or failed: this attempt is lost, not the trial
    (it resumes from its last checkpoint)."""


@dataclass(frozen=True)
class Group:
    """This process's place in a trial: rank, world size, and the groups it talks through.

    ``world_size == 1`` is the ordinary single-process trial: every method is then the identity
    and nothing touches ``torch.distributed``."""

    rank: int = 0
    """This process's rank, 0 … world_size − 1; rank 0 evaluates, checkpoints and reports."""
    world_size: int = 1
    """Processes (devices) training the trial."""
    control: object | None = None
    """The gloo process group of the host-side decisions (``None``: the default group)."""

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def local_rows(self, batch_size: int) -> tuple[int, int]:
        """``(offset, count)`` of this rank's sequences within a global batch of ``batch_size``."""
        count = batch_size // self.world_size
        return self.rank * count, count

    def agree(self, stop: int, next_eval: int) -> tuple[int, int]:
        """Rank 0's ``(stop, next_eval)`` on every rank (a gloo broadcast of host integers)."""
        if self.world_size == 1:
            return stop, next_eval
        message = torch.tensor([stop, next_eval], dtype=torch.int64)  # (2,) on the host
        dist.broadcast(message, src=0, group=self.control)
        return int(message[0]), int(message[1])

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The mean of ``value`` over ranks (gloo has no AVG: a SUM, then a division)."""
        if self.world_size == 1:
            return value
        total = value.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total / self.world_size

    def wrap(self, model: torch.nn.Module, device: torch.device):
        """``(model to train, no_sync factory)``: DDP over ranks, or the model itself."""
        if self.world_size == 1:
            return model, contextlib.nullcontext
        ddp = make_ddp(model, device)
        return ddp, ddp.no_sync


SINGLE = Group()


def buffer_sync_keyword(ddp_class: type | None = None) -> str:
    """The DDP constructor's keyword that turns off re-sending the buffers before every forward:
    ``forward_sync_buffers`` where this torch has it (2.13 beside the old name), else the
    long-standing ``broadcast_buffers`` (the GPU image's torch 2.11 may have only that one)."""
    if ddp_class is None:
        from torch.nn.parallel import DistributedDataParallel as ddp_class
    params = inspect.signature(ddp_class.__init__).parameters
    return "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"


def make_ddp(model: torch.nn.Module, device: torch.device, ddp_class: type | None = None):
    """``model`` wrapped in DDP on ``device`` (the default process group must exist). The only
    buffers are the fixed rotary tables, equal on every rank: never re-sent."""
    if ddp_class is None:
        from torch.nn.parallel import DistributedDataParallel as ddp_class
    ids = [device.index] if device.type == "cuda" else None
    return ddp_class(model, device_ids=ids, **{buffer_sync_keyword(ddp_class): False})


def loopback_interface() -> str:
    """The name of this host's loopback network interface (``lo`` on Linux)."""
    for _, name in socket.if_nameindex():
        try:
            flags = int(open(f"/sys/class/net/{name}/flags").read(), 16)
        except (OSError, ValueError):
            continue
        if flags & 0x8:  # IFF_LOOPBACK
            return name
    return "lo"


def bind_to_loopback() -> None:
    """Make gloo's and NCCL's sockets of this process listen on the loopback interface only
    (all ranks of a trial are on one host); an operator's own setting wins."""
    name = loopback_interface()
    for key in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        os.environ.setdefault(key, name)


def rendezvous_file() -> str:
    """A new file path for one trial's ``FileStore`` under ``$CBS_HOME/rendezvous``."""
    from cbscore.paths import subdir

    return str(subdir("rendezvous") / f"{os.getpid()}-{uuid.uuid4().hex}")


def file_store(path: str, world_size: int, timeout_s: float):
    """The trial's rendezvous: a ``FileStore`` (no socket) with the collective timeout."""
    store = dist.FileStore(path, world_size)
    store.set_timeout(datetime.timedelta(seconds=timeout_s))
    return store


def device_for_rank(kind: str, rank: int) -> torch.device:
    """Rank r on the r-th visible GPU (the worker's ``CUDA_VISIBLE_DEVICES`` names the trial's),
    or on the CPU."""
    if kind == "cuda":
        torch.cuda.set_device(rank)
        return torch.device("cuda", rank)
    return torch.device("cpu")


def backend_for(kind: str) -> str:
    return "nccl" if kind == "cuda" else "gloo"


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (rank 0) dies (Linux only): a
    rank whose leader was killed must not wait for a collective that never comes."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    if os.environ.get("CBS_RANK0_PID") and os.getppid() != int(os.environ["CBS_RANK0_PID"]):
        sys.exit(f"rank 0 (pid {os.environ['CBS_RANK0_PID']}) died before this rank started")  # too late for the signal


def _init(kind: str, rank: int, world_size: int, store, timeout_s: float) -> Group:
    timeout = datetime.timedelta(seconds=timeout_s)
    bind_to_loopback()
    dist.init_process_group(backend_for(kind), store=store, rank=rank, world_size=world_size, timeout=timeout)
    # Decisions travel on the host: a gloo group beside NCCL (the default group itself on a CPU).
    control = dist.new_group(backend="gloo", timeout=timeout) if kind == "cuda" else None
    return Group(rank=rank, world_size=world_size, control=control)


def _spawn(rank: int, config, store_path: str, kind: str) -> subprocess.Popen:
    """Start rank ``rank`` as a fresh interpreter (``python -m cbscore.train.distributed_rank``), the trial's
    config on its stdin. Not ``multiprocessing``: a Celery pool child is a daemonic billiard
    process, which ``multiprocessing`` refuses children to and cannot pickle."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "CBS_RANK0_PID": str(os.getpid())}
    proc = subprocess.Popen([sys.executable, "-m", "cbscore.train.distributed_rank", str(rank), store_path, kind],
                            stdin=subprocess.PIPE, env=env)
    proc.stdin.write(json.dumps(config.to_dict()).encode())
    proc.stdin.close()
    return proc


def launch(config, kind: str, run_leader: Callable[[Group], object]):
    """Run ``run_leader(group)`` as rank 0 here with ranks 1 … k−1 started beside it; returns its
    result. Raises :class:`RankFailed` when another rank died or failed (rank 0's own errors, a
    ``ConfigError`` say, are raised as they are)."""
    k = config.devices
    path = rendezvous_file()
    store = file_store(path, k, config.dist_timeout_s)
    ranks = [_spawn(rank, config, path, kind) for rank in range(1, k)]
    failed = False
    try:
        group = _init(kind, 0, k, store, config.dist_timeout_s)
        return run_leader(group)
    except BaseException as exc:
        failed = True
        dead = _dead_ranks(ranks)
        if dead and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise RankFailed(f"rank {dead} of {k} ended before the trial did ({exc.__class__.__name__}: "
                             f"{str(exc)[:300]}); the trial resumes from its last checkpoint") from exc
        raise
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
        _end(ranks, grace_s=5.0 if failed else JOIN_TIMEOUT_S)
        del store
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _dead_ranks(ranks: list[subprocess.Popen], wait_s: float = 2.0) -> str:
    """The ranks (1, 2, …) whose process ended with an error, as text; '' if none. A rank
    killed a moment ago may not be reaped yet: give them ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        dead = [f"{i + 1} (pid {p.pid}, exit {p.poll()})" for i, p in enumerate(ranks) if p.poll() not in (None, 0)]
        if dead or time.monotonic() > deadline:
            return ", ".join(dead)
        time.sleep(0.05)


def _end(ranks: list[subprocess.Popen], grace_s: float) -> None:
    """Wait for the other ranks to exit, then end what is left (a rank stuck in a collective)."""
    deadline = time.monotonic() + grace_s
    for p in ranks:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for p in ranks:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
