"""``benchmarks/gpu_check.sh``: the rehearsal on the CPU in a venv that holds only what the GPU image
has (torch, numpy, scipy), a part killed at its limit or a check cut short keeping the lines
already written, the dry run's budgets, and one clear line where no GPU can be used."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
DRIVER = ROOT / "benchmarks" / "gpu_check.py"
#: Packages the GPU image does not have (and the rehearsal venv must not either).
ABSENT_ON_THE_GPU_IMAGE = ("datasets", "pythonbible", "celery", "kombu", "mlflow", "optuna", "streamlit",
                           "huggingface_hub", "pandas", "pyarrow")
#: ... and what the rehearsal leaves out although the image has it: the parts must not need it.
NOT_IN_THE_REHEARSAL = ABSENT_ON_THE_GPU_IMAGE + ("tokenizers", "pytest", "tqdm", "cbslab")


def run(tmp_path: Path, *args: str, nvidia_smi: str | None) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    path = [p for p in os.environ["PATH"].split(":") if not (Path(p) / "nvidia-smi").exists()]
    if nvidia_smi is not None:  # a stand-in that lists what a GPU host would
        fake = bin_dir / "nvidia-smi"
        fake.write_text(f"#!/bin/sh\necho '{nvidia_smi}'\n")
        fake.chmod(0o755)
    env = {**os.environ, "PATH": ":".join([str(bin_dir), *path]), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


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


def test_the_python_part_alone_also_refuses_cleanly(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    out = subprocess.run([sys.executable, str(DRIVER), "--out", str(tmp_path / "x.jsonl")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and out.stdout.startswith("gpu_check: no CUDA GPU visible to torch here")
    assert out.stdout.count("\n") == 1 and "Traceback" not in out.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_the_dry_run_prints_every_parts_budget_and_a_total_within_8_minutes(tmp_path):
    out = run(tmp_path, "--dry-run", nvidia_smi=None)  # no GPU needed
    assert out.returncode == 0, out.stdout + out.stderr
    *parts, total = out.stdout.strip().splitlines()
    assert [int(line.split()[1]) for line in parts] == list(range(9))
    budgets = [float(line.split(" s  ")[0].split()[-1]) for line in parts]
    seconds = float(total.split(" = ")[1].split()[0])
    assert sum(budgets) < seconds <= 480 and "limit 480 s = 8 min" in total and "unmeasured" in total


def test_torch_logs_are_counted_per_part():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gpu_check import torch_logs
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    prefix = "V1202 01:12:29.164000 11559 torch/_dynamo/"
    text = "\n".join([
        f"{prefix}symbolic_convert.py:5124] [0/0] [__graph_breaks] Graph break in user code at /tmp/tl.py:5",
        f"{prefix}symbolic_convert.py:5124] [0/0] [__graph_breaks] Graph Break Reason: Encountered graph break",
        f"{prefix}guards.py:5396] [0/1] [__recompiles] Recompiling function f in /tmp/tl.py:2",
        f"{prefix}guards.py:5396] [0/1] [__recompiles]     triggered by the following guard failure(s):",
        f"{prefix}guards.py:5396] [0/1] [__recompiles]     - 0/0: tensor 'x' size mismatch at index 0. expected 3, actual 4",
        f"{prefix}symbolic_convert.py:5131] [0/1] [__graph_breaks] Graph break (user stack suppressed) in user code at /tmp/tl.py:5",
        "an ordinary line",
    ])
    counted = torch_logs(text)
    assert counted["recompiles"] == 1 and counted["graph_breaks"] == 2
    assert counted["recompile_reasons"] == ["Recompiling function f in /tmp/tl.py:2",
                                            "0/0: tensor 'x' size mismatch at index 0. expected 3, actual 4"]
    assert torch_logs("nothing") == {"recompiles": 0, "graph_breaks": 0, "recompile_reasons": [], "graph_break_sites": []}


def test_the_synthetic_store_is_one_prepare_accepts_without_building(tmp_path, monkeypatch):
    import numpy as np

    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    sys.path.insert(0, str(ROOT))
    from benchmarks.synthetic_store import VOCAB_SIZE, write_store
    from cbscore.data import prepare

    store = prepare(write_store(train_tokens=50_000, val_tokens=5_000))
    assert not store.built and store.vocab_size == VOCAB_SIZE == 50_304 and store.eot_id == 50_303
    ids = np.asarray(store.tokens("train"), dtype=np.int64)
    assert ids.dtype == np.int64 and len(ids) == 50_000 and ids.max() == 50_303
    step = (ids[1:] - ids[:-1]) % (VOCAB_SIZE - 1)
    inside = (ids[1:] != 50_303) & (ids[:-1] != 50_303)
    assert step[inside].min() >= 1 and step[inside].max() <= 16  # a learnable next token
    assert store.val_windows(512, max_windows=4).shape == (4, 513)


def _driver(tmp_path: Path, *args: str, python: str = sys.executable, env: dict | None = None, **popen):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "COV_"))}
    env = {**base, "PYTHONPATH": str(ROOT), "PYTHONNOUSERSITE": "1", **(env or {})}
    return subprocess.Popen([python, str(DRIVER), "--cpu-smoke", "--out", str(tmp_path / "check.jsonl"),
                             "--home", str(tmp_path / "home"), *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **popen)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _parts_running(tmp_path: Path) -> list[int]:
    """Pids of part processes writing under ``tmp_path``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"gpu_check_parts.py" in cmdline and str(tmp_path).encode() in cmdline and _alive(int(entry)):
            found.append(int(entry))
    return found


def test_a_part_killed_at_its_time_limit_leaves_the_earlier_parts_lines(tmp_path):
    # part 7 gets one second: it is killed while importing torch; part 0 had ended before it
    proc = _driver(tmp_path, "--parts", "0,7", "--budget", "7=1")
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 1, out
    first, killed, summary = lines(tmp_path / "check.jsonl")
    assert first["part"] == 0 and first["status"] == "ok" and first["figures"]["versions"]["torch"]
    assert killed["part"] == 7 and killed["status"] == "timeout" and 1.0 <= killed["limit_s"] <= 1.5
    assert killed["seconds"] < 10 and killed["returncode"] is None
    assert summary["summary"] and summary["failed_parts"] == [7] and summary["parts"] == {"0": "ok", "7": "timeout"}
    assert "part 7 DDP one rank: timeout" in out and not _parts_running(tmp_path)


def test_a_check_cut_short_keeps_what_it_measured_and_leaves_no_part_running(tmp_path):
    """SIGTERM (the shell's 8-minute ``timeout``) in the middle of part 1: part 0's line stays, part 1
    is killed and recorded as cut, and the summary is written."""
    proc = _driver(tmp_path, "--parts", "0,1,2")
    journal = tmp_path / "check.jsonl"
    deadline = time.monotonic() + 120
    while not (journal.exists() and journal.read_text().count("\n") >= 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    while not _parts_running(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _parts_running(tmp_path), "part 1 never started"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 124, out
    first, cut, summary = lines(journal)
    assert first["part"] == 0 and first["status"] == "ok"
    assert cut["part"] == 1 and cut["status"] == "cut"
    assert summary["summary"] and summary["failed_parts"] == [1] and "2" not in summary["parts"]
    time.sleep(0.5)
    assert not _parts_running(tmp_path)


def test_the_parts_import_nothing_the_gpu_image_lacks(tmp_path):
    """One part (a real trial on the synthetic store) with the packages the GPU image lacks made
    unimportable: it runs, and none of them (nor tokenizers or pytest) is loaded. The rehearsal
    below proves the same for every part in a bare venv, where one can be built."""
    blocker = f"""
import json, sys
ABSENT = {NOT_IN_THE_REHEARSAL!r}
for name in ABSENT:  # None in sys.modules: `import name` raises ImportError, find_spec(name) is None
    sys.modules[name] = None
sys.path.insert(0, {str(ROOT)!r})
from benchmarks.gpu_check_parts import main
code = main(["6", "--mode", "cpu-smoke", "--result", {str(tmp_path / "part.json")!r}])
print(json.dumps(sorted({{m.split(".")[0] for m, v in sys.modules.items() if v is not None}} & set(ABSENT))))
sys.exit(code)
"""
    env = {**os.environ, "CBS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", blocker], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    result = json.loads((tmp_path / "part.json").read_text())
    assert result["done"] and result["checks"] == {"halved": True, "same_update": True}


# ---------------------------------------------------------------------------------- the rehearsal
def rehearsal_venv() -> Path:
    """A venv of torch, numpy and scipy at this environment's versions (and torch's own
    requirements), without system site-packages; built once under ``.cache/`` and reused. Skips
    the test, saying why, where it cannot be built (no package index, no wheel)."""
    import numpy
    import scipy
    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__.split("+")[0],
                "numpy": numpy.__version__, "scipy": scipy.__version__}
    key = hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:12]
    venv = ROOT / ".cache" / "gpu-check-venv" / key
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{key}.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another test session building it: wait, then reuse
        if (venv / ".complete").exists():
            return venv
        shutil.rmtree(venv, ignore_errors=True)  # a build cut short
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
            # pip's own configuration says where packages come from (a wheel folder, an index)
            pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                  "--disable-pip-version-check",
                                  *(f"{name}=={version}" for name, version in versions.items() if name != "python")],
                                 capture_output=True, text=True, timeout=900)
        except (subprocess.SubprocessError, OSError) as exc:
            shutil.rmtree(venv, ignore_errors=True)
            pytest.skip(f"cannot build the rehearsal venv (torch, numpy, scipy): {exc}")
        if pip.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            tail = [x for x in pip.stderr.splitlines() if not x.startswith("WARNING: Location")][-3:]
            pytest.skip(f"cannot install torch, numpy and scipy into the rehearsal venv (offline?): {' / '.join(tail)}")
        (venv / ".complete").write_text(json.dumps(versions) + "\n")
    return venv


@pytest.mark.slow  # in `make test-all` (the default run stays a few minutes; docs/operating.md#tests-and-benchmarks)
def test_the_cpu_rehearsal_runs_every_part_in_a_venv_of_torch_numpy_and_scipy_only(tmp_path):
    venv = rehearsal_venv()
    python = str(venv / "bin" / "python")
    present = subprocess.run([python, "-c", "import importlib.util as u, json; "
                              f"print(json.dumps([m for m in {NOT_IN_THE_REHEARSAL!r} if u.find_spec(m)]))"],
                             capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]}, cwd=tmp_path)
    assert json.loads(present.stdout) == [], present.stderr
    proc = _driver(tmp_path, python=python)
    out, _ = proc.communicate(timeout=600)
    journal = lines(tmp_path / "check.jsonl")
    assert proc.returncode == 0, out
    *parts, summary = journal
    assert [p["part"] for p in parts] == list(range(9)) and all(p["status"] == "ok" for p in parts), out
    assert summary["summary"] and summary["failed_parts"] == [] and summary["meets_goal"] is None
    assert parts[0]["figures"]["versions"]["torch"].startswith(json.loads((venv / ".complete").read_text())["torch"])
    # the figures the GPU run is for are there, in the CPU's units
    assert parts[1]["figures"]["compiled"]["tokens_per_s"] > 0 and parts[1]["figures"]["compiled"]["gns"]["gns_g2"] is not None
    assert parts[6]["figures"]["forced_one_pass"]["micro_batch_size"] == 4
    assert parts[8]["figures"]["resume"]["resumed_from_step"] == 3
    assert out.strip().splitlines()[-1].startswith("gpu_check: summary: MFU 85M compiled unmeasured")
