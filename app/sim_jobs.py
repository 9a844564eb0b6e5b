""""Simulate this design" as a bounded background job.

A click starts one child process (``python -m app.sim_jobs``) that runs the simulated studies one
at a time and sends each back as it ends. The web process never simulates itself: its page thread
only waits, with a progress bar, and a watchdog thread ends a job

* at its wall limit (twice ``CBS_WEB_SIM_SECONDS`` plus :data:`WALL_SLACK_S`: the child stops by
  itself between studies after ``CBS_WEB_SIM_SECONDS``; the rest lets a study begun in time end),
* when its browser session has ended (a closed tab; within :data:`SESSION_GRACE_S` seconds),
* and the kernel ends it at its CPU-time limit (``RLIMIT_CPU``, the same seconds) if both fail.

A session runs at most one job: a second click while one runs starts nothing (with the same
settings it waits for the running one; else it is told to wait). All sessions together run at most
``CBS_WEB_SIM_JOBS`` jobs (default :data:`MAX_JOBS`). The child runs ``nice``d, single-threaded,
and exits by itself when the web process is gone.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import logging
import math
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from cbscore.errors import CbsError, ConfigError, DataError, FitError

#: Simulation jobs all sessions may run at once (``CBS_WEB_SIM_JOBS``): the web host has few cores.
MAX_JOBS = 2
#: Seconds a job's session may be gone before the job is ended (a reconnecting tab keeps its session).
SESSION_GRACE_S = 2.0
#: Seconds past twice the soft limit before a job is killed (and its CPU-time limit).
WALL_SLACK_S = 5.0
#: How often the watchdog and a waiting page look at the jobs (seconds).
POLL_S = 0.25

log = logging.getLogger("cbslab.app")
_lock = threading.Lock()
_jobs: dict[str, Job] = {}  # by browser session id
_watchdog: threading.Thread | None = None


def max_jobs() -> int:
    """All sessions' running jobs at most (``CBS_WEB_SIM_JOBS``, else :data:`MAX_JOBS`)."""
    return int(os.environ.get("CBS_WEB_SIM_JOBS") or MAX_JOBS)


@dataclasses.dataclass(eq=False)
class Job:
    """One session's simulation: its child process and the studies it has sent back."""

    session: str
    """The browser session that started it (Streamlit's session id)."""
    key: str
    """Digest of what it simulates (spec, truth, noise, seeds): a click with the same settings joins it."""
    seeds: int
    """Simulated studies asked for."""
    seconds: float
    """Soft limit: the child starts no study after this many seconds (``CBS_WEB_SIM_SECONDS``)."""
    proc: subprocess.Popen
    started_s: float = dataclasses.field(default_factory=time.monotonic)
    """``time.monotonic()`` at the start."""
    reports: list = dataclasses.field(default_factory=list)
    """One ``SimulationReport`` per simulated study that ended, in seed order."""
    error: BaseException | None = None
    """What the child raised (a ``CbsError`` as the library raised it)."""
    ended: str = ""
    """Why it ended: ``done``, ``error``, ``killed: <why>`` or ``exit <code>``; empty while it runs."""
    gone_since_s: float | None = None
    """When the watchdog first saw its session gone."""
    _reader: threading.Thread | None = None

    @property
    def wall_limit_s(self) -> float:
        """Seconds after which the watchdog kills it."""
        return 2 * self.seconds + WALL_SLACK_S

    def running(self) -> bool:
        return not self.ended

    def kill(self, why: str) -> None:
        """End the child (its whole process group) and wait for it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait()
        if not self.ended:
            self.ended = f"killed: {why}"
            log.info("simulation job %d ended: %s", self.proc.pid, why)

    def report(self):
        """The studies that ended, as one report (the numbers of one ``simulate`` call when none was cut)."""
        if not self.reports:
            return None
        runs = tuple(run for r in self.reports for run in r.seeds)
        return dataclasses.replace(self.reports[-1], seeds=runs)


def _session_alive(session: str) -> bool:
    """Whether Streamlit still holds ``session`` as connected (no runtime, as under AppTest: yes)."""
    from streamlit import runtime

    if not runtime.exists():
        return True
    return runtime.get_instance().is_active_session(session)


def _read(job: Job) -> None:
    """The child's lines: ``study <report>`` per study, then ``done`` or ``error <exception>``."""
    for line in job.proc.stdout:
        kind, _, payload = line.partition(b" ")
        if kind == b"study":
            job.reports.append(pickle.loads(base64.b64decode(payload)))
        elif kind == b"error":
            job.error = _exception(pickle.loads(base64.b64decode(payload)))
            job.ended = job.ended or "error"
        elif kind == b"done\n" or kind == b"done":
            job.ended = job.ended or "done"
    code = job.proc.wait()
    job.ended = job.ended or f"exit {code}"


#: The exceptions the page shows as the library's own (by class name, as the child sends them); any
#: other comes back as a ``RuntimeError`` with the child's message. A fixed table, not an import of
#: whatever module the child names: the page imports only what the layer checker can see.
_SHOWN = {cls.__qualname__: cls for cls in (CbsError, ConfigError, DataError, FitError)}


def _exception(state: dict) -> BaseException:
    """The child's exception, rebuilt without calling its ``__init__`` (``ConfigError`` takes three
    arguments, so pickling the exception itself would not load)."""
    cls = _SHOWN.get(state["name"]) if state.get("module") == "cbscore.errors" else None
    if cls is None:
        return RuntimeError(state["message"])
    exc = cls.__new__(cls)
    exc.args = state["args"]
    exc.__dict__.update(state["dict"])
    return exc


def _watch() -> None:
    """Ends jobs past their wall limit or whose session is gone; exits when no job runs."""
    global _watchdog
    while True:
        time.sleep(POLL_S)
        with _lock:
            running = [j for j in _jobs.values() if j.running()]
            if not running:
                _watchdog = None
                return
        now = time.monotonic()
        for job in running:
            if now - job.started_s > job.wall_limit_s:
                job.kill(f"past its wall limit of {job.wall_limit_s:g} s")
            elif not _session_alive(job.session):
                job.gone_since_s = job.gone_since_s or now
                if now - job.gone_since_s >= SESSION_GRACE_S:
                    job.kill("its browser session ended")
            else:
                job.gone_since_s = None


def settings_key(spec, curves, config, seeds: int) -> str:
    """Digest of what a click asks to simulate."""
    return hashlib.sha256(pickle.dumps((spec.to_json(), curves, config, seeds))).hexdigest()


def running_job(session: str) -> Job | None:
    """``session``'s job while it runs."""
    with _lock:
        job = _jobs.get(session)
    return job if job is not None and job.running() else None


def start(session: str, spec, curves, config, seeds: int, *, seconds: float) -> Job:
    """``session``'s job for these settings: the running one if it simulates the same, else a new
    child. A session with a job of other settings running, or a web app running
    :func:`max_jobs` jobs, gets a :class:`~cbscore.errors.ConfigError` naming the limit."""

    global _watchdog
    key = settings_key(spec, curves, config, seeds)
    with _lock:
        for other in [s for s, j in _jobs.items() if not j.running()]:
            if not _session_alive(other):  # nobody will read its studies: let them go
                del _jobs[other]
        job = _jobs.get(session)
        if job is not None and job.running():
            if job.key == key:
                return job
            done = len(job.reports)
            raise ConfigError("Simulate", "a second simulation",
                              f"this session's simulation ({done} of {job.seeds} studies done) still runs, and a "
                              f"session runs one at a time; it ends within {job.wall_limit_s:g} s")
        running = sum(j.running() for j in _jobs.values())
        if running >= max_jobs():
            raise ConfigError("Simulate", f"{running} simulations running",
                              f"the web app runs at most {max_jobs()} at once (CBS_WEB_SIM_JOBS); simulate again "
                              "when one ends, or run `cbs study simulate` on the host")
        payload = pickle.dumps((spec, curves, config, seeds, seconds))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "app.sim_jobs"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        job = Job(session=session, key=key, seeds=seeds, seconds=seconds, proc=proc)
        proc.stdin.write(payload)
        proc.stdin.close()
        job._reader = threading.Thread(target=_read, args=(job,), name=f"sim-job-{proc.pid}", daemon=True)
        job._reader.start()
        _jobs[session] = job
        if _watchdog is None:
            _watchdog = threading.Thread(target=_watch, name="sim-jobs-watchdog", daemon=True)
            _watchdog.start()
    return job


def release(job: Job) -> None:
    """Forget ``job`` once its page has read it (it has ended)."""
    with _lock:
        if _jobs.get(job.session) is job and not job.running():
            del _jobs[job.session]


def wait(job: Job, tick: Callable[[Job], None]) -> None:
    """Wait for ``job`` to end, calling ``tick(job)`` every :data:`POLL_S` (the page's progress bar:
    a closed tab or another click interrupts the page there, and the watchdog ends the job)."""
    while job.running():
        tick(job)
        time.sleep(POLL_S)
    if job._reader is not None:
        job._reader.join(timeout=5)


# --------------------------------------------------------------------------- the child
def _child() -> None:
    """Read ``(spec, curves, config, seeds, seconds)`` from stdin; simulate one study at a time,
    writing each as it ends; stop starting studies after ``seconds``."""
    import resource

    spec, curves, config, seeds, seconds = pickle.loads(sys.stdin.buffer.read())
    cpu = math.ceil(2 * seconds + WALL_SLACK_S)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU, then SIGKILL: the kernel's bound
    os.nice(10)  # the pages stay responsive on a host of few cores
    parent = os.getppid()

    def orphaned() -> None:  # the web process is gone: nobody reads the result
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=orphaned, daemon=True).start()
    out = sys.stdout.buffer
    from cbscore.study.simulate import simulate

    start_s = time.monotonic()
    try:
        for i in range(seeds):
            if i and time.monotonic() - start_s > seconds:
                break
            report = simulate(spec, curves, config, seeds=1, first_seed=i)
            out.write(b"study " + base64.b64encode(pickle.dumps(report)) + b"\n")
            out.flush()
    except Exception as exc:  # sent to the page, which shows it as the library's error
        state = {"module": type(exc).__module__, "name": type(exc).__qualname__, "args": exc.args,
                 "dict": {k: v for k, v in vars(exc).items() if _picklable(v)}, "message": str(exc)[:600]}
        out.write(b"error " + base64.b64encode(pickle.dumps(state)) + b"\n")
        out.flush()
        return
    out.write(b"done\n")
    out.flush()


def _picklable(value) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


if __name__ == "__main__":
    _child()
