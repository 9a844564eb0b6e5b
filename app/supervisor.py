"""``cbs up``'s process supervisor: every Procfile process kept running until Ctrl-C.

A lab must not stop because one part of it crashed. Honcho (which ``cbs up`` used before) ends
every process when one exits, so a crashed MLflow server or web app took the running trials with
it. The supervisor instead restarts a process that exited on its own after ``restart_delay_s``.
One that exits again soon after its start (within ``healthy_after_s``: a database or the broker
still away, a port in use) waits twice as long each time, up to ``max_restart_delay_s``, and one
that ran that long starts over at ``restart_delay_s``. The whole stack is given up only when a
process has exited ``max_restarts`` + 1 times in a row soon after its start (by default over four
minutes of trying: a broken install, not a dependency away for a minute), saying which.

* Each process runs in its own session (its own process group), so a terminal's Ctrl-C reaches
  the supervisor alone; it then sends SIGTERM to each group (the worker's warm shutdown puts its
  trials back in the queue at a checkpoint), waits ``stop_grace_s`` and SIGKILLs what is left.
* Output lines are prefixed with the process name, as honcho did.
* The process ids are written to ``pids_file`` (JSON ``{name: pid}``) at every (re)start, for
  operators and for ``benchmarks/chaos.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cbscore.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class ProcessSpec:
    """One line of a Procfile."""

    name: str
    """The process type (left of the colon)."""
    command: str
    """The shell command (right of the colon)."""


def read_procfile(path: Path) -> list[ProcessSpec]:
    """The processes of a Procfile (``name: command`` lines; ``#`` comments and blanks skipped)."""
    out = []
    for n, raw in enumerate(Path(path).read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, command = line.partition(":")
        if not sep or not name.strip() or not command.strip():
            raise ConfigError("--procfile", f"{path}:{n}", f"line {raw!r} is not 'name: command'")
        out.append(ProcessSpec(name=name.strip(), command=command.strip()))
    if not out:
        raise ConfigError("--procfile", str(path), "names no process")
    return out


class Supervisor:
    """Start, watch, restart and stop the processes of a Procfile."""

    def __init__(self, specs: list[ProcessSpec], *, env: dict[str, str], cwd: Path, pids_file: Path | None = None,
                 restart_delay_s: float = 3.0, max_restart_delay_s: float = 60.0, healthy_after_s: float = 60.0,
                 max_restarts: int = 8, stop_grace_s: float = 20.0, out=None):
        self.specs = {s.name: s for s in specs}
        self.env, self.cwd, self.pids_file = env, cwd, pids_file
        self.restart_delay_s, self.max_restart_delay_s = restart_delay_s, max_restart_delay_s
        self.healthy_after_s, self.max_restarts = healthy_after_s, max_restarts
        self.stop_grace_s = stop_grace_s
        self.out = out or sys.stdout
        self.procs: dict[str, subprocess.Popen] = {}
        self.started: dict[str, float] = {}  # name -> when it was last started (monotonic)
        self.quick_exits: dict[str, int] = {name: 0 for name in self.specs}  # in a row, each soon after its start
        self.due: dict[str, float] = {}  # name -> when to restart it
        self._stopping = threading.Event()
        self._print_lock = threading.Lock()
        self.width = max(len(n) for n in self.specs)

    # ------------------------------------------------------------------ output
    def say(self, name: str, line: str) -> None:
        with self._print_lock:
            self.out.write(f"{time.strftime('%H:%M:%S')} {name.ljust(self.width)} | {line}\n")
            self.out.flush()

    def _pump(self, name: str, proc: subprocess.Popen) -> None:
        for raw in iter(proc.stdout.readline, b""):
            self.say(name, raw.decode(errors="replace").rstrip("\n"))
        proc.stdout.close()

    # ------------------------------------------------------------------ processes
    def start(self, name: str) -> None:
        argv = ["/bin/sh", "-c", f"exec {self.specs[name].command}"]
        proc = subprocess.Popen(argv, env=self.env, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[name] = proc
        self.started[name] = time.monotonic()
        threading.Thread(target=self._pump, args=(name, proc), name=f"cbs-up-{name}", daemon=True).start()
        self.say("system", f"{name} started (pid {proc.pid}): {self.specs[name].command}")
        self._write_pids()

    def _write_pids(self) -> None:
        """Write :attr:`pids_file`; a failure (a full disk under ``$CBS_HOME``) is said, never raised:
        the file is for operators and the chaos run, and supervising matters more (the chaos run's
        full-disk episode ended ``cbs up`` here while it restarted a process)."""
        if self.pids_file is None:
            return
        tmp = self.pids_file.with_suffix(".tmp")
        try:
            self.pids_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({n: p.pid for n, p in self.procs.items() if p.poll() is None}))
            os.replace(tmp, self.pids_file)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            self.say("system", f"could not write {self.pids_file} ({exc.strerror or exc}); supervising on")

    def run(self) -> int:
        """Start everything and supervise until :meth:`stop` (or a crash loop); returns the exit code."""
        for name in self.specs:
            self.start(name)
        code = 0
        while not self._stopping.is_set():
            now = time.monotonic()
            for name, proc in list(self.procs.items()):
                rc = proc.poll()
                if rc is None or name in self.due:
                    continue
                soon = now - self.started[name] < self.healthy_after_s
                n = self.quick_exits[name] = self.quick_exits[name] + 1 if soon else 1
                if n > self.max_restarts:
                    self.say("system", f"{name} exited (code {rc}) {n} times in a row, each within "
                                       f"{self.healthy_after_s:g} s of its start; stopping everything (see its lines above)")
                    code = 1
                    self._stopping.set()
                    break
                delay = self.restart_delay(n)
                again = f" ({n} exits in a row, each soon after its start)" if n > 1 else ""
                self.say("system", f"{name} exited (code {rc}); restarting it in {delay:g} s{again}")
                self.due[name] = now + delay
                self._write_pids()
            for name, when in list(self.due.items()):
                if time.monotonic() >= when and not self._stopping.is_set():
                    del self.due[name]
                    self.start(name)
            self._stopping.wait(0.5)
        self._stop_all()
        return code

    def restart_delay(self, quick_exits: int) -> float:
        """Seconds before a restart after the ``quick_exits``-th exit in a row soon after a start:
        ``restart_delay_s`` doubled each time, at most ``max_restart_delay_s``."""
        return min(self.max_restart_delay_s, self.restart_delay_s * 2 ** (quick_exits - 1))

    def stop(self) -> None:
        """Ask :meth:`run` to stop every process and return (signal-safe)."""
        self._stopping.set()

    def _stop_all(self) -> None:
        live = {n: p for n, p in self.procs.items() if p.poll() is None}
        for name, proc in live.items():
            self.say("system", f"stopping {name} (SIGTERM to pid group {proc.pid})")
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        for name, proc in live.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say("system", f"{name} did not stop within {self.stop_grace_s:g} s; SIGKILL")
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGKILL)  # whatever is left of each group (children too)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.pids_file is not None:
            with contextlib.suppress(OSError):  # a folder it could never be written to (see _write_pids)
                self.pids_file.unlink(missing_ok=True)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
