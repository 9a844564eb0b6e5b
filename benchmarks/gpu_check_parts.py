"""The parts of the GPU check, one per process (``benchmarks/gpu_check.py`` starts them):

    python benchmarks/gpu_check_parts.py PART --mode gpu|cpu-smoke --result FILE

A part writes its figures to ``FILE`` (JSON, replaced atomically) as it measures them, so a part
killed at its time limit still leaves what it had; ``"done": true`` marks one that ended. It
exits 0 when every check passed, 1 otherwise. It imports torch, numpy and cbscore (through
``PYTHONPATH``) and nothing else: the GPU image has no datasets, mlflow, celery or streamlit,
which ``tests/test_gpu_check.py`` holds it to.

``--mode cpu-smoke`` is the rehearsal: the same parts on tiny presets, a few steps each, on the
CPU, with a synthetic store of 2,048 ids (the GPU's has 50,304; the same format); ``torch.compile``
there uses Dynamo's ``eager`` backend (the model is traced, and recompiles and graph breaks are
logged, without building C++ kernels), and the out-of-memory part raises the error from a hook,
as a device too small would.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Scale:
    """What a part trains in one mode: models, shapes, steps, device."""

    device: str
    models: dict
    """The check's names (85M, 151M, 1.2B, small) → the presets trained."""
    context: int
    batch: int
    large_batch: int
    steps: int
    eval_windows: int
    log_every: int
    gns_split: int | None
    """Passes that measure the noise scale where the micro-batch is the whole batch (a CPU)."""
    threads: int | None
    lr: float
    vocab_size: int
    train_tokens: int
    val_tokens: int


GPU = Scale(device="cuda", models={"85M": "85M", "151M": "151M", "1.2B": "1.2B", "small": "tiny-3.1M"},
            context=512, batch=256, large_batch=128, steps=30, eval_windows=16, log_every=5, gns_split=None,
            threads=None, lr=1e-3, vocab_size=50_304, train_tokens=8_000_000, val_tokens=200_000)
SMOKE = Scale(device="cpu", models={"85M": "tiny-0.1M", "151M": "tiny-0.1M", "1.2B": "tiny-0.3M", "small": "tiny-0.1M"},
              context=32, batch=8, large_batch=8, steps=6, eval_windows=4, log_every=2, gns_split=4,
              threads=1, lr=1e-2, vocab_size=2_048, train_tokens=200_000, val_tokens=20_000)
SCALES = {"gpu": GPU, "cpu-smoke": SMOKE}


class Report:
    """The part's figures and checks, rewritten to the result file at every change."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.data: dict = {"figures": {}, "checks": {}, "done": False}
        self.flush()

    def set(self, key: str, value) -> None:
        self.data["figures"][key] = value
        self.flush()

    def check(self, name: str, ok: bool) -> None:
        self.data["checks"][name] = bool(ok)
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, default=_plain))
        os.replace(tmp, self.path)


def _plain(value):
    """JSON for numpy and torch scalars; ``None`` for what is not finite."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return value if math.isfinite(value) else None


def _round(value, digits: int = 4):
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


# ---------------------------------------------------------------------------------- helpers
def _free() -> None:
    """Hand the last run's memory back (the next run's peak and micro-batch see all of it)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _progress_callback(report: Report, key: str):
    """A trainer callback: the first step's seconds (compilation) and each log step's figures,
    written as they come (a part cut short keeps them)."""
    from cbscore.train.callbacks import Callback

    class Progress(Callback):
        def __init__(self):
            self.live: dict = {}
            self.last: dict = {}

        def post_step(self, state, metrics):
            if state.step - (state.resumed_from_step or 0) == 1:
                self.live["first_step_s"] = _round(state.train_seconds, 3)
            if metrics is not None:
                self.last = metrics
                self.live.update(step=state.step, train_loss=_round(metrics["train_loss"]),
                                 tokens_per_s=_round(metrics["tokens_per_s"], 1), mfu=_round(metrics["mfu"]),
                                 micro_batch_size=state.micro_batch_size)
            if metrics is not None or state.step == 1:
                report.set(key, dict(self.live, running=True))

    return Progress()


def _estimate_bytes(model: str, context: int, micro: int, n_taus: int, vocab: int) -> int:
    """The trainer's memory estimate of a trial (:mod:`cbscore.train.micro_batch`): static bytes per
    parameter and the activations of one micro-batch."""
    import torch

    from cbscore.model.config import get_preset
    from cbscore.model.gpt import GPT
    from cbscore.train.micro_batch import activation_bytes_per_sequence, static_bytes

    config = get_preset(model).config(vocab_size=vocab, context_tokens=context)
    with torch.device("meta"):
        n_total = GPT(config).n_params_total
    return static_bytes(n_total, n_taus) + micro * activation_bytes_per_sequence(config, context)


def trial(scale: Scale, report: Report, key: str, data, *, model: str, batch: int, steps: int, compile: bool,
          callbacks=(), **changes) -> tuple[dict, object]:
    """Train one trial of ``model`` and report its figures under ``key``; returns them and the result."""
    import torch

    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train

    preset = scale.models.get(model, model)
    settings = dict(model=preset, batch_size=batch, context_tokens=scale.context,
                    max_tokens=batch * scale.context * steps, lr=scale.lr, eval_windows=scale.eval_windows,
                    eval_every_steps=10**9, log_every_steps=scale.log_every, data=data, device=scale.device,
                    compile=compile, allow_repeat=True, threads=scale.threads, gns_micro_batch_size=scale.gns_split)
    config = TrainConfig(**{**settings, **changes})
    progress = _progress_callback(report, key)
    result = train(config, callbacks=[progress, *callbacks])
    gns = {k: _round(v, 6) for k, v in progress.last.items() if k.startswith("gns_")}
    figures = {
        "model": preset, "compile": compile, "batch_size": batch, "context_tokens": scale.context,
        "micro_batch_size": result.micro_batch_size, "steps": result.steps,
        "first_step_s": progress.live.get("first_step_s"),
        "tokens_per_s": _round(result.tokens_per_s, 1), "mfu": _round(result.mfu),
        "train_seconds": _round(result.train_seconds, 2),
        "train_loss_first": _round(result.train_log[0][1]) if result.train_log else None,
        "train_loss_last": _round(result.train_log[-1][1]) if result.train_log else None,
        "gns": gns,
        "peak_allocated_gib": _round(result.peak_memory_bytes / 2**30, 2),
    }
    if scale.device == "cuda":
        figures["peak_reserved_gib"] = _round(torch.cuda.max_memory_reserved() / 2**30, 2)
        estimate = _estimate_bytes(preset, scale.context, result.micro_batch_size, len(result.ewa_taus),
                                   data.vocab_size)
        figures["estimate_gib"] = _round(estimate / 2**30, 2)
        figures["peak_over_estimate"] = _round(result.peak_memory_bytes / estimate, 3)
    report.set(key, figures)
    return figures, result


def _losses(result) -> list[float]:
    return [v for _, v in result.train_log]


def _max_difference(a: list[float], b: list[float]) -> float | None:
    if len(a) != len(b) or not a:
        return None
    return max(abs(x - y) for x, y in zip(a, b))


# ---------------------------------------------------------------------------------- the parts
def part_environment(scale: Scale, report: Report, data) -> None:
    """0: versions, the device, the peak used for MFU, free memory, a large bf16 matmul."""
    import numpy
    import torch

    from cbscore.train.averaging import _has_lerp_scalar_list
    from cbscore.train.distributed import buffer_sync_keyword
    from cbscore.train.throughput import peak_flops

    figures = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
               "numpy": numpy.__version__, "ddp_buffer_keyword": buffer_sync_keyword(),
               "foreach_lerp_scalar_list": _has_lerp_scalar_list(), "store_vocab_size": data.vocab_size}
    with contextlib.suppress(ImportError):
        import scipy

        figures["scipy"] = scipy.__version__
    try:
        import triton

        figures["triton"] = triton.__version__
    except ImportError:
        figures["triton"] = None
    report.set("versions", figures)
    if scale.device == "cuda":
        device = torch.device("cuda", 0)
        free, total = torch.cuda.mem_get_info(device)
        report.set("device", {"name": torch.cuda.get_device_name(device),
                              "capability": list(torch.cuda.get_device_capability(device)),
                              "count": torch.cuda.device_count(), "peak_bf16_flops": peak_flops(device),
                              "free_gib": round(free / 2**30, 2), "total_gib": round(total / 2**30, 2)})
        n, dtype = 8192, torch.bfloat16
    else:
        device, n, dtype = torch.device("cpu"), 256, torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):  # warm-up: cuBLAS handles and heuristics
        c = a @ b
    sync = torch.cuda.synchronize if scale.device == "cuda" else (lambda: None)
    sync()
    repeats = 50 if scale.device == "cuda" else 3  # 50 × 1.1 TFLOP: ~0.1 s on an H200
    t0 = time.perf_counter()
    for _ in range(repeats):
        c = a @ b
    sync()
    seconds = time.perf_counter() - t0
    report.set("matmul", {"n": n, "dtype": str(dtype).removeprefix("torch."),
                          "tflops": round(2 * n**3 * repeats / seconds / 1e12, 2)})
    report.check("matmul_finite", bool(torch.isfinite(c.float()).all()))
    if scale.device == "cuda":
        report.check("peak_known", report.data["figures"]["device"]["peak_bf16_flops"] is not None)


def _check_trial(report: Report, name: str, figures: dict, *, gns: bool) -> None:
    report.check(f"{name}_loss_finite_and_falls", figures["train_loss_last"] is not None
                 and figures["train_loss_first"] is not None and figures["train_loss_last"] < figures["train_loss_first"])
    report.check(f"{name}_tokens_per_s", bool(figures["tokens_per_s"]))
    if gns:
        report.check(f"{name}_gns_finite", figures["gns"].get("gns_g2") is not None
                     and figures["gns"].get("gns_trace_sigma") is not None)


def part_85m(scale: Scale, report: Report, data, *, compile: bool) -> None:
    """1 and 2: 85M at B = 256, three τ, GNS on, automatic micro-batch; compiled (1) or eager (2)."""
    name = "compiled" if compile else "eager"
    figures, _ = trial(scale, report, name, data, model="85M", batch=scale.batch,
                       steps=scale.steps if compile else scale.steps * 2 // 3, compile=compile)
    _check_trial(report, name, figures, gns=True)


def part_151m(scale: Scale, report: Report, data) -> None:
    """3: 151M at B = 256, compiled, then eager."""
    for compile in (True, False):
        name = "compiled" if compile else "eager"
        figures, _ = trial(scale, report, name, data, model="151M", batch=scale.batch,
                           steps=scale.steps * 2 // 3, compile=compile)
        _check_trial(report, name, figures, gns=True)
        _free()


def part_gns_overhead(scale: Scale, report: Report, data) -> None:
    """4: the probe's cost at a forced split (85M, eager, four passes a step), off and on twice
    each; and a batch of 64 with the automatic micro-batch measures the noise scale too."""
    split = scale.batch // 4
    rates: dict[str, list[float]] = {"off": [], "on": []}
    for i, probe in enumerate(("off", "on", "off", "on")):
        figures, _ = trial(scale, report, f"{probe}_{i // 2}", data, model="85M", batch=scale.batch,
                           steps=max(scale.steps // 3, 3), compile=False, gns_micro_batch_size=split,
                           measure_gns=probe == "on")
        rates[probe].append(figures["tokens_per_s"] or math.nan)
        _free()
    off, on = (sum(r) / len(r) for r in (rates["off"], rates["on"]))
    report.set("overhead", {"split": split, "tokens_per_s_off": _round(off, 1), "tokens_per_s_on": _round(on, 1),
                            "overhead_fraction": _round(1 - on / off)})
    report.check("overhead_measured", math.isfinite(off) and math.isfinite(on))
    small = min(64, scale.batch)
    figures, _ = trial(scale, report, f"automatic_b{small}", data, model="85M", batch=small,
                       steps=max(scale.steps // 3, 3), compile=False)
    report.check("small_batch_measures_gns", figures["gns"].get("gns_g2") is not None)


def part_large(scale: Scale, report: Report, data) -> None:
    """5: 1.2B eager at B = 128, a few steps: the micro-batch chosen, the peak against the estimate."""
    figures, _ = trial(scale, report, "eager", data, model="1.2B", batch=scale.large_batch,
                       steps=max(scale.steps // 6, 3), compile=False, log_every_steps=1, measure_gns=False)
    report.check("loss_finite", figures["train_loss_last"] is not None)


def _refuse_passes_above(sequences: int):
    """A callback whose hook raises the out-of-memory error on a training pass of more than
    ``sequences`` sequences (the CPU rehearsal's device that is too small)."""
    import torch

    from cbscore.train.callbacks import Callback

    class TooSmall(Callback):
        def pre_train(self, state):
            def hook(module, args):
                if torch.is_grad_enabled() and args[0].shape[0] > sequences:
                    raise torch.OutOfMemoryError(f"out of memory (a pass of {args[0].shape[0]} sequences)")

            state.model.register_forward_pre_hook(hook)

    return TooSmall()


def part_out_of_memory(scale: Scale, report: Report, data) -> None:
    """6: a forced micro-batch that cannot fit halves and finishes the step with the update of a
    run at the halved micro-batch. On a GPU the allocator is capped (``set_per_process_memory_
    fraction``) at the memory reserved at a micro-batch of B/2 plus half the activations of B/4
    sequences (the peaks at B/2 and B/4 apart), so one pass of B (B/2 more) fails for real."""
    import torch

    batch = min(64, scale.batch)
    common = dict(model="85M", batch=batch, steps=3, compile=False, measure_gns=False, log_every_steps=1,
                  ewa_taus=(0.999,), gns_micro_batch_size=None)
    callbacks = ()
    if scale.device == "cuda":
        quarter, _ = trial(scale, report, "micro_quarter", data, micro_batch_size=batch // 4, **common)
        _free()
    half, half_result = trial(scale, report, "micro_half", data, micro_batch_size=batch // 2, **common)
    _free()
    if scale.device == "cuda":
        per_quarter = (half["peak_allocated_gib"] - quarter["peak_allocated_gib"]) * 2**30
        limit = max(half["peak_reserved_gib"], half["peak_allocated_gib"]) * 2**30 + 0.5 * per_quarter
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total))
        report.set("allocator_cap_gib", _round(limit / 2**30, 2))
    else:
        callbacks = (_refuse_passes_above(batch // 2),)
    forced, forced_result = trial(scale, report, "forced_one_pass", data, micro_batch_size=batch,
                                  callbacks=callbacks, **common)
    if scale.device == "cuda":
        torch.cuda.set_per_process_memory_fraction(1.0)
    difference = _max_difference(_losses(forced_result), _losses(half_result))
    report.set("max_train_loss_difference", difference)
    report.check("halved", forced["micro_batch_size"] == batch // 2)
    # the same passes: equal on a CPU; a GPU may reorder a reduction (atomics), so a tolerance
    report.check("same_update", difference is not None and difference <= (1e-3 if scale.device == "cuda" else 0.0))


def part_ddp(scale: Scale, report: Report, data) -> None:
    """7: DDP constructed by the trainer's code on a one-rank group (NCCL on a GPU, gloo on a CPU):
    the keyword this torch takes, a forward, a backward, a ``no_sync`` backward."""
    import inspect

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from cbscore.model.config import get_preset
    from cbscore.model.gpt import GPT
    from cbscore.train.distributed import backend_for, bind_to_loopback, buffer_sync_keyword, file_store, make_ddp

    params = inspect.signature(DistributedDataParallel.__init__).parameters
    report.set("signature", {"forward_sync_buffers": "forward_sync_buffers" in params,
                             "broadcast_buffers": "broadcast_buffers" in params,
                             "keyword_used": buffer_sync_keyword()})
    device = torch.device(scale.device, 0) if scale.device == "cuda" else torch.device("cpu")
    bind_to_loopback()
    with tempfile.TemporaryDirectory() as folder:
        dist.init_process_group(backend_for(scale.device), store=file_store(str(Path(folder) / "store"), 1, 60.0),
                                rank=0, world_size=1)
        try:
            model = GPT(get_preset(scale.models["small"]).config(vocab_size=data.vocab_size,
                                                                   context_tokens=scale.context)).to(device)
            ddp = make_ddp(model, device)
            tokens = torch.randint(0, data.vocab_size, (4, scale.context + 1), device=device)
            autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if scale.device == "cuda"
                        else contextlib.nullcontext())
            with ddp.no_sync(), autocast:
                _, loss = ddp(tokens[:, :-1], tokens[:, 1:])
            loss.backward()
            with autocast:
                _, loss = ddp(tokens[:, :-1], tokens[:, 1:])
            loss.backward()  # all-reduced
            finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
            report.set("step", {"backend": backend_for(scale.device), "loss": _round(loss.item())})
            report.check("gradients_finite", finite)
        finally:
            dist.destroy_process_group()


def _stop_at(step: int):
    """A callback that stops the trial at ``step`` (a checkpoint is written, the trial resumes)."""
    from cbscore.train.callbacks import Callback

    class StopAt(Callback):
        def post_step(self, state, metrics):
            if state.step == step:
                state.request_stop("the GPU check stops here to resume")

    return StopAt()


def part_compile_and_resume(scale: Scale, report: Report, data) -> None:
    """8: compiled and eager training of a small preset agree over 20 steps; a trial stopped at
    step 10 with a checkpoint resumes on the device and ends where the uninterrupted one does."""
    steps = 20 if scale.device == "cuda" else 6
    batch = 32 if scale.device == "cuda" else scale.batch
    common = dict(model="small", batch=batch, steps=steps, log_every_steps=1, ewa_taus=(0.999,),
                  measure_gns=False, gns_micro_batch_size=None)
    _, compiled = trial(scale, report, "compiled", data, compile=True, **common)
    _free()
    _, eager = trial(scale, report, "eager", data, compile=False, **common)
    _free()
    difference = _max_difference(_losses(compiled), _losses(eager))
    report.set("compiled_vs_eager_max_difference", difference)
    # bf16 on a GPU: kernels fused differently round differently; a CPU in fp32 agrees closely
    report.check("compiled_agrees_with_eager", difference is not None
                 and difference <= (0.05 if scale.device == "cuda" else 1e-3))
    with tempfile.TemporaryDirectory() as folder:
        ckpt = dict(checkpoint_dir=str(Path(folder) / "ckpt"), checkpoint_every_steps=5)
        stop_at = steps // 2
        _, stopped = trial(scale, report, "stopped", data, compile=False, callbacks=(_stop_at(stop_at),),
                           **ckpt, **common)
        _free()
        _, resumed = trial(scale, report, "resumed", data, compile=False, **ckpt, **common)
    after = [v for s, v in resumed.train_log if s > stop_at]
    whole = [v for s, v in eager.train_log if s > stop_at]
    difference = _max_difference(after, whole)
    report.set("resume", {"stopped_status": stopped.status, "stopped_at": stopped.steps,
                          "resumed_from_step": resumed.resumed_from_step, "status": resumed.status,
                          "max_difference_after_resume": difference})
    report.check("resumed_from_checkpoint", stopped.status == "stopped" and resumed.resumed_from_step == stop_at
                 and resumed.status == "finished" and resumed.steps == steps)
    report.check("resume_matches_uninterrupted", difference is not None
                 and difference <= (1e-2 if scale.device == "cuda" else 1e-6))


PARTS = {
    0: part_environment,
    1: lambda scale, report, data: part_85m(scale, report, data, compile=True),
    2: lambda scale, report, data: part_85m(scale, report, data, compile=False),
    3: part_151m,
    4: part_gns_overhead,
    5: part_large,
    6: part_out_of_memory,
    7: part_ddp,
    8: part_compile_and_resume,
}


def _cpu_compile() -> None:
    """The rehearsal compiles with Dynamo's ``eager`` backend: traced as on a GPU (recompiles and
    graph breaks logged), no kernels built."""
    import functools

    import torch

    torch.compile = functools.partial(torch.compile, backend="eager")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", type=int, choices=sorted(PARTS))
    parser.add_argument("--mode", choices=sorted(SCALES), required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    scale = SCALES[args.mode]
    report = Report(args.result)
    try:
        from benchmarks.synthetic_store import write_store

        data = write_store(train_tokens=scale.train_tokens, val_tokens=scale.val_tokens, vocab_size=scale.vocab_size)
        if args.mode == "cpu-smoke":
            _cpu_compile()
        PARTS[args.part](scale, report, data)
    except BaseException as exc:  # noqa: BLE001 - the check reports every failure (and its place)
        report.data["error"] = f"{type(exc).__name__}: {exc}"[:800]
        report.data["where"] = traceback.format_exc().strip().splitlines()[-6:]
        report.data["done"] = True
        report.flush()
        traceback.print_exc()
        return 1
    report.data["done"] = True
    report.flush()
    return 0 if all(report.data["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
