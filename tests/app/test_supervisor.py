"""``cbs up``'s supervisor on real processes: a crashed process comes back, a crash loop stops
the stack with the reason, and stopping ends every process group (children included)."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time

import pytest

from app.supervisor import Supervisor, read_procfile
from cbscore.errors import ConfigError
from tests.app.conftest import alive


def _wait(predicate, what: str, timeout_s: float = 90):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (OSError, ValueError):  # the pids file between two writes
            value = None
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")


def test_a_killed_process_is_restarted_and_stop_ends_every_group(tmp_path):
    procfile = tmp_path / "Procfile"
    # `sleeper` starts a grandchild, as a worker starts its pool: stopping must end it too.
    procfile.write_text(
        f"sleeper: {sys.executable} -c \"import subprocess, sys, time; "
        f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open('{tmp_path}/child-' + str(c.pid), 'w'); print('up', flush=True); time.sleep(120)\"\n"
        f"other: {sys.executable} -c \"import time; time.sleep(120)\"\n")
    pids = tmp_path / "pids.json"
    out = io.StringIO()
    sup = Supervisor(read_procfile(procfile), env=dict(os.environ), cwd=tmp_path, pids_file=pids,
                     restart_delay_s=0.5, stop_grace_s=5, out=out)
    runner = threading.Thread(target=sup.run)
    runner.start()
    try:
        first = _wait(lambda: pids.exists() and json.loads(pids.read_text()).get("sleeper"), "the first start")
        _wait(lambda: len(json.loads(pids.read_text())) == 2, "both processes")
        _wait(lambda: len(list(tmp_path.glob("child-*"))) == 1, "the first sleeper's child")
        os.killpg(first, 9)  # the whole group, as the chaos run does
        second = _wait(lambda: (json.loads(pids.read_text()).get("sleeper") or first) != first
                       and json.loads(pids.read_text())["sleeper"], "the restart")
        assert alive(second) and not alive(first)
        assert "sleeper exited (code -9); restarting it in 0.5 s" in out.getvalue()
        other = json.loads(pids.read_text())["other"]
        _wait(lambda: len(list(tmp_path.glob("child-*"))) == 2, "the restarted process's child")
    finally:
        sup.stop()
        runner.join(timeout=30)
    children = [int(p.name.split("-")[1]) for p in tmp_path.glob("child-*")]
    # Every group had SIGKILL before stop returned; under load the kernel may take a moment to end them.
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in [second, other, *children]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in [second, other, *children])
    assert not pids.exists()


def test_a_crash_loop_stops_the_stack_and_says_which(tmp_path):
    procfile = tmp_path / "Procfile"
    procfile.write_text(f"broken: {sys.executable} -c \"raise SystemExit(3)\"\n"
                        f"fine: {sys.executable} -c \"import time; time.sleep(120)\"\n")
    out = io.StringIO()
    sup = Supervisor(read_procfile(procfile), env=dict(os.environ), cwd=tmp_path, restart_delay_s=0.1,
                     max_restarts=3, stop_grace_s=5, out=out)
    assert sup.run() == 1
    assert "broken exited (code 3) 4 times in a row, each within 60 s of its start; stopping everything" in out.getvalue()
    assert all(p.poll() is not None for p in sup.procs.values())


@pytest.mark.slow  # in `make test-all` (the default run stays a few minutes; docs/operating.md#tests-and-benchmarks)
def test_a_process_exiting_while_a_dependency_is_away_is_restarted_with_doubling_waits(tmp_path):
    """A process that exits at once six times (a database or the broker still away: more exits than
    the old limit of five a minute allowed) is restarted after 0.1, 0.2, 0.4 s and then every
    0.4 s, and the stack carries on once it stays up; after a run longer than ``healthy_after_s``
    its next restart waits the first delay again."""
    tries = tmp_path / "tries"
    procfile = tmp_path / "Procfile"
    procfile.write_text(f"flaky: {sys.executable} -c \"import sys, time; f = open('{tries}', 'a+'); f.seek(0); "
                        f"n = len(f.read()); f.write('x'); f.close(); sys.exit(3) if n < 6 else time.sleep(120)\"\n")
    out = io.StringIO()
    sup = Supervisor(read_procfile(procfile), env=dict(os.environ), cwd=tmp_path, restart_delay_s=0.1,
                     max_restart_delay_s=0.4, healthy_after_s=3.0, stop_grace_s=5, out=out)
    runner = threading.Thread(target=sup.run)
    runner.start()
    try:
        _wait(lambda: tries.exists() and len(tries.read_text()) == 7, "the seventh start")
        time.sleep(3.5)  # up for longer than healthy_after_s: the dependency is back
        lines = [line.split("| ", 1)[1] for line in out.getvalue().splitlines() if "restarting" in line]
        assert lines == ["flaky exited (code 3); restarting it in 0.1 s",
                         "flaky exited (code 3); restarting it in 0.2 s (2 exits in a row, each soon after its start)",
                         "flaky exited (code 3); restarting it in 0.4 s (3 exits in a row, each soon after its start)",
                         "flaky exited (code 3); restarting it in 0.4 s (4 exits in a row, each soon after its start)",
                         "flaky exited (code 3); restarting it in 0.4 s (5 exits in a row, each soon after its start)",
                         "flaky exited (code 3); restarting it in 0.4 s (6 exits in a row, each soon after its start)"]
        assert runner.is_alive() and sup.procs["flaky"].poll() is None  # the stack did not stop
        os.killpg(sup.procs["flaky"].pid, 9)  # a crash after a healthy run: the first delay again
        _wait(lambda: len(tries.read_text()) == 8, "the eighth start")
        assert "flaky exited (code -9); restarting it in 0.1 s\n" in out.getvalue()
    finally:
        sup.stop()
        runner.join(timeout=30)


def test_a_bad_procfile_line_is_named(tmp_path):
    procfile = tmp_path / "Procfile"
    procfile.write_text("web cbs web\n")
    with pytest.raises(ConfigError, match="is not 'name: command'"):
        read_procfile(procfile)


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_pids_file_that_cannot_be_written_stops_nothing(tmp_path):
    """The chaos run's full disk: ``cbs up`` raised out of its loop when a restart could not write
    the pids file, and nothing was supervised after. Here the file's folder is a plain file."""
    procfile = tmp_path / "Procfile"
    procfile.write_text(f"short: {sys.executable} -c \"import time; time.sleep(0.3)\"\n")
    (tmp_path / "up").write_text("not a folder")
    out = io.StringIO()
    sup = Supervisor(read_procfile(procfile), env=dict(os.environ), cwd=tmp_path, pids_file=tmp_path / "up" / "pids.json",
                     restart_delay_s=0.2, healthy_after_s=0.1, stop_grace_s=5, out=out)
    runner = threading.Thread(target=sup.run)
    runner.start()
    try:
        _wait(lambda: out.getvalue().count("short started") >= 3, "two restarts")
        assert runner.is_alive()
    finally:
        sup.stop()
        runner.join(timeout=30)
    assert f"could not write {tmp_path / 'up' / 'pids.json'}" in out.getvalue()
    assert "supervising on" in out.getvalue()
