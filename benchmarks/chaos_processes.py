"""The chaos run's processes (``chaos.py``): ``cbs`` calls, the lab's process ids and their children,
which are busy, killing one of a kind, and starting and stopping ``cbs up``."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CBS = str(Path(sys.executable).parent / "cbs")

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cbs(*args: str, env: dict, timeout_s: float = 300) -> str:
    out = subprocess.run([CBS, *args], env=env, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"cbs {' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout


def study_progress(name: str, env: dict) -> tuple[str, float | None]:
    """``(status, fraction of trials ended)``; ``("unknown (...)", None)`` while a store is down."""
    try:
        d = json.loads(cbs("study", "status", name, "--json", env=env, timeout_s=120))
        return d["status"], d["progress"]
    except Exception as exc:  # noqa: BLE001 - the store may be down or restarting: not yet known
        return f"unknown ({type(exc).__name__})", None


def pids(home: Path) -> dict[str, int]:
    try:
        return json.loads((home / "up" / "pids.json").read_text())
    except (OSError, ValueError):
        return {}


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc: by parent pid, never by name)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def uptime_s(pid: int) -> float:
    """Seconds since ``pid`` started (field 22 of /proc/PID/stat, in clock ticks after boot)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return 0.0
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds ``pid`` has used (utime + stime, fields 14-15 of /proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy(pids_: list[int], window_s: float = 1.0) -> list[int]:
    """Those of ``pids_`` that used CPU over ``window_s``: a pool child training a trial (an idle
    child waits on the pool's queue and uses none)."""
    before = {p: cpu_s(p) for p in pids_}
    time.sleep(window_s)
    return [p for p in pids_ if cpu_s(p) - before[p] >= 0.1 * window_s]


def freeze_one(home: Path, min_uptime_s: float, freeze_s: float) -> bool:
    """Freeze a pool child that is training a trial (SIGSTOP) for ``freeze_s``, past the lease's
    staleness limit, then thaw it (SIGCONT): its lease has gone to a replacement meanwhile, so the
    thawed holder must write nothing (issue 42, finding 3). False when no child was training."""
    live = pids(home)
    try:
        if uptime_s(live["worker"]) < min_uptime_s:
            return False
        kids = busy([c for c in children(live["worker"]) if uptime_s(c) >= 5])
        if not kids:
            return False
        pid = random.choice(kids)
        os.kill(pid, signal.SIGSTOP)
    except (KeyError, ProcessLookupError):
        return False
    try:
        time.sleep(freeze_s)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    return True


def kill_one(kind: str, home: Path, min_uptime_s: float) -> bool:
    """Kill one process of ``kind`` that has run at least ``min_uptime_s``; False when there was
    none to kill right now."""
    live = pids(home)
    try:
        if kind == "worker-child":
            # A child running a trial when there is one (Celery redelivers its task), else an idle
            # one: on the filesystem broker that used to leave the pool's read lock held, so the
            # worker took no task again (issue 22; workers.infra.pool waits without the lock).
            kids = [c for c in (children(live["worker"]) if "worker" in live else []) if uptime_s(c) >= 5]
            kids = busy(kids) or kids
            if not kids or uptime_s(live["worker"]) < min_uptime_s:
                return False
            os.kill(random.choice(kids), signal.SIGKILL)
        else:
            pid = live["worker" if kind == "worker-group" else kind]
            if uptime_s(pid) < min_uptime_s:
                return False
            os.killpg(pid, signal.SIGKILL)
    except (KeyError, ProcessLookupError):
        return False
    return True


def start_up(home: Path, env: dict, store_uri: str, log: Path) -> tuple[subprocess.Popen, dict]:
    """``cbs up`` in ``home``, its output in ``log`` (outside ``home``, which may fill up): the
    tracking server opens ``store_uri``; every other process gets the server's URL as its
    ``CBS_TRACKING_URI``. Returns the supervisor and that environment."""
    web_port, tracking_port = free_port(), free_port()
    tracking_url = f"http://127.0.0.1:{tracking_port}"
    procfile = home / "Procfile"
    procfile.write_text(f"tracking: env CBS_TRACKING_URI={store_uri} CBS_ARTIFACT_ROOT={home / 'artifacts'} "
                        f"cbs tracking --port {tracking_port}\n"
                        f"worker: cbs worker\nrunner: cbs study watch\nweb: cbs web --port {web_port}\n")
    env = {**env, "CBS_TRACKING_URI": tracking_url, "CBS_TRACKING_UI_URL": tracking_url,
           "CBS_WEB_URL": f"http://127.0.0.1:{web_port}"}
    with open(log, "w") as handle:
        proc = subprocess.Popen([CBS, "up", "--skip-data", "--workers", "2", "--procfile", str(procfile),
                                 "--port", str(web_port)], env=env, stdout=handle, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=home)
    deadline = time.time() + 180
    while not _answers(f"{tracking_url}/health") or not _answers(f"{env['CBS_WEB_URL']}/_stcore/health"):
        if proc.poll() is not None or time.time() > deadline:
            stop_up(proc, home)
            raise RuntimeError(f"cbs up did not start: {log.read_text()[-3000:]}")
        time.sleep(1)
    return proc, env


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=3):
            return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def stop_up(proc: subprocess.Popen, home: Path | None = None) -> None:
    """Stop ``cbs up`` (it stops its processes), then any group of ``home``'s lab it left behind
    (each process has its own group; a supervisor that crashed stops none)."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    for pgid in [proc.pid, *(pids(home).values() if home is not None else ())]:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
