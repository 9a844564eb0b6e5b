"""Stopping a process a test started in its own session (``start_new_session=True``): by its
process group, never by name."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = 15) -> None:
    """Send ``sig`` to ``proc``'s process group (its pgid is its pid), wait up to ``grace_s`` and
    SIGKILL the group if ``proc`` is still there."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace_s)
