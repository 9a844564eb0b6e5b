"""Every committed ``docs/results/**/steps.csv`` refits byte for byte to its committed fit (issue 43).

Each such folder's ``summary.json`` names the command that refits it (``refit``, written by
``cbs study report``); run in the folder, it prints ``fit.json``, and without ``--json`` ``fit.txt``.
``reproduce/fit-trials.txt`` is the same fit of ``trials.csv`` (its README).

The last digits of ``fit.json`` depend on the CPU kernels OpenBLAS picks at load time (numpy's and
scipy's least squares): the committed fits were made on AVX2 hosts (OpenBLAS core ``Haswell``), and an
AVX-512 host (core ``SkylakeX``) gives the same keys and values to within 1.4e-7 relative (bootstrap
interval ends), ``fit.txt`` unchanged. So the refit runs with ``OPENBLAS_CORETYPE=Haswell`` in a child
process (the variable is read when numpy loads); docs/results.md, "Refits".
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
#: OpenBLAS's AVX2 kernels: the ones the committed fits were made with (any x86-64 CPU with AVX2 runs them).
CORETYPE = "Haswell"
#: Runs each command line (a JSON list of argv lists) through ``cbs.main`` in one process; prints their outputs.
_CHILD = """
import contextlib, io, json, sys
from cbs import main
outs = []
for argv in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0, argv
    outs.append(buf.getvalue())
sys.stdout.write(json.dumps(outs))
"""


def _folders() -> list[Path]:
    return sorted(p.parent for p in RESULTS.rglob("steps.csv"))


def _blas_pinnable() -> str | None:
    """Why the kernel pin cannot hold here, or None where it does."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"OpenBLAS's {CORETYPE} kernels are x86-64 ({platform.machine()} here)"
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    if " avx2" not in flags:
        return "this CPU has no AVX2 (or /proc/cpuinfo is unreadable): OpenBLAS cannot run its Haswell kernels"
    import numpy as np

    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    if "openblas" not in blas.lower():
        return f"numpy is built on {blas!r}, not OpenBLAS: the committed digits are OpenBLAS's"
    return None


def _refit(folder: Path, commands: list[list[str]]) -> list[str]:
    env = {**os.environ, "OPENBLAS_CORETYPE": CORETYPE, "OPENBLAS_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(RESULTS.parents[1]), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(commands)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _argv(refit: str, folder: Path) -> list[str]:
    argv = shlex.split(refit)
    assert argv[:3] == ["cbs", "fit", "steps.csv"] and argv[-1] == "--json", (
        f"{folder}/summary.json: refit {refit!r} is not `cbs fit steps.csv ... --json`")
    return argv[1:-1]


def test_every_steps_table_has_a_fit_and_its_refit_command():
    folders = _folders()
    assert len(folders) >= 15
    for folder in folders:
        for name in ("fit.json", "fit.txt", "summary.json"):
            assert (folder / name).is_file(), f"{folder.relative_to(RESULTS)} has steps.csv but no {name}"
        _argv(json.loads((folder / "summary.json").read_text())["refit"], folder)


@pytest.mark.parametrize("folder", _folders(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_committed_steps_table_refits_to_its_committed_fit(folder):
    if why := _blas_pinnable():
        pytest.skip(why)
    argv = _argv(json.loads((folder / "summary.json").read_text())["refit"], folder)
    commands = [[*argv, "--json"], argv]
    if folder.name == "reproduce":  # its README: fit-trials.txt is the fit of trials.csv (rates known)
        commands.append(["fit", "trials.csv", *argv[2:]])
    outputs = _refit(folder, commands)
    redo = f"(cd {folder.relative_to(RESULTS.parents[1])} && OPENBLAS_CORETYPE={CORETYPE} cbs {shlex.join(argv)} [--json])"
    assert outputs[0] == (folder / "fit.json").read_text(), f"fit.json is not its refit; if the analysis changed: {redo}"
    assert outputs[1] == (folder / "fit.txt").read_text(), f"fit.txt is not its refit; if the analysis changed: {redo}"
    if len(outputs) == 3:
        assert outputs[2] == (folder / "fit-trials.txt").read_text()
