"""A real one-node SLURM cluster on 127.0.0.1 for the tests: munged, slurmctld and slurmd (Debian's
``slurm-wlm`` and ``munge``; ``make slurm`` installs them), each its own process in its own session,
with their configuration, key, state, spool and logs under a temporary folder and their ports
picked free. The node has no GPU: it declares two generic ``gpu`` resources (:func:`gres_conf`), so a
``--gres=gpu:1`` job is scheduled and given ``CUDA_VISIBLE_DEVICES`` as on a GPU node. Its ``spot``
partition is preemptible (``PreemptMode=REQUEUE``, :data:`GRACE_S`) by jobs of its ``urgent`` one.
Stopped at the end by process group, never by name, after every job left has been cancelled.
Without the daemons the tests that need it skip and say why.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.process_groups import stop_group

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
NODE = "cbsnode"
#: Generic GPUs the node declares (no device behind them): a GPU request is scheduled as on a GPU node.
GPUS = 2
#: Cores the node declares (``SlurmdParameters=config_overrides``: more than this host may have).
CPUS = 16
#: The preemptible partition (PriorityTier 1, PreemptMode=REQUEUE) and the one whose jobs preempt it.
SPOT, URGENT = "spot", "urgent"
#: The spot partition's GraceTime: a preempted job runs on this long (SLURM checks it every few tens of
#: seconds), then gets SIGTERM, and SIGKILL KillWait later; its --signal comes at the preemption.
GRACE_S = 30
#: A requeued job may start again this long (+1 s) after it was requeued (AuthInfo's cred_expire).
CRED_EXPIRE_S = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_conf(root: Path, *, user: str, cpus: int) -> str:
    """The cluster's ``slurm.conf``: one CPU node on 127.0.0.1, no accounting, short kill waits."""
    return "\n".join([
        "ClusterName=cbstest",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        "AuthType=auth/munge",
        # cred_expire: a requeued job waits this long (+1 s) before it may start again (SLURM's default 120)
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'},cred_expire={CRED_EXPIRE_S}",
        "CredType=cred/munge",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",  # cores only: a job without --mem does not take the node's memory
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=1",  # the backfill pass, which preempts, every second (default 30)
        "ReturnToService=2",
        # seconds between a cancel's SIGTERM and its SIGKILL: a warm shutdown's time. SLURM's default is
        # 30; under CI's load (two test processes, a browser) a warm shutdown once took longer, and the
        # SIGKILL left the trial lost instead of given back (stop 49). Clusters set 30-120.
        "KillWait=60",
        "MinJobAge=300",  # an ended job stays in squeue's and scontrol's answers this long
        "InactiveLimit=0",
        "Waittime=0",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "GresTypes=gpu",
        # the node as the docs' commands ask for it (4 cores and 16G a worker), whatever this host has
        "SlurmdParameters=config_overrides",
        f"NodeName={NODE} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=65536 "
        f"Gres=gpu:{GPUS} State=UNKNOWN",
        # preemption as a cluster with a spot partition has it: a job of a higher PriorityTier
        # partition requeues (or, without --requeue, cancels) the jobs of a lower one that hold
        # what it needs, at the end of their GraceTime; debug and gpu are never preempted
        "PreemptType=preempt/partition_prio",
        # the job's --signal (B:USR1 to the batch shell) at the preemption, not at the end of the grace
        # time (then SIGTERM, and SIGKILL KillWait later)
        "SlurmctldParameters=preempt_send_user_signal",
        "PreemptMode=REQUEUE",
        f"PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP PreemptMode=OFF",
        f"PartitionName=gpu Nodes={NODE} MaxTime=INFINITE State=UP PreemptMode=OFF",
        f"PartitionName={SPOT} Nodes={NODE} MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE "
        f"GraceTime={GRACE_S}",
        f"PartitionName={URGENT} Nodes={NODE} MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF",
        ""])


def gres_conf(root: Path) -> str:
    """The node's GPUs: links to ``/dev/null`` named ``nvidia0``, ``nvidia1`` (SLURM wants a device
    file, reads an index off its name and sets ``CUDA_VISIBLE_DEVICES`` to it for a job that asks
    ``--gres=gpu:1``; without the cgroup plugin it never opens them)."""
    return f"Name=gpu File={root / 'dev' / 'nvidia'}[0-{GPUS - 1}]\n"


class SlurmCluster:
    """The running cluster: ``conf`` is its ``SLURM_CONF``; ``env`` the variables a client needs."""

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {"SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen] = []

    def run(self, *argv: str) -> str:
        """A SLURM client command against this cluster; its standard output."""
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, **self.env})
        assert done.returncode == 0, f"{' '.join(argv)} failed: {done.stderr}"
        return done.stdout

    def start(self) -> None:
        root, user = self.root, getpass.getuser()
        for folder in ("state", "spool", "log", "munge", "dev"):
            (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(GPUS):
            (root / "dev" / f"nvidia{i}").symlink_to("/dev/null")
        (root / "gres.conf").write_text(gres_conf(root))
        (root / "munge").chmod(0o711)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))  # this cluster's own key: never the host's /etc/munge one
        key.chmod(0o400)
        self.conf.write_text(slurm_conf(root, user=user, cpus=CPUS))
        self._daemon(["munged", "-F", "--force", f"--key-file={key}", f"--socket={root / 'munge' / 'munge.socket'}",
                      f"--pid-file={root / 'munge' / 'munged.pid'}", f"--seed-file={root / 'munge' / 'seed'}",
                      f"--log-file={root / 'log' / 'munged.log'}"], "munged")
        self._wait(lambda: (root / "munge" / "munge.socket").exists(), "munged's socket")
        self._daemon(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._daemon(["slurmd", "-D", "-f", str(self.conf), "-N", NODE], "slurmd")
        self._wait(lambda: self._node_state() == "idle", "the node to be idle in sinfo")

    def _daemon(self, argv: list[str], name: str) -> None:
        with open(self.root / "log" / f"{name}.out", "w") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                               env={**os.environ, **self.env}))

    def _node_state(self) -> str:
        done = subprocess.run(["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True, timeout=10,
                              env={**os.environ, **self.env})
        return done.stdout.strip()

    def _wait(self, ready, what: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                                 for p in sorted((self.root / "log").iterdir()))
                raise RuntimeError(f"SLURM test cluster: no {what} ({'exited: ' + ', '.join(dead) if dead else 'timeout'})"
                                   f"\n{logs}")
            time.sleep(0.3)

    def jobs(self) -> list[str]:
        """``JOBID STATE`` of every job squeue lists, one line per array task."""
        return self.run("squeue", "--noheader", "--array", "--format=%i %T").split("\n")[:-1]

    def stop(self) -> None:
        """Cancel every job (its processes are slurmstepd's, not the daemons' group), wait for them
        to end, then stop the daemons by process group."""
        if self.procs and all(p.poll() is None for p in self.procs):
            subprocess.run(["scancel", f"--user={getpass.getuser()}"], env={**os.environ, **self.env},
                           capture_output=True, timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                done = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%T"], capture_output=True,
                                      text=True, env={**os.environ, **self.env}, timeout=10)
                if not {s for s in done.stdout.split() if s in ("RUNNING", "PENDING", "COMPLETING", "CONFIGURING")}:
                    break
                time.sleep(0.5)
        for proc in reversed(self.procs):
            stop_group(proc, grace_s=15)


def missing_slurm() -> str | None:
    """Why no test cluster can start here, or None."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return (f"SLURM is not installed ({', '.join(missing)} missing): `make slurm` or "
                "`apt-get install slurm-wlm munge` installs it")
    return None


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """The session's one-node SLURM cluster (started once, stopped at the end)."""
    reason = missing_slurm()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster, monkeypatch):
    """The cluster, with ``SLURM_CONF`` set for this test (``cbs slurm`` and the SLURM clients), and
    no job of an earlier test left in its queue (a cancelled job stays COMPLETING until its processes
    end, up to KillWait later)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    deadline = time.monotonic() + 90  # KillWait (60 s) and some
    while slurm_cluster.jobs():
        if time.monotonic() > deadline:
            pytest.fail(f"jobs of an earlier test still in SLURM's queue after 90 s: {slurm_cluster.jobs()}")
        time.sleep(0.5)
    yield slurm_cluster
    # no job of this test outlives it
    subprocess.run(["scancel", f"--user={getpass.getuser()}"], env={**os.environ, **slurm_cluster.env},
                   capture_output=True, timeout=30)
