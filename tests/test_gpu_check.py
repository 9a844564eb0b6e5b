"""``benchmarks/gpu_check.sh`` where no GPU can be used: one clear line, exit 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def run(tmp_path: Path, *, nvidia_smi: str | None) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    path = [p for p in os.environ["PATH"].split(":") if not (Path(p) / "nvidia-smi").exists()]
    if nvidia_smi is not None:  # a stand-in that lists what a GPU host would
        fake = bin_dir / "nvidia-smi"
        fake.write_text(f"#!/bin/sh\necho '{nvidia_smi}'\n")
        fake.chmod(0o755)
    env = {**os.environ, "PATH": ":".join([str(bin_dir), *path]), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_without_nvidia_smi_it_says_so_in_one_line(tmp_path):
    out = run(tmp_path, nvidia_smi=None)
    assert out.returncode == 2
    assert out.stdout == "gpu_check: no NVIDIA GPU visible (nvidia-smi is missing or lists none): nothing to check\n"
    assert "Traceback" not in out.stderr


def test_a_gpu_that_torch_cannot_use_is_one_line_too(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    out = run(tmp_path, nvidia_smi="GPU 0: NVIDIA H200 (UUID: GPU-0)")
    assert out.returncode == 2 and out.stdout.count("\n") == 1
    assert "torch cannot use it (a CPU-only build? run make" in out.stdout and "Traceback" not in out.stderr


def test_the_python_part_alone_also_refuses_cleanly():
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and out.stdout.startswith("gpu_check: no CUDA GPU visible to torch here")
    assert "Traceback" not in out.stderr
