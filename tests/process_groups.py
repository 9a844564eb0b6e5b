"""Stopping a server a test started in its own session (``start_new_session=True``): by its
process group, never by name."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGTERM ``proc``'s process group, wait up to ``grace_s`` and SIGKILL it if still there."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace_s)
