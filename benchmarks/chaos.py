"""The chaos run: studies under ``cbs up``, launched in a browser, while the lab is broken at random.

Each phase runs the real lab under ``cbs up`` (supervisor, worker, runner, MLflow tracking server
and web app, each in its own process group) in a fresh ``$CBS_HOME``. Every lab process tracks
*through* the server (``CBS_TRACKING_URI`` is its ``http://`` URL; only ``cbs tracking`` opens the
SQLite or PostgreSQL store), and both studies are launched through the web app: a headless
chromium opens the Launch page, pastes the YAML spec and clicks "Launch study". The studies:

* a grid study (one setting, several batch sizes, three learning rates, pruning on), and
* an Optuna study of one cell (B = B_ref, trials one after another, so the sampler sees the
  same history in both phases and proposes the same rates).

The *calm* phase runs them undisturbed. The *chaos* phase runs the same specs under the same
names in another home on a small filesystem of its own, while it disturbs the lab at random
intervals, each time the episode done least so far (ties at random):

* ``worker-child``   a Celery pool child (SIGKILL): one running a trial (using CPU; Celery
                     redelivers the task) when there is one, else an idle one,
* ``worker-group``   the whole worker process group (SIGKILL; the runner requeues its trials),
* ``runner``         ``cbs study watch`` (SIGKILL),
* ``tracking``       the MLflow server (SIGKILL; the supervisor restarts it: trials retry their
                     writes or give their attempt back),
* ``web``            the Streamlit app (SIGKILL; restarted likewise),
* ``worker-freeze``  a pool child training a trial frozen (SIGSTOP) past the lease's staleness limit,
                     then thawed (SIGCONT): its replacement holds the lease by then, so the thawed
                     holder must write no metric twice,
* ``disk-full``      ``$CBS_HOME`` (a tmpfs: the broker on ``fs``, the ledger, checkpoints, the
                     MLflow store) filled to the last block with a ballast file for 30 s, then freed,
* ``postgres-outage`` (``redis-pg``) the lab's TCP proxy to PostgreSQL down for 30 s,
* ``redis-outage``   (``redis-pg``) the lab's TCP proxy to Redis down for 30 s.

Then it checks: both studies complete; no run is left RUNNING or SCHEDULED; no checkpoint or
temporary file is left; every trial's history has each step once and none missing (the training
curve at every log step to its end, evaluations at the steps the undisturbed run evaluated, the
same values to the last digit: ``chaos_history``); and the steps table and B* equal the calm
phase's (CPU training is deterministic and resumes exactly). A pruned trial stops where the
runner's stop reaches it, which depends on timing, so its ``steps`` are not compared.

    .venv/bin/python benchmarks/chaos.py                       # both backends, the default size
    .venv/bin/python benchmarks/chaos.py --backend fs --size small --json out.json

``--backend redis-pg`` uses Redis (``CBS_TEST_REDIS_URL``, default db 14) for the broker and fresh
PostgreSQL databases (``CBS_TEST_POSTGRES_URL``) for MLflow, Optuna and the ledger (dropped
afterwards), each reached through a TCP proxy this script owns (the shared servers are never
touched). The disk-full episode mounts a tmpfs and needs root; without it the episode is reported
``not run``. ``--skip KIND`` leaves a kind out (the report says so). A run whose ``cbs up`` exits
(nothing would restart what is killed) ends at once with that error. Each episode's
``next_progress_s`` (seconds to the next trial that ended, ``null``: none did) shows which one the
lab did not recover from. State lives in ``.cbs/chaos/`` (git-ignored) unless ``--home`` says otherwise.
The run keeps the default attempt limit (``CBS_MAX_ATTEMPTS``): an outage or a kill of the lab
must never cost a trial an attempt it would miss, so a raised limit would hide exactly that.

It passes only when every kind of episode happened (``not_exercised`` empty), both studies
completed with identical tables and B*, and every history is whole: ``summary/*`` written once,
a diverged trial's end (a train-loss divergence ends at a log step, unevaluated) a measurement,
not a fault. ``tokens_trained`` counts the tokens the trials trained (each run's final
``progress/tokens``), not the settings' D.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# This folder's modules (the script runs as `python benchmarks/chaos.py`).
from browser_launch import launch_in_browser  # noqa: E402
from chaos_checks import comparable, leftovers, phase_record  # noqa: E402
from chaos_history import compare_histories  # noqa: E402
from chaos_processes import ROOT, freeze_one, kill_one, start_up, stop_up, study_progress  # noqa: E402

KILLS = ("worker-child", "worker-group", "runner", "tracking", "web", "worker-freeze")
#: Kinds that can strike only while a pool child trains a trial.
NEED_A_TRAINING_TRIAL = frozenset({"worker-child", "worker-freeze"})
#: Seconds a frozen pool child stays stopped: past the chaos run's CBS_STALE_AFTER_S (6 s), so its
#: lease goes to a replacement before it thaws.
FREEZE_S = 12.0
OUTAGES = {"fs": ("disk-full",), "redis-pg": ("disk-full", "postgres-outage", "redis-outage")}
REDIS_URL = os.environ.get("CBS_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")
POSTGRES_URL = os.environ.get("CBS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
STUDIES = ("chaos-grid", "chaos-optuna")
#: The run stops when the lab holds more connections than this to the shared PostgreSQL (its
#: default max_connections is 100): a leak would otherwise lock every other client out.
PG_CONNECTION_LIMIT = 60
#: The Optuna cell's target, nats: just above the grid study's (2.977 at D = 32k), so that most rates
#: reach it at either size.
OPTUNA_TARGET_LOSS = 3.0


@dataclass(frozen=True, kw_only=True)
class Size:
    """How big the chaos studies are and how often something is broken."""

    tokens: int
    """D of the one setting (tiny-0.1M, T = 16), tokens."""
    batch_sizes: tuple[int, ...]
    """Batch sizes of the grid study (sequences); B_ref = 8 is the Optuna study's one cell."""
    lrs: tuple[float, ...]
    """The grid's learning rates; the Optuna study searches between the outer two."""
    optuna_trials: int
    kill_every_s: tuple[float, float]
    """Seconds between two episodes, drawn uniformly from this range."""
    min_uptime_s: float
    """A process is killed only after it has run this long (a worker needs tens of seconds to
    start on a loaded machine: killing it sooner would only ever kill start-ups)."""
    kills_per_kind: int
    """Kills of each kind; each outage kind happens once. Then the storm ends and the studies
    finish (on two shared cores a storm without end kills workers faster than they start)."""
    outage_s: float
    """Length of each outage and of the disk-full episode, seconds."""
    home_mb: int
    """Size of the chaos phase's ``$CBS_HOME`` filesystem (it holds the MLflow and Optuna stores,
    the ledger, the filesystem broker and the checkpoints; the token store lives outside)."""
    timeout_s: float
    """Each phase's limit for both studies to finish, seconds."""
    max_documents: int
    """Chapters of the built-in corpus in the token store (about 1.8k tokens each): enough for
    the largest trial budget in one pass, 1.25·(B_max/B_ref)·D (``cbs study launch`` refuses a
    spec whose prepared store is too small)."""


SIZES = {
    # The slow test's size: 9 grid trials and 3 Optuna trials, one episode of each kind 3-6 s apart.
    "small": Size(tokens=32_000, batch_sizes=(4, 8, 16), lrs=(0.003, 0.01, 0.03), optuna_trials=3,
                  kill_every_s=(3.0, 6.0), min_uptime_s=20, kills_per_kind=1, outage_s=30, home_mb=64,
                  timeout_s=1200, max_documents=120),
    # docs/operating.md's figures, sized for ~25 min for both backends on two quiet cores (the old
    # one-rate spec at D = 600k/1.2M, 8 trials, took 8-12 min a backend): 12 grid trials and 3
    # Optuna trials at D = 300k, three kills of each kind 3-8 s apart and the outages. The storm needs
    # about 90 s of outages, 36 s of freezes and three 45 s waits for a restarted worker's uptime; at
    # 5-15 s apart it needed more than the chaos phase lasts once no trial is lost for good (stop 52,
    # redis-pg: the studies ended at 316 s and 390 s with 19 and 23 of 24 episodes, so the run failed
    # on `not_exercised` with every check of the data passing).
    "default": Size(tokens=300_000, batch_sizes=(4, 8, 16, 32), lrs=(0.003, 0.01, 0.03), optuna_trials=3,
                    kill_every_s=(3.0, 8.0), min_uptime_s=45, kills_per_kind=3, outage_s=30, home_mb=256,
                    timeout_s=2400, max_documents=1100),
}


def spec_yamls(size: Size, store_dir: Path) -> dict[str, str]:
    """The two studies' YAML specs, by name."""
    common = (f"kind: custom\nsettings:\n  - {{model: tiny-0.1M, tokens: {size.tokens}}}\nb_ref: 8\n"
              f"context_tokens: 16\neval_windows: 16\n"
              f"data: {{source: builtin, vocab_size: 320, max_documents: {size.max_documents}, val_fraction: 0.1, "
              f"store_dir: {store_dir}}}\n")
    lrs = ", ".join(map(repr, size.lrs))
    from cbscore.study import StudySpec

    grid = StudySpec.from_yaml(f"name: probe\n{common}batch_sizes: [8]\n")
    setting = grid.resolve_settings()[0].setting_id
    return {
        "chaos-grid": f"name: chaos-grid\n{common}batch_sizes: [{', '.join(map(str, size.batch_sizes))}]\n"
                      f"prune_margin: 0.1\nsearch: {{kind: grid, lrs: [{lrs}], lr_extensions: 0}}\n",
        # An explicit target: a reference cell's target is the best final loss of the trials ended
        # when it is set, which depends on timing, and so would what Optuna is told and proposes.
        "chaos-optuna": f"name: chaos-optuna\n{common}batch_sizes: [8]\n"
                        f"target_losses: {{{setting}: {OPTUNA_TARGET_LOSS!r}}}\n"
                        f"search: {{kind: optuna, n_trials: {size.optuna_trials}, parallel_per_cell: 1, "
                        f"lr_min: {min(size.lrs)!r}, lr_max: {max(size.lrs)!r}}}\n",
    }


# ---------------------------------------------------------------------------- the storm
@dataclass
class Storm:
    """The disturbances of the chaos phase and what happened of them."""

    home: Path
    size: Size
    outage_kinds: tuple[str, ...]
    proxies: dict = field(default_factory=dict)
    """``postgres``/``redis`` → the TCP proxy the lab's processes reach that service through."""
    counts: dict = field(default_factory=dict)
    episodes: list = field(default_factory=list)
    """One dict per disturbance: kind, start and end (s after the phase's start), details."""
    skipped: tuple[str, ...] = ()
    """Kinds left out by ``--skip`` (reported as such)."""
    disk_unavailable: str = ""
    """Why the disk-full episode cannot run here (empty when it can)."""

    def __post_init__(self) -> None:
        self.counts = {k: 0 for k in (*KILLS, *self.outage_kinds)}

    def quota(self, kind: str) -> int:
        return self.size.kills_per_kind if kind in KILLS else 1

    def not_exercised(self) -> list[str]:
        """Kinds that did not happen as often as planned, skipped or impossible here included."""
        return [k for k in self.counts if self.counts[k] < self.quota(k)]

    def pending(self) -> list[str]:
        return [k for k in self.counts if self.counts[k] < self.quota(k) and k not in self.skipped
                and not (k == "disk-full" and self.disk_unavailable)]

    def strike(self, t0: float) -> str | None:
        """One disturbance, the kind done least so far that can happen now; its name or None. Among
        kinds done equally often, those that need a trial training (a pool child killed or frozen)
        come first: the others can still strike after the last trial, these cannot (stop 52: a
        small redis-pg run ended with its freeze never made, three 30 s outages having gone first)."""
        def order(kind: str) -> tuple:
            return self.counts[kind], kind not in NEED_A_TRAINING_TRIAL, random.random()
        for kind in sorted(self.pending(), key=order):
            start = time.time() - t0
            detail = self._kill(kind) if kind in KILLS else self._outage(kind)
            if detail is None:
                continue
            self.counts[kind] += 1
            self.episodes.append({"kind": kind, "start_s": round(start, 1), "end_s": round(time.time() - t0, 1),
                                  **detail})
            return kind
        return None

    def _kill(self, kind: str) -> dict | None:
        if kind == "worker-freeze":
            return {"frozen_s": FREEZE_S} if freeze_one(self.home, self.size.min_uptime_s, FREEZE_S) else None
        return {} if kill_one(kind, self.home, self.size.min_uptime_s) else None

    def _outage(self, kind: str) -> dict | None:
        if kind == "disk-full":
            ballast = self.home / "ballast.bin"
            free_before = shutil.disk_usage(self.home).free
            fill(ballast)
            free_during = shutil.disk_usage(self.home).free
            time.sleep(self.size.outage_s)
            ballast.unlink()
            return {"free_bytes_before": free_before, "free_bytes_during": free_during}
        proxy = self.proxies[kind.split("-")[0]]
        proxy.down()
        time.sleep(self.size.outage_s)
        proxy.up()
        return {}


def fill(path: Path) -> None:
    """Write zeros to ``path`` until its filesystem has not one block left (ENOSPC at 4 KiB)."""
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        n = len(chunk)
        while n >= 4096:
            try:
                f.write(chunk[:n])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                n //= 2


def mount_home(home: Path, megabytes: int) -> str:
    """Mount a tmpfs of ``megabytes`` on ``home``; the reason it could not, else empty."""
    if os.geteuid() != 0:
        return "not root: cannot mount a small filesystem for $CBS_HOME"
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0755", "tmpfs", str(home)],
                         capture_output=True, text=True)
    return "" if out.returncode == 0 else f"mount failed: {out.stderr.strip()}"


def wait_done(env: dict, timeout_s: float, storm: Storm | None, progress: list, up: subprocess.Popen,
              databases: list[str] = ()) -> float:
    """Wait for both studies to finish, disturbing the lab every few seconds when ``storm`` is
    given. The status is read in a thread (a ``cbs study status`` call takes seconds on a loaded
    machine, and a store may be down) so the storm keeps its pace; ``progress`` gets ``(t, study,
    fraction ended)`` at each change."""
    t0 = time.time()
    done = threading.Event()

    def poll() -> None:
        last = {}
        while not done.is_set():
            statuses = {}
            for name in STUDIES:
                statuses[name], fraction = study_progress(name, env)
                if fraction is not None and fraction != last.get(name):
                    last[name] = fraction
                    progress.append((round(time.time() - t0, 1), name, fraction))
            if all(s == "done" for s in statuses.values()):
                done.set()
            done.wait(3)

    threading.Thread(target=poll, daemon=True).start()
    next_strike = t0 + (random.uniform(*storm.size.kill_every_s) if storm else float("inf"))
    next_count = t0
    while not done.is_set():
        now = time.time()
        if now - t0 > timeout_s:
            done.set()
            raise TimeoutError(f"the studies did not finish within {timeout_s:.0f} s")
        if now >= next_count:  # the shared server serves others too: stop before it refuses them
            next_count = now + 10
            held = pg_connections(databases)
            if held > PG_CONNECTION_LIMIT:
                done.set()
                raise RuntimeError(f"the lab holds {held} connections to PostgreSQL (more than "
                                   f"{PG_CONNECTION_LIMIT}) {now - t0:.0f} s into the phase")
        if up.poll() is not None:  # nothing restarts what is killed now: the run cannot pass
            done.set()
            raise RuntimeError(f"cbs up exited (code {up.returncode}) {now - t0:.0f} s into the phase; its log "
                               "ends with the reason")
        if now >= next_strike:
            kind = storm.strike(t0)
            if kind is not None:
                print(f"chaos: {now - t0:6.1f} s  {kind}", flush=True)
            next_strike = time.time() + random.uniform(*storm.size.kill_every_s)
        time.sleep(0.2)
    return time.time() - t0


def pg_connections(databases: list[str]) -> int:
    """Connections the server holds to this run's ``databases``, as PostgreSQL counts them (a
    socket the proxy closed while a thread was reading it stays open, unseen on this side)."""
    if not databases:
        return 0
    import psycopg2

    try:
        admin = psycopg2.connect(POSTGRES_URL, connect_timeout=3)
    except psycopg2.OperationalError as exc:  # full already, or restarting: let the caller decide
        return PG_CONNECTION_LIMIT + 1 if "too many clients" in str(exc) else 0
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = ANY(%s)", (databases,))
            return int(cur.fetchone()[0])
    finally:
        admin.close()


def recoveries(episodes: list, progress: list) -> None:
    """Each episode's ``next_progress_s``: seconds from its end to the next trial that ended
    (None: none did after it, so the lab did not recover from it or the studies had ended)."""
    for e in episodes:
        after = [t for t, _, _ in progress if t > e["end_s"]]
        e["next_progress_s"] = round(min(after) - e["end_s"], 1) if after else None


# ---------------------------------------------------------------------------- one backend
@dataclass
class Backend:
    """Where one phase's lab keeps its state: environment additions and the MLflow store."""

    name: str
    proxies: dict = field(default_factory=dict)
    databases: list = field(default_factory=list)

    def phase_env(self, home: Path) -> tuple[dict, str]:
        """Environment and MLflow store URI of a phase living in ``home``."""
        if self.name == "fs":  # the defaults: the ledger and Optuna in $CBS_HOME, the broker's files too
            return {}, f"sqlite:///{home / 'mlflow.db'}"
        import psycopg2
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).flushdb()
        db = f"cbs_chaos_{uuid.uuid4().hex[:8]}"
        admin = psycopg2.connect(POSTGRES_URL, connect_timeout=3)
        admin.autocommit = True
        with admin.cursor() as cur:
            for name in (db, f"{db}_optuna"):
                cur.execute(f'CREATE DATABASE "{name}"')
                self.databases.append(name)
        admin.close()
        pg, rd = self.proxies["postgres"], self.proxies["redis"]
        base = f"postgresql://{POSTGRES_URL.split('://', 1)[1].split('@')[0]}@127.0.0.1:{pg.port}"
        redis_db = REDIS_URL.rsplit("/", 1)[1]
        return {"CBS_BROKER_URL": f"redis://127.0.0.1:{rd.port}/{redis_db}",
                "CBS_OPTUNA_STORAGE": f"{base}/{db}_optuna"}, f"{base}/{db}"

    def __enter__(self) -> Backend:
        if self.name == "redis-pg":
            try:
                from tests.workers.tcp_proxy import Proxy
            except ImportError:  # before the proxy had its own module
                from tests.workers.test_outages import Proxy
            from urllib.parse import urlsplit

            for service, url, port in (("postgres", POSTGRES_URL, 5432), ("redis", REDIS_URL, 6379)):
                parts = urlsplit(url)
                self.proxies[service] = Proxy((parts.hostname or "127.0.0.1", parts.port or port))
                self.proxies[service].up()
        return self

    def __exit__(self, *exc) -> None:
        for proxy in self.proxies.values():
            proxy.down()
        if self.databases and os.environ.get("CBS_CHAOS_KEEP_DB"):
            print(f"chaos: kept databases {self.databases}", flush=True)
        elif self.databases:
            import psycopg2

            admin = psycopg2.connect(POSTGRES_URL, connect_timeout=3)
            admin.autocommit = True
            with admin.cursor() as cur:
                for name in self.databases:
                    cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.close()


def run_phase(backend: Backend, home: Path, base_env: dict, size: Size, specs: dict, storm: Storm | None,
              report: dict, label: str) -> dict:
    """One phase: ``cbs up`` in ``home``, both studies launched in the browser, waited for
    (under the storm when given), and its record read before the lab stops."""
    extra, store_uri = backend.phase_env(home)
    env = {**base_env, "CBS_HOME": str(home), **extra}
    log = home.parent / f"up-{label}.log"
    up, env = start_up(home, env, store_uri, log)
    progress: list = []
    try:
        if storm is not None:
            storm.proxies = backend.proxies
        launch_in_browser(env["CBS_WEB_URL"], specs, home.parent)
        try:
            report[f"{label}_wall_s"] = round(wait_done(env, size.timeout_s, storm, progress, up,
                                                          list(backend.databases)), 1)
            print(f"chaos: {label} phase done in {report[f'{label}_wall_s']:.0f} s", flush=True)
        finally:
            report[f"{label}_progress"] = progress
            if storm is not None:
                recoveries(storm.episodes, progress)
        time.sleep(3)  # the last trial's process ends its bookkeeping
        return phase_record(env, STUDIES)
    finally:
        stop_up(up, home)
        text = log.read_text(errors="replace")
        report[f"{label}_give_backs"] = text.count("goes back to the queue")
        report[f"{label}_disk_full_errors"] = text.count("No space left on device") + text.count("disk is full")
        report[f"{label}_files_left"] = leftovers(home)


def run_backend(name: str, size_name: str, home_root: Path, seed: int, skip: tuple[str, ...] = ()) -> dict:
    random.seed(seed)
    size = SIZES[size_name]
    root = home_root / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    calm_home, chaos_home = root / "calm", root / "chaos"
    for p in (calm_home, chaos_home):
        p.mkdir(parents=True)
    env = {**os.environ, "CBS_HEARTBEAT_S": "1", "CBS_STALE_AFTER_S": "6", "CBS_WATCH_PERIOD_S": "1",
           "CBS_CHECKPOINT_EVERY_S": "2", "CBS_TORCH_THREADS": "1",
           "CBS_OUTAGE_WAIT_S": "600", "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONUNBUFFERED": "1"}
    for key in ("CBS_MAX_ATTEMPTS", "CBS_BROKER_URL", "CBS_OPTUNA_STORAGE", "CBS_LEDGER_URL", "CBS_TRACKING_URI", "MLFLOW_TRACKING_URI",
                "CBS_TRIAL_QUEUE", "CBS_CHECKPOINT_DIR", "CBS_STORE_DIR", "CBS_ARTIFACT_ROOT"):
        env.pop(key, None)
    specs = spec_yamls(size, root / "store" / "tokens")  # inside the data root, not the root itself
    (root / "store").mkdir()
    env["CBS_DATA_ROOTS"] = str(root / "store")  # the web app launches only stores inside a data root
    env["CBS_STORE_ROOTS"] = str(root / "store")  # ... and a store folder of the lab (issue 41, finding 6)
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()  # noqa: E731
    report: dict = {
        "backend": name, "size": size_name, "seed": seed, "home": str(root), "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted_files": len(git("status", "--porcelain", "--untracked-files=no").splitlines()),
        "machine": f"{platform.node()}: {os.cpu_count()} cores ({_cpu_model()}), "
                   f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
                   f"load {os.getloadavg()[0]:.1f} at the start",
        "tracking": "through the cbs tracking server (http); the server alone opens the store",
        "launched": "through the web app's Launch page in headless chromium",
    }
    storm = Storm(home=chaos_home, size=size, outage_kinds=OUTAGES[name], skipped=tuple(skip))
    report["skipped"] = list(skip)
    storm.disk_unavailable = mount_home(chaos_home, size.home_mb)
    t_start = time.time()
    calm = chaos = None
    try:
        with Backend(name) as backend:
            calm = run_phase(backend, calm_home, env, size, specs, None, report, "calm")
            chaos = run_phase(backend, chaos_home, env, size, specs, storm, report, "chaos")
    except Exception as exc:  # noqa: BLE001 - the report says what failed, and the run fails
        report["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        report["kills"] = {k: storm.counts[k] for k in KILLS}
        report["outages"] = {k: storm.counts[k] for k in storm.outage_kinds}
        if storm.disk_unavailable:
            report["outages"]["disk-full"] = f"not run: {storm.disk_unavailable}"
        report["episodes"] = storm.episodes
        report["not_exercised"] = storm.not_exercised()
        if not storm.disk_unavailable:
            subprocess.run(["umount", "-l", str(chaos_home)], capture_output=True)
        report["wall_s"] = round(time.time() - t_start, 1)
    if calm is not None and chaos is not None:
        report.update(verdict(calm, chaos))
        report["tokens_trained"] = report["tokens_trained_calm"] + report["tokens_trained_chaos"]
    report["passed"] = passed(report)
    return report


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def verdict(calm: dict, chaos: dict) -> dict:
    """The comparisons of the two phases' records."""
    out = {}
    for name in STUDIES:
        a, b = comparable(calm["tables"][name]), comparable(chaos["tables"][name])
        out[f"identical_table_{name}"] = a == b
        if a != b:
            out[f"table_diff_{name}"] = [(x, y) for x, y in zip(a, b) if x != y][:10] or {"rows": (len(a), len(b))}
    out["identical_table"] = all(out[f"identical_table_{n}"] for n in STUDIES)
    out["b_star_calm"], out["b_star_chaos"] = calm["b_star"], chaos["b_star"]
    out["trials"] = len(chaos["histories"])
    out["attempts"] = sum(h.attempt for h in chaos["histories"])
    out["outcomes"] = {o: sum(h.outcome == o for h in chaos["histories"]) for o in
                       sorted({h.outcome for h in chaos["histories"]})}
    out["runs_left_open"] = calm["runs_left_open"] + chaos["runs_left_open"]
    out["optuna_trials_left_running"] = calm["optuna_trials_left_running"] + chaos["optuna_trials_left_running"]
    out.update(compare_histories(calm["histories"], chaos["histories"]))
    return out


def passed(r: dict) -> bool:
    """Whether the run passed: every check held and every episode kind happened (``skipped`` kinds
    and a disk-full episode that cannot run here are in ``not_exercised`` too, so they fail it)."""
    fitted = bool(r.get("b_star_calm")) and all(b is not None for _, b in r["b_star_calm"])
    return bool(not r.get("error") and fitted and not r.get("not_exercised", ["unknown"]) and r.get("identical_table") and r["b_star_calm"] == r["b_star_chaos"]
                and not r.get("runs_left_open") and not r.get("optuna_trials_left_running")
                and not r.get("calm_files_left") and not r.get("chaos_files_left")
                and not r.get("histories_with_gaps_or_duplicates") and not r.get("histories_unlike_calm")
                and not r.get("trials_in_one_phase_only"))


class Interrupted(Exception):
    """SIGTERM: the run ends as a failure, with its report."""


def _interrupted(*_: object) -> None:
    raise Interrupted("stopped by SIGTERM")


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupted)  # stop the lab, unmount, drop the databases, report
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("fs", "redis-pg", "both"), default="both")
    parser.add_argument("--size", choices=tuple(SIZES), default="default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--home", type=Path, default=ROOT / ".cbs" / "chaos")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    parser.add_argument("--skip", action="append", default=[], choices=(*KILLS, *OUTAGES["redis-pg"]),
                        help="leave out this kind of episode (repeatable; the report lists it as skipped)")
    args = parser.parse_args(argv)
    args.home = args.home.resolve()  # cbs up runs in the phase's folder: a relative path would move
    if args.backend == "both":
        reports = []
        for backend in ("fs", "redis-pg"):
            out = args.home / f"report-{backend}.json"
            subprocess.run([sys.executable, __file__, "--backend", backend, "--size", args.size, "--seed",
                            str(args.seed), "--home", str(args.home), "--json", str(out),
                            *(a for k in args.skip for a in ("--skip", k))], check=False)
            reports.append(json.loads(out.read_text()) if out.exists() else {"backend": backend, "passed": False})
    else:
        reports = [run_backend(args.backend, args.size, args.home, args.seed, tuple(args.skip))]
    text = json.dumps(reports if len(reports) > 1 else reports[0], indent=2, default=str)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    return 0 if all(r.get("passed") for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
