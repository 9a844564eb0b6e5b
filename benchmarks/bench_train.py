"""Trainer throughput: tokens/s (and MFU on CUDA) of the real trainer, with peak memory.

Every figure comes from ``cbscore.train.trainer.train`` itself (AdamW, clipping, weight averaging, the
data stream; evaluation and the first step are off the clock, as in a study), each trial in its
own process so that its peak memory is its own (CPU: peak RSS; CUDA: max_memory_allocated).

    python benchmarks/bench_train.py                    # CPU small presets, then GPU presets
    python benchmarks/bench_train.py --cpu-only --threads 2
    python benchmarks/bench_train.py --one tiny-0.8M --device cpu --threads 2 --batch-size 16 --steps 40

The CPU floor of issue 3: the d_model 128, 4-layer preset (``tiny-0.8M``) at context 128 with an
8192-token vocabulary trains at ≥ 6,000 tokens/s in fp32 on two cores. ``--reference`` adds a
plain PyTorch GPT of the same shape (learned positions, no QK-norm, no averaging; a bare
forward/backward/AdamW loop) measured the same way, so that a figure taken on a busy shared
machine can be read against what the machine gave at that moment.

``--profile`` (with ``--one`` or ``--reference-one``) reports, instead of a speed, what one steady
step does, counts that do not depend on the machine's load: torch ops (all, and those called from
Python), Python function calls and ``.item()`` reads, per step over the steps after the last early
evaluation (the trainer evaluates at steps 0, 1, 2, 4, 8 and 16)::

    python benchmarks/bench_train.py --one tiny-0.8M --threads 2 --batch-size 16 --profile
    python benchmarks/bench_train.py --reference-one tiny-0.8M --threads 2 --batch-size 16 --profile
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

CPU_PRESETS = ("tiny-0.1M", "tiny-0.8M", "tiny-3.1M")
#: Steps profiled by --profile start after this one: the last early evaluation is before step 17.
PROFILE_FROM_STEP = 17
GPU_PRESETS = ("85M", "151M")


def _one(args: argparse.Namespace) -> dict:
    """Run one trial in this process and return its figures."""
    import torch

    from cbscore.data import DataConfig, prepare
    from cbscore.model.config import get_preset
    from cbscore.train.callbacks import Callback
    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train

    class Window(Callback):
        """--profile: steps PROFILE_FROM_STEP + 1 .. the last but one (the last evaluates)."""

        def __init__(self):
            self.profiler = _StepProfiler()

        def post_step(self, state, metrics):
            if state.step == PROFILE_FROM_STEP:
                self.profiler.start()
            elif state.step == state.total_steps - 1:
                self.profiler.stop(state.step - PROFILE_FROM_STEP)

    preset = get_preset(args.one)
    context = args.context or preset.context_tokens
    data = DataConfig(vocab_size=args.vocab_size)
    prepare(data)
    config = TrainConfig(
        model=args.one, batch_size=args.batch_size, micro_batch_size=args.micro_batch_size,
        context_tokens=context, max_tokens=args.batch_size * context * args.steps, lr=1e-3,
        ewa_taus=(0.999,), eval_windows=1, eval_every_steps=10**9, log_every_steps=10,
        data=data, device=args.device, compile=args.compile, threads=args.threads, allow_repeat=True,
    )
    window = Window() if args.profile else None
    result = train(config, [window] if window else [])
    if window:
        return {"preset": args.one, **window.profiler.counts}
    return {
        "preset": args.one,
        "device": result.device,
        "batch_size": args.batch_size,
        "context": context,
        "vocab_size": args.vocab_size,
        "steps": result.steps,
        "tokens_per_s": result.tokens_per_s,
        "mfu": result.mfu,
        "peak_memory_mib": result.peak_memory_bytes / 2**20,
        "torch": torch.__version__,
    }


def _reference(args: argparse.Namespace) -> dict:
    """A plain PyTorch GPT of the same shape: forward, backward, AdamW, nothing else."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from cbscore.model.config import get_preset
    from cbscore.train.throughput import peak_memory_bytes

    if args.threads:
        torch.set_num_threads(args.threads)
    preset = get_preset(args.reference_one)
    d, n_layers, h, v = preset.d_model, preset.n_layers, preset.n_heads, args.vocab_size
    t = args.context or preset.context_tokens

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, tt, c = x.shape
            q, k, val = self.qkv(self.ln1(x)).split(c, -1)
            q, k, val = (z.view(b, tt, h, c // h).transpose(1, 2) for z in (q, k, val))
            y = F.scaled_dot_product_attention(q, k, val, is_causal=True).transpose(1, 2).reshape(b, tt, c)
            x = x + self.out(y)
            return x + self.proj(F.gelu(self.fc(self.ln2(x))))

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(v, d), nn.Embedding(t, d)
            self.blocks = nn.ModuleList(Block() for _ in range(n_layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, v, bias=False)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.ln(x))
            return F.cross_entropy(logits.view(-1, v), targets.reshape(-1))

    torch.manual_seed(0)
    model = Plain()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, v, (args.batch_size, t + 1))

    def step():
        model(batch[:, :-1], batch[:, 1:]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    if args.profile:  # the same steps the trainer's --profile counts
        for _ in range(PROFILE_FROM_STEP - 1):
            step()
        profiler, n = _StepProfiler(), args.steps - 1 - PROFILE_FROM_STEP
        profiler.start()
        for _ in range(n):
            step()
        profiler.stop(n)
        return {"preset": f"plain GPT ({args.reference_one} shape)", **profiler.counts}
    start = time.perf_counter()
    for _ in range(args.steps - 1):
        step()
    seconds = time.perf_counter() - start
    return {
        "preset": f"plain GPT ({args.reference_one} shape)", "device": f"cpu ({torch.get_num_threads()} threads)",
        "batch_size": args.batch_size, "context": t, "vocab_size": v, "steps": args.steps,
        "tokens_per_s": args.batch_size * t * (args.steps - 1) / seconds, "mfu": None,
        "peak_memory_mib": peak_memory_bytes(torch.device("cpu")) / 2**20, "torch": torch.__version__,
    }


class _StepProfiler:
    """Counts over a window of steps (--profile): torch ops from ``torch.profiler``, Python calls
    from ``cProfile``, both per step."""

    def start(self) -> None:
        import cProfile

        from torch.profiler import ProfilerActivity, profile

        self.torch = profile(activities=[ProfilerActivity.CPU])
        self.python = cProfile.Profile()
        self.torch.__enter__()
        self.python.enable()

    def stop(self, steps: int) -> None:
        import pstats

        self.python.disable()
        self.torch.__exit__(None, None, None)
        events = self.torch.events()
        calls = sum(n for _, n, *_ in pstats.Stats(self.python).stats.values())
        self.counts = {
            "profiled_steps": steps,
            "torch_ops_per_step": len(events) / steps,
            "top_level_ops_per_step": sum(e.cpu_parent is None for e in events) / steps,
            "python_calls_per_step": calls / steps,
            "item_per_step": sum(e.name == "aten::item" for e in events) / steps,
        }


def _child(flags: list[str]) -> tuple[str, dict | str]:
    cmd = [sys.executable, os.path.relpath(__file__), *flags, "--json"]
    shown = "python " + " ".join(shlex.quote(c) for c in cmd[1:-1])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return shown, f"failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
    return shown, json.loads(proc.stdout.strip().splitlines()[-1])


def _row(shown: str, fig: dict | str) -> str:
    if isinstance(fig, str):
        return f"{fig}\n    $ {shown}"
    if "profiled_steps" in fig:
        return (f"{fig['preset']:<28} per step over {fig['profiled_steps']} steps: {fig['torch_ops_per_step']:,.1f} torch ops "
                f"({fig['top_level_ops_per_step']:,.1f} called from Python), {fig['python_calls_per_step']:,.1f} Python "
                f"calls, {fig['item_per_step']:.2f} .item()\n    $ {shown}")
    mfu = f"MFU {fig['mfu']:.1%}" if fig["mfu"] is not None else "MFU n/a"
    return (f"{fig['preset']:<28} {fig['tokens_per_s']:>12,.0f} tokens/s  {mfu:<9}  peak {fig['peak_memory_mib']:,.0f} MiB  "
            f"B={fig['batch_size']} T={fig['context']} V={fig['vocab_size']} on {fig['device']}\n    $ {shown}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--one", help="measure one preset in this process")
    p.add_argument("--reference-one", help="measure the plain GPT of this preset's shape in this process")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--micro-batch-size", type=int, default=None)
    p.add_argument("--context", type=int, default=None)
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--cpu-only", action="store_true")
    p.add_argument("--reference", action="store_true", help="also measure a plain PyTorch GPT of each shape")
    p.add_argument("--json", action="store_true")
    p.add_argument("--profile", action="store_true",
                   help="with --one or --reference-one: per-step op and call counts instead of a speed")
    args = p.parse_args()
    if args.profile and not (args.one or args.reference_one):
        p.error("--profile needs --one or --reference-one")
    if args.profile and args.steps < PROFILE_FROM_STEP + 4:
        p.error(f"--profile needs --steps of at least {PROFILE_FROM_STEP + 4}")

    if args.one or args.reference_one:
        fig = _one(args) if args.one else _reference(args)
        print(json.dumps(fig) if args.json else _row(" ".join(sys.argv), fig))
        return 0

    print(f"# trainer throughput, {time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs")
    for preset in CPU_PRESETS:
        flags = ["--one", preset, "--device", "cpu", "--threads", str(args.threads),
                 "--batch-size", str(args.batch_size), "--steps", str(args.steps)]
        print(_row(*_child(flags)), flush=True)
        if args.reference:
            ref = ["--reference-one", preset, "--threads", str(args.threads),
                   "--batch-size", str(args.batch_size), "--steps", str(args.steps)]
            print(_row(*_child(ref)), flush=True)
    if args.cpu_only:
        return 0
    import torch

    for preset in GPU_PRESETS:
        if not torch.cuda.is_available():
            print(f"{preset:<28} unmeasured: no CUDA")
            continue
        flags = ["--one", preset, "--device", "cuda", "--compile", "--batch-size", "64", "--steps", "40"]
        print(_row(*_child(flags)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
