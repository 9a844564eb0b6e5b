"""Issue 22: a lost host. Two "hosts" share one study, and the one running its trial is lost.

Each host is a network namespace made here (``ip netns add``, a veth pair whose root end has its
own address) and its own UTS namespace (``unshare --uts``: its own hostname, so its own
``host_id``), with its own ``$CBS_HOME``. Redis and PostgreSQL are reached from inside through TCP
proxies listening on each veth's root end (:mod:`tests.workers.tcp_proxy`); the hosts share only
what several machines would share: the broker, the databases, ``CBS_CHECKPOINT_DIR`` and
``CBS_STORE_DIR`` (folders every host mounts). Both hosts run a worker; the one that takes the
trial is lost (SIGKILL to its worker's whole process group) mid-way. The runner on the other host
cannot judge the lost host's pids: it waits for the heartbeat to go stale (``CBS_STALE_AFTER_S``,
6 s here), and that host's worker resumes the trial from the lost host's checkpoint, on the store
the lost host prepared. Meanwhile the same study runs undisturbed on the other host; both steps
tables are equal.

Needs root, ``ip`` and ``unshare`` (skipped with the reason elsewhere) and the local Redis and
PostgreSQL (skipped, or failed under ``CBS_REQUIRE_SERVICES``). Namespaces, veths, proxies,
databases, the Redis database and every process are removed at teardown, on failure too.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.workers.conftest import CBS, DATA, tiny_spec, wait_for
from tests.workers.tcp_proxy import Proxy
from tests.workers.test_worker_process import (
    POSTGRES_URL,
    REDIS_URL,
    fresh_postgres_databases,
    missing_service,
    no_run_left_running,
    study_done,
)
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.tracking import Tracker

#: The study: one reference trial of 976 steps (1.25 · 100k tokens at B = 8, T = 16), long enough to
#: be caught mid-way (both hosts' workers are up before it starts); its store is prepared by the
#: first trial into CBS_STORE_DIR (no data.store_dir).
SPEC = dict(batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 100_000}],
            data={k: v for k, v in DATA.items() if k != "store_dir"})
TOTAL_STEPS = 976


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def namespaces_or_skip() -> None:
    """Root with ``ip`` and ``unshare``; skip with the reason where network namespaces cannot be made."""
    if os.geteuid() != 0:
        pytest.skip("making network namespaces needs root")
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"no `{tool}` here to make network and UTS namespaces")


@dataclass
class Host:
    """One host: a network namespace, the root end of its veth pair, and its proxies to the services."""

    name: str
    netns: str
    veth: str
    address: str
    """The root end's address: what the host's processes reach the services at."""
    proxies: dict[str, Proxy]

    def argv(self, *command: str) -> list[str]:
        """``command`` inside this host: its network namespace and its own hostname."""
        return ["ip", "netns", "exec", self.netns, "unshare", "--uts", "sh", "-c",
                f'hostname {self.name} && exec "$0" "$@"', *command]


@contextlib.contextmanager
def host_namespaces(names: list[str], upstreams: dict[str, tuple[str, int]]):
    """A network namespace per name with a veth pair (10.x.y.1 in the root namespace, .2 inside)
    and a proxy per upstream on the root end; all removed on exit, whatever happened."""
    tag = uuid.uuid4().hex[:5]
    hosts: list[Host] = []
    try:
        for i, name in enumerate(names):
            netns, veth = f"cbs2h-{tag}-{name}", f"c2h{tag}{i}"  # an interface name holds 15 characters
            subnet = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
            made = _run("ip", "netns", "add", netns)
            if made.returncode != 0:
                pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
            host = Host(name=name, netns=netns, veth=veth, address=f"{subnet}.1", proxies={})
            hosts.append(host)
            for cmd in (["ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "p"],
                        ["ip", "link", "set", veth + "p", "netns", netns],
                        ["ip", "addr", "add", f"{subnet}.1/30", "dev", veth],
                        ["ip", "link", "set", veth, "up"],
                        ["ip", "netns", "exec", netns, "ip", "addr", "add", f"{subnet}.2/30", "dev", veth + "p"],
                        ["ip", "netns", "exec", netns, "ip", "link", "set", veth + "p", "up"],
                        ["ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up"]):
                done = _run(*cmd)
                if done.returncode != 0:
                    pytest.skip(f"cannot wire a network namespace here ({' '.join(cmd)}): {done.stderr.strip()}")
            for key, upstream in upstreams.items():
                proxy = Proxy(upstream, host=host.address)
                proxy.up()
                host.proxies[key] = proxy
        yield hosts
    finally:
        for host in hosts:
            for proxy in host.proxies.values():
                proxy.down()
            _run("ip", "link", "del", host.veth)  # its peer goes with it
            _run("ip", "netns", "del", host.netns)


@contextlib.contextmanager
def fresh_redis_db():
    """A Redis database number no one uses (empty, claimed with a key), flushed on exit; the tests'
    own ``REDIS_URL`` database (15) and database 0 are left alone."""
    import redis

    base = REDIS_URL.rsplit("/", 1)[0]
    try:
        redis.Redis.from_url(f"{base}/0", socket_connect_timeout=1).ping()
    except Exception as exc:  # any failure means: no Redis here
        missing_service(f"no Redis answers at {base} ({type(exc).__name__})")
    token = uuid.uuid4().hex
    for db in range(1, 15):
        client = redis.Redis.from_url(f"{base}/{db}")
        if client.set("cbs-test-claim", token, nx=True, ex=3600) and client.dbsize() == 1:
            try:
                yield db
            finally:
                client.flushdb()
            return
        if client.get("cbs-test-claim") == token.encode():
            client.delete("cbs-test-claim")
    pytest.fail("no free Redis database (1-14) for this test")


@pytest.fixture
def two_hosts(worker_env, tmp_path, monkeypatch):
    """Hosts ``hosta`` and ``hostb`` (their own $CBS_HOME and hostname) on one fresh Redis database
    and fresh PostgreSQL databases, sharing the checkpoint and store folders; this process (the
    root namespace) reaches the services directly."""
    from sqlalchemy.engine import make_url

    namespaces_or_skip()
    pg = make_url(POSTGRES_URL)
    redis_host, redis_port = REDIS_URL.split("//", 1)[1].split("/", 1)[0].split(":")
    upstreams = {"redis": (redis_host, int(redis_port)), "postgres": (pg.host or "127.0.0.1", pg.port or 5432)}
    shared = tmp_path / "shared"
    common = {"CBS_CHECKPOINT_DIR": str(shared / "checkpoints"), "CBS_STORE_DIR": str(shared / "stores"),
              "CBS_ARTIFACT_ROOT": str(shared / "artifacts")}
    prefixes = {"CBS_TRACKING_URI": "cbs_test_hosts_mlflow", "CBS_OPTUNA_STORAGE": "cbs_test_hosts_optuna"}
    with fresh_postgres_databases(prefixes) as dbs, fresh_redis_db() as db, \
            host_namespaces(["hosta", "hostb"], upstreams) as hosts:

        def services(redis_at: str, pg_host: str, pg_port: int) -> dict:
            urls = {key: pg.set(host=pg_host, port=pg_port, database=name).render_as_string(hide_password=False)
                    for key, name in dbs.items()}  # the ledger shares Optuna's database
            return {"CBS_BROKER_URL": f"redis://{redis_at}/{db}", **urls}

        here = {**common, **services(f"{redis_host}:{redis_port}", pg.host or "127.0.0.1", pg.port or 5432)}
        for key, value in here.items():
            monkeypatch.setenv(key, value)
        from workers.infra.broker import reconfigure

        reconfigure()
        envs = {}
        for host in hosts:
            envs[host.name] = {**os.environ, **common, "CBS_HOME": str(tmp_path / host.name / "home"),
                               **services(host.proxies["redis"].address, host.address, host.proxies["postgres"].port)}
        yield {host.name: (host, envs[host.name]) for host in hosts}
        reconfigure()


def lease_of(name: str):
    from workers.studies.ledger import Ledger

    [record] = api.study_records(name)
    return Ledger(WorkerSettings.from_env().ledger_url).lease(record.trial_id)


def table(name: str) -> list[dict]:
    """The steps table without the names that differ between two studies of one spec."""
    return [{k: v for k, v in row.to_dict().items() if k not in ("trial_id", "run_id")} for row in api.study_table(name)]


@pytest.mark.slow  # in `make test-all` (the default run stays a few minutes; docs/operating.md#tests-and-benchmarks)
@pytest.mark.services
def test_a_lost_host_trial_resumes_on_the_other_host_from_its_checkpoint(two_hosts, processes):
    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri)
    shared = Path(os.environ["CBS_CHECKPOINT_DIR"]).parent
    started: dict[str, object] = {}
    for name, (host, env) in two_hosts.items():  # both workers up before the trial starts
        started[f"worker {name}"] = processes.start(host.argv(CBS, "worker"), f"worker-{name}", env=env)

    def logs() -> str:
        return "".join(f"\n--- {name}\n{processes.log(p)[-2500:]}" for name, p in started.items())

    api.launch_study(tiny_spec("lost", **SPEC))
    [record] = api.study_records("lost")
    owner = wait_for(lambda: lease_of("lost").owner, 90, what=lambda: "a host to claim the trial" + logs())
    lost = owner.split("@", 1)[0]  # the host running the trial: it is the one lost
    [kept] = [name for name in two_hosts if name != lost]
    # The runner on the other host: it cannot judge the lost host's pids, only the heartbeat. (A runner
    # on the lost host, killed mid-pass, would hold the study's lock for 300 s: docs/operating.md,
    # "What survives what".)
    started[f"runner {kept}"] = processes.start(two_hosts[kept][0].argv(CBS, "study", "watch", "--period", "1"),
                                                f"runner-{kept}", env=two_hosts[kept][1])
    # The same study undisturbed, meanwhile: the lost host's one slot is busy, so the other host runs it.
    api.launch_study(tiny_spec("calm", **SPEC))
    ckpt = shared / "checkpoints" / record.trial_id / "checkpoint.pt"

    def mid_way() -> bool:
        step = tracker.get_run(record.run_id).data.metrics.get("progress/step", 0)
        assert step < TOTAL_STEPS, "the trial ended before the kill: make it longer" + logs()
        return ckpt.exists() and step >= 30

    wait_for(mid_way, 120, every_s=0.2, what=lambda: "a checkpoint past step 30" + logs())
    assert not (Path(two_hosts[lost][1]["CBS_HOME"]) / "checkpoints").exists()  # the shared folder, not its own
    processes.kill(started.pop(f"worker {lost}"), signal.SIGKILL)  # the host is lost: its worker's whole group
    killed_at_ms = time.time() * 1000
    wait_for(lambda: study_done("lost"), 300, every_s=1,
             what=lambda: f"{kept} to finish the trial ({lease_of('lost')})" + logs())

    [record] = api.study_records("lost")
    run = tracker.get_run(record.run_id)
    assert (record.status, record.attempt, run.info.status) == ("finished", 2, "FINISHED")
    assert lease_of("lost").worker.endswith(f"@{kept}")  # attempt 2 ran on the other host
    resumed = int(run.data.tags["resumed_from_step"])
    assert 0 < resumed < TOTAL_STEPS  # from the lost host's checkpoint, not from scratch
    after = [m.step for m in tracker.client.get_metric_history(record.run_id, "train/loss")
             if m.timestamp > killed_at_ms]
    assert min(after) > resumed > 0  # the resumed attempt's first logged step is past that checkpoint
    raw = [m.step for m in tracker.client.get_metric_history(record.run_id, "train/loss")]
    steps, _ = tracker.history(run, "train/loss")
    assert steps[-1] == TOTAL_STEPS and sorted(raw) == sorted(set(raw)) and len(raw) == len(steps)  # each step once
    assert not ckpt.parent.exists()  # the trial ended: its checkpoint folder is gone
    no_run_left_running("lost")

    wait_for(lambda: study_done("calm"), 300, every_s=1, what=lambda: "the undisturbed study" + logs())
    [calm] = api.study_records("calm")
    assert (calm.attempt, lease_of("calm").worker.endswith(f"@{kept}")) == (1, True)
    assert table("calm") == table("lost") and [r["outcome"] for r in table("lost")] == ["reached"]
    # one store for both studies and both hosts: prepared once into the shared folder and pinned
    from workers.studies.ledger import Ledger

    pins = [Ledger(s.ledger_url).store_pin(name) for name in ("lost", "calm")]
    assert pins[0].host.startswith(f"{lost}@") and pins[1].digest == pins[0].digest
    assert Path(pins[0].path).parent == shared / "stores" and Path(pins[1].path) == Path(pins[0].path)
    assert [p.name for p in (shared / "stores").iterdir() if not p.name.startswith(".")] == [Path(pins[0].path).name]
