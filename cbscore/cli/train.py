"""``cbs train`` (one trial from the command line) and ``cbs models`` (the model presets)."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys

from cbscore.train.callbacks import Callback

#: Keys of ``cbs train --json`` (exactly these, null where not applicable).
TRAIN_JSON_KEYS = (
    "status", "steps_to_target", "tokens_to_target", "final_eval_loss", "steps", "tokens",
    "tokens_per_s", "mfu", "n_params", "flops_per_token", "devices", "micro_batch_size", "peak_memory_bytes",
    "gns_b_simple",
)
#: Keys of each object of ``cbs models --json``.
MODELS_JSON_KEYS = ("name", "d_model", "n_layers", "n_heads", "n_params", "flops_per_token")

_TOKENS_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBtT]?)\s*$")
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def token_count(text: str) -> int:
    """Parse a token count: ``2000000``, ``2e6``, ``2M``, ``1.741B``."""
    match = _TOKENS_RE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"must be a token count like 2000000, 2e6 or 2M, but got {text!r}")
    value = float(match.group(1)) * _SCALE[match.group(2).lower()]
    if not math.isfinite(value) or value != int(value):
        raise argparse.ArgumentTypeError(f"must be a whole number of tokens, but got {text!r}")
    return int(value)


def register(subparsers) -> None:
    models = subparsers.add_parser(
        "models", help="list the model presets",
        description="List the model presets: shape, non-embedding parameters N = 12·L·d² and "
        "training FLOPs per token 6N + 12·L·d·T at the preset's usual context T.",
    )
    models.add_argument("--json", action="store_true", help="print a JSON list of objects")
    models.set_defaults(handler=_models)

    p = subparsers.add_parser(
        "train", help="train one trial (a model, a batch size, a learning rate)",
        description="Train one trial of the paper's recipe on a token store, stopping at the target "
        "loss when one is given. Progress goes to stderr; the summary (or --json) to stdout.",
    )
    p.add_argument("--model", required=True, help="model preset (see `cbs models`)")
    p.add_argument("--batch-size", type=int, required=True, metavar="B", help="batch size in sequences")
    p.add_argument("--lr", type=float, required=True, help="peak learning rate")
    p.add_argument("--max-tokens", type=token_count, required=True, metavar="N",
                   help="training budget in tokens (2000000, 2e6 or 2M)")
    p.add_argument("--target-loss", type=float, default=None, metavar="L",
                   help="stop when the averaged-weights held-out loss reaches L (nats per token)")
    p.add_argument("--micro-batch-size", type=int, default=None, metavar="M",
                   help="sequences per forward pass; must divide the batch size (default: the batch)")
    p.add_argument("--gns-micro-batch-size", type=int, default=None, metavar="M",
                   help="measure the gradient noise scale by splitting each batch into passes of M sequences "
                        "(the same update; cbscore.train.gns)")
    p.add_argument("--gns-half-life-tokens", type=token_count, default=None, metavar="N",
                   help="half-life of the noise-scale averages in tokens (default: 10%% of the budget)")
    p.add_argument("--context", type=int, default=None, metavar="T",
                   help="context length in tokens (default: the preset's usual context, see `cbs models`)")
    p.add_argument("--max-steps", type=int, default=None, metavar="S", help="cap on optimizer steps")
    p.add_argument("--warmup-tokens", type=token_count, default=None, metavar="N",
                   help="warm-up length in tokens (default: 25%% of --max-tokens)")
    p.add_argument("--schedule", choices=("constant", "cosine", "wsd"), default="constant",
                   help="learning rate after warm-up (default: constant, the paper's)")
    p.add_argument("--beta2", type=float, default=None,
                   help="AdamW β2 (default: the `fixed` recipe with this run as its own reference, "
                        "B_ref = B and D = the budget; cbscore.recipe.trial_recipe)")
    p.add_argument("--ewa-tau", type=float, nargs="+", default=None, metavar="TAU",
                   help="EWA decay rate(s) tracked at once (default: the same recipe's three τ, "
                        "half-lives ×½, ×1, ×2 of a share of the run, at least 4 steps)")
    p.add_argument("--eval-windows", type=int, default=128, metavar="K",
                   help="held-out windows per evaluation (default: 128)")
    p.add_argument("--data-source", default="builtin",
                   help="builtin (default), a .txt/.jsonl/.parquet file or folder, or hub:NAME[:CONFIG]")
    p.add_argument("--vocab-size", type=int, default=8192, metavar="V", help="BPE vocabulary size (default: 8192)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initialisation and the data order")
    p.add_argument("--allow-repeat", action="store_true", help="allow more than one pass over the data")
    p.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                   help="checkpoint folder; an existing checkpoint there is resumed")
    p.add_argument("--checkpoint-every-steps", type=int, default=None, metavar="S")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model (default: on CUDA, not on a CPU)")
    p.add_argument("--devices", type=int, default=1, metavar="K",
                   help="train on K devices with DDP: the first K GPUs, or K gloo processes on a CPU (default 1)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=_train)


def _models(args: argparse.Namespace) -> int:
    from cbscore.model.config import PRESETS

    rows = [
        {"name": p.name, "d_model": p.d_model, "n_layers": p.n_layers, "n_heads": p.n_heads,
         "n_params": p.n_params, "flops_per_token": p.flops_per_token()}
        for p in PRESETS.values()
    ]
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'name':<10} {'d_model':>7} {'layers':>6} {'heads':>5} {'N (non-emb)':>14} {'context':>7} {'FLOPs/token':>12}")
    for p, row in zip(PRESETS.values(), rows):
        print(f"{row['name']:<10} {row['d_model']:>7} {row['n_layers']:>6} {row['n_heads']:>5} "
              f"{row['n_params']:>14,} {p.context_tokens:>7} {row['flops_per_token']:>12.4g}")
    print("N = 12·L·d²; FLOPs/token = 6N + 12·L·d·T at the preset's usual context T (PaLM, appendix B).")
    return 0


def build_config(args: argparse.Namespace):
    """The TrainConfig of a ``cbs train`` command line (ConfigError on a bad value)."""
    from cbscore.data import DataConfig
    from cbscore.model.config import get_preset
    from cbscore.train.config import TrainConfig

    preset = get_preset(args.model)
    return TrainConfig(
        model=args.model,
        batch_size=args.batch_size,
        micro_batch_size=args.micro_batch_size,
        gns_micro_batch_size=args.gns_micro_batch_size,
        gns_half_life_tokens=args.gns_half_life_tokens,
        context_tokens=args.context if args.context is not None else preset.context_tokens,
        max_tokens=args.max_tokens,
        max_steps=args.max_steps,
        target_loss=args.target_loss,
        lr=args.lr,
        warmup_tokens=args.warmup_tokens,
        schedule=args.schedule,
        beta2=args.beta2,
        ewa_taus=None if args.ewa_tau is None else tuple(args.ewa_tau),
        eval_windows=args.eval_windows,
        data=DataConfig(source=args.data_source, vocab_size=args.vocab_size),
        seed=args.seed,
        allow_repeat=args.allow_repeat,
        device=args.device,
        compile=args.compile,
        threads=args.threads,
        devices=args.devices,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every_steps=args.checkpoint_every_steps,
    )


def _train(args: argparse.Namespace) -> int:
    from cbscore.data import prepare
    from cbscore.train.callbacks import ProgressBar
    from cbscore.train.trainer import train

    config = build_config(args)
    prepare(config.data, progress=not args.no_progress)  # idempotent; shows progress the first time
    noise = _LastNoiseScale()
    result = train(config, callbacks=[ProgressBar(file=sys.stderr, disable=args.no_progress), noise])
    if args.json:
        d = {**result.to_dict(), "gns_b_simple": noise.b_simple}
        print(json.dumps({k: d[k] for k in TRAIN_JSON_KEYS}))
        return 0
    print(summary(config, result))
    if noise.b_simple is not None:
        print(f"noise scale  B_simple {noise.b_simple:.4g} sequences at step {noise.step:,} "
              f"(|G|² {noise.g2:.4g}, tr Σ {noise.trace:.4g}; McCandlish et al. 2018)")
    return 0


class _LastNoiseScale(Callback):
    """The last gradient noise scale the trainer reported (``None`` without a probe)."""

    def __init__(self):
        self.b_simple = self.g2 = self.trace = None
        self.step = 0

    def post_step(self, state, metrics) -> None:
        if metrics is not None and metrics.get("gns_b_simple") is not None:
            self.b_simple, self.g2, self.trace = metrics["gns_b_simple"], metrics["gns_g2"], metrics["gns_trace_sigma"]
            self.step = state.step


def summary(config, result) -> str:
    """Human summary of one trial."""
    lines = [f"status       {result.status}" + (f" ({result.stop_reason})" if result.stop_reason else "")]
    if result.target_loss is not None:
        reached = (f"reached at {result.steps_to_target:,.1f} steps = {result.tokens_to_target:,.0f} tokens"
                   if result.steps_to_target is not None else "not reached")
        lines.append(f"target       {result.target_loss:.4f}: {reached}")
    if result.final_eval_loss is not None:
        taus = ", ".join(f"{t:g}" for t in result.ewa_taus)
        lines.append(f"final eval   {result.final_eval_loss:.4f} (EWA τ {taus}); raw weights {result.final_raw_loss:.4f}")
    lines.append(f"steps        {result.steps:,} of {result.total_steps:,} ({result.tokens:,} tokens; "
                 f"warm-up {result.warmup_steps:,} steps)")
    tps = f"{result.tokens_per_s:,.0f} tokens/s" if result.tokens_per_s else "n/a"
    if result.tokens_per_s and result.devices > 1:
        tps += f" ({result.tokens_per_s / result.devices:,.0f} per device)"
    mfu = f"MFU {result.mfu:.1%}" if result.mfu is not None else "MFU n/a"
    lines.append(f"throughput   {tps}, {mfu} on {result.device}, micro-batch {result.micro_batch_size}; train {result.train_seconds:.1f} s, "
                 f"eval {result.eval_seconds:.1f} s")
    lines.append(f"model        {config.model}: N = {result.n_params:,}, {result.flops_per_token:.4g} FLOPs/token, "
                 f"β2 {result.beta2:g}, peak memory {result.peak_memory_bytes / 2**20:,.0f} MiB")
    if config.beta2 is None or config.ewa_taus is None:
        lines.append(recipe_line(config))
    return "\n".join(lines)


def recipe_line(config) -> str:
    """Where the β2 and τ that the command line left out came from, and the bounds they hit."""
    from cbscore.recipe import half_life_steps

    recipe = config.default_recipe()
    parts, names = [], []
    if config.beta2 is None:
        parts.append(f"β2 {recipe.beta2:g}")
        names.append("β2")
    if config.ewa_taus is None:
        steps = "/".join(f"{half_life_steps(t):.3g}" for t in recipe.ewa_taus)
        parts.append(f"τ {', '.join(f'{t:g}' for t in recipe.ewa_taus)} (half-lives {steps} steps)")
        names.append("τ")
    bounds = [b for b in recipe.bounds if b.split()[0] in names]
    return (f"recipe       `fixed`, this run its own reference (B_ref = {config.batch_size}, "
            f"D = {config.total_steps * config.batch_tokens:,} tokens): {', '.join(parts)}"
            + (f"; {', '.join(bounds)}" if bounds else ""))
