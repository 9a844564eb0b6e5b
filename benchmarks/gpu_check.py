"""The GPU check behind ``benchmarks/gpu_check.sh``: one JSON object on stdout (README, "GPU check").

Parts, each with its own time budget inside the script's 8 minutes (a part that would not fit
is reported as skipped, never left half-run):

1. ``throughput``: the real trainer (``cbscore.train.train``: AdamW, clipping, weight averages,
   the data stream; evaluation and the first step off the clock) on the 85M and 151M presets at
   T = 512 in bf16, eager and compiled, at B = 256 with the micro-batch chosen from memory;
   tokens/s and MFU per device against the exact device's dense bf16 peak.
2. ``pytest_gpu``: ``pytest -m gpu`` (the tests that need CUDA).
3. ``worker_trial``: one real trial through ``cbs worker --gpu 0`` on the filesystem broker, from
   ``workers.api.launch_study`` to its MLflow run (outcome, tokens/s, MFU).
4. ``ddp``: where two GPUs are visible, the 85M preset on 2 ranks (NCCL) against 1, at the same
   global batch: tokens/s in total and per device, and the largest difference of the logged losses.

Installs nothing. Without a usable GPU it prints one line and exits 2.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = float(os.environ.get("CBS_GPU_CHECK_BUDGET_S", "450"))  # the shell's timeout is 480 s
STARTED = time.monotonic()


def left_s() -> float:
    return BUDGET_S - (time.monotonic() - STARTED)


def guarded(name: str, need_s: float, fn) -> dict:
    """Run one part; its figures, or why it did not run or failed (the traceback's last line)."""
    if left_s() < need_s:
        return {"skipped": f"{left_s():.0f} s left of the budget, the part needs about {need_s:.0f} s"}
    t0 = time.monotonic()
    # a part that runs past the budget is interrupted (the summary is still printed)
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.alarm(max(1, int(left_s())))
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - a check reports every failure and goes on to the next part
        out = {"error": f"{type(exc).__name__}: {exc}"[:500],
               "where": traceback.format_exc().strip().splitlines()[-3:]}
    finally:
        signal.alarm(0)
        _free_gpu_memory()
    out["seconds"] = round(time.monotonic() - t0, 1)
    print(f"gpu_check: {name} done in {out['seconds']} s", file=sys.stderr, flush=True)
    return out


def _out_of_time(signum, frame):
    raise TimeoutError(f"the check's {BUDGET_S:.0f} s budget ran out in this part")


def _free_gpu_memory() -> None:
    """Hand the cached blocks of the last part back, so the next one sees the device's memory."""
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()


def throughput(model: str, compile_model: bool, devices: int = 1, steps: int = 12) -> dict:
    import torch

    from cbscore.data import DataConfig
    from cbscore.train import train
    from cbscore.train_config import TrainConfig

    batch = 256 * devices  # the paper's B_ref per device
    config = TrainConfig(
        model=model, batch_size=batch, context_tokens=512, max_tokens=batch * 512 * steps, lr=1e-3,
        ewa_taus=(0.999,), eval_windows=8, eval_every_steps=10**9, log_every_steps=4, data=DataConfig(),
        device="cuda", compile=compile_model, devices=devices, allow_repeat=True,
    )
    result = train(config)
    return {
        "model": model, "compile": compile_model, "devices": devices, "batch_size": batch, "context_tokens": 512,
        "micro_batch_size": result.micro_batch_size, "steps": result.steps,
        "tokens_per_s": result.tokens_per_s,
        "tokens_per_s_per_device": None if result.tokens_per_s is None else result.tokens_per_s / devices,
        "mfu": result.mfu, "flops_per_token": result.flops_per_token,
        "peak_memory_gib": round(result.peak_memory_bytes / 2**30, 2), "device": result.device,
        "train_log": [v for _, v in result.train_log], "torch": torch.__version__,
    }


def pytest_gpu() -> dict:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=ROOT, capture_output=True, text=True, timeout=max(30, left_s() - 200))
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {word.rstrip("s"): int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", tail)}
    return {"returncode": proc.returncode, "summary": tail, **counts}


def worker_trial(store_dir: str) -> dict:
    """``cbs worker --gpu 0`` on a fresh filesystem broker and tracking store; one reference trial
    on the built-in token store prepared before (``store_dir``)."""
    home = Path(tempfile.mkdtemp(prefix="cbs-gpu-check-"))
    env = {**os.environ, "CBS_HOME": str(home), "CBS_TRACKING_URI": f"sqlite:///{home / 'mlflow.db'}",
           "CBS_HEARTBEAT_S": "2", "CBS_STALE_AFTER_S": "120", "MLFLOW_DISABLE_TELEMETRY": "true",
           "CBS_TRIAL_QUEUE": "gpu"}  # the gpu queue even before the worker's presence is seen
    for key in ("CBS_BROKER_URL", "CBS_OPTUNA_STORAGE", "CBS_LEDGER_URL", "MLFLOW_TRACKING_URI"):
        env.pop(key, None)
    os.environ.update(env)
    for key in ("CBS_BROKER_URL", "CBS_OPTUNA_STORAGE", "CBS_LEDGER_URL", "MLFLOW_TRACKING_URI"):
        os.environ.pop(key, None)
    from workers import api
    from workers.celery_app import reconfigure
    from workers.tracking import prepare_store

    reconfigure()
    prepare_store(env["CBS_TRACKING_URI"])
    log = open(home / "worker.log", "w")
    cbs = str(Path(sys.executable).parent / "cbs")
    worker = subprocess.Popen([cbs, "worker", "--gpu", "0"], cwd=ROOT, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        name = f"gpu-check-{int(time.time())}"
        spec = {"name": name, "kind": "custom", "settings": [{"model": "tiny-6.3M", "tokens": 4_000_000}],
                "batch_sizes": [64], "b_ref": 64, "context_tokens": 256, "search": {"kind": "grid", "lrs": [0.004]},
                "eval_windows": 64, "data": {"source": "builtin", "store_dir": store_dir}}
        api.launch_study(spec)
        deadline = time.monotonic() + max(30, left_s() - 40)
        while time.monotonic() < deadline and api.study_status(name).status != "done":
            time.sleep(2)
        [record] = api.study_records(name)
        curve = api.trial_curve(record.run_id) if record.run_id else {}

        def last(key):
            values = curve.get(key, ((), ()))[1]
            return values[-1] if values else None
        return {"status": record.status, "steps": record.last_step, "tokens": record.tokens,
                "final_eval_loss": record.final_eval_loss, "tokens_per_s": last("perf/tokens_per_s"),
                "mfu": last("perf/mfu"), "worker_log_tail": (home / "worker.log").read_text()[-800:].splitlines()[-5:]}
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        log.close()


def ddp() -> dict:
    import torch

    if torch.cuda.device_count() < 2:
        return {"skipped": f"{torch.cuda.device_count()} GPU visible; the 2-rank check needs 2"}
    one = throughput("85M", False, devices=1)
    two = throughput("85M", False, devices=2)
    # the same global batch is 256 per device: compare 2 ranks at B = 512 with one device at B = 512
    one_512 = throughput_at("85M", 512)
    diff = max(abs(a - b) for a, b in zip(two["train_log"], one_512["train_log"]))
    return {"devices": 2, "tokens_per_s": two["tokens_per_s"], "tokens_per_s_per_device": two["tokens_per_s_per_device"],
            "mfu": two["mfu"], "one_device_tokens_per_s": one["tokens_per_s"],
            "scaling_efficiency": two["tokens_per_s"] / (2 * one["tokens_per_s"]),
            "max_train_loss_difference_vs_one_device": diff}


def throughput_at(model: str, batch: int) -> dict:
    """One device at global batch ``batch`` (gradient accumulation), eager: the DDP run's twin."""
    from cbscore.data import DataConfig
    from cbscore.train import train
    from cbscore.train_config import TrainConfig

    result = train(TrainConfig(model=model, batch_size=batch, context_tokens=512, max_tokens=batch * 512 * 12,
                               lr=1e-3, ewa_taus=(0.999,), eval_windows=8, eval_every_steps=10**9, log_every_steps=4,
                               data=DataConfig(), device="cuda", compile=False, allow_repeat=True))
    return {"train_log": [v for _, v in result.train_log]}


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU visible to torch here: nothing to check (needs a GPU and a CUDA build of torch)")
        return 2
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))
    from cbscore.data import DataConfig, prepare
    from cbscore.throughput import peak_flops

    t0 = time.monotonic()
    store = prepare(DataConfig())  # the built-in store, once (a no-op when it is there)
    summary: dict = {
        "host": {"gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
                 "torch": torch.__version__, "cuda": torch.version.cuda,
                 "peak_bf16_flops": peak_flops(torch.device("cuda", 0))},
        "data_prepare_seconds": round(time.monotonic() - t0, 1),
        "throughput": [],
    }
    for model, compile_model, need in (("85M", False, 25), ("151M", False, 30), ("85M", True, 90), ("151M", True, 100)):
        part = guarded(f"throughput {model} compile={compile_model}", need, lambda: throughput(model, compile_model))
        part.pop("train_log", None)
        summary["throughput"].append({"model": model, "compile": compile_model, **part})
    summary["pytest_gpu"] = guarded("pytest -m gpu", 60, pytest_gpu)
    summary["worker_trial"] = guarded("worker trial", 90, lambda: worker_trial(str(store.path)))
    summary["ddp"] = guarded("ddp", 60, ddp)
    summary["seconds"] = round(time.monotonic() - STARTED, 1)
    figures = [p for p in summary["throughput"] if p.get("tokens_per_s")]
    summary["ok"] = (len(figures) == 4 and summary["pytest_gpu"].get("returncode") == 0
                     and summary["worker_trial"].get("status") in ("finished", "reached")
                     and "error" not in summary["ddp"])
    print(json.dumps(summary, indent=2))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
