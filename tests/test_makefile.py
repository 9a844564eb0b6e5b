"""The Makefile's GPU-host check: a CPU-only torch where nvidia-smi answers is an error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def make_cuda_torch(tmp_path: Path, *, gpu_host: bool) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if gpu_host:  # a stand-in nvidia-smi: the check only asks whether the command exists
        fake = bin_dir / "nvidia-smi"
        fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200'\n")
        fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    if not gpu_host:  # hide a real one, if this machine has it
        env["PATH"] = ":".join(p for p in env["PATH"].split(":") if not (Path(p) / "nvidia-smi").exists())
    # TORCH_CUDA_INSTALL=true: the test installs nothing (pip stands aside; torch stays as it is)
    return subprocess.run(["make", "-s", "--no-print-directory", "cuda-torch", f"PY={sys.executable}",
                           "TORCH_CUDA_INSTALL=true"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_cpu_only_torch_on_a_gpu_host_is_refused(tmp_path):
    import torch

    if torch.version.cuda:
        pytest.skip("this venv's torch is a CUDA build: nothing to refuse")
    refused = make_cuda_torch(tmp_path, gpu_host=True)
    assert refused.returncode != 0
    assert "has a CPU-only torch: installing torch==" in refused.stdout
    assert "still has a CPU-only torch on a GPU host; install a CUDA build" in refused.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_cpu_host_keeps_its_cpu_torch(tmp_path):
    ok = make_cuda_torch(tmp_path, gpu_host=False)
    assert ok.returncode == 0 and ok.stdout == ""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_venv_made_from_a_python3_that_is_itself_a_venv_sees_that_venvs_torch(tmp_path):
    """The GPU image's python3 is a venv holding torch: the checkout's venv must share that torch,
    not the base interpreter's packages (which have none, so make would download torch)."""
    outer = tmp_path / "outer"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(outer)], check=True, timeout=120)
    site = subprocess.run([str(outer / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "torch").mkdir()
    (Path(site) / "torch" / "__init__.py").write_text("__version__ = '2.11.0+cu130 (the outer venv)'\n")
    inner = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    made = subprocess.run(["make", "-s", "--no-print-directory", f"VENV={inner}", f"PYTHON={outer / 'bin' / 'python'}",
                           "VENV_FLAGS=--without-pip", str(inner / "bin" / "python")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    seen = subprocess.run([str(inner / "bin" / "python"), "-c", "import sys, torch; print(torch.__version__); "
                           "print(sys.prefix != sys.base_prefix)"], capture_output=True, text=True, env=env, timeout=60)
    assert seen.stdout.splitlines() == ["2.11.0+cu130 (the outer venv)", "True"], seen.stderr
