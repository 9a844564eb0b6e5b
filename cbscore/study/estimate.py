"""What a study will cost before anything runs: cells, trials, tokens, FLOPs and time.

The figures are the *fixed-budget grid* (every trial spends its whole budget), an upper bound:
stopping at the target, pruning and step caps spend less (``cbs study status`` reports both).
Training FLOPs are ``flops_per_token · tokens`` with 6N + 12·L·d·T per token (PaLM, appendix B).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass

from cbscore.study.kinds import study_kind
from cbscore.study.spec import StudySpec


@dataclass(frozen=True, kw_only=True)
class SettingEstimate:
    setting_id: str
    model: str
    n_params: int
    tokens: int
    """D of the setting."""
    grid_tokens: int
    """Training tokens of the setting's trials at full budgets."""
    flops: float
    """Training FLOPs of those tokens."""
    seconds: float | None
    """Time of those tokens on one worker at the measured tokens/s (None if not measured)."""


@dataclass(frozen=True, kw_only=True)
class ComputeEstimate:
    cells: int
    """Cells (setting × batch size)."""
    trials: int
    """Trials in all."""
    tokens: int
    """Training tokens at fixed budgets (upper bound)."""
    flops: float
    """Training FLOPs at fixed budgets."""
    seconds: float | None
    """Wall time on ``n_workers`` workers at the measured tokens/s (None if not measured)."""
    n_workers: int
    """Workers assumed for ``seconds``."""
    settings: tuple[SettingEstimate, ...]
    """Per-setting figures."""
    over_limit: str | None
    """Why the study exceeds a sanity limit (``force`` needed), or None."""

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def estimate(spec: StudySpec, tokens_per_s: float | Mapping[str, float] | None = None, *,
             n_workers: int = 1) -> ComputeEstimate:
    """Cost of ``spec``; ``tokens_per_s`` is one figure or one per model preset."""
    settings = spec.resolve_settings()
    out = []
    total_seconds: float | None = 0.0
    kind = study_kind(spec)
    for s in settings:
        toks = kind.setting_grid_tokens(spec, s)
        rate = tokens_per_s.get(s.model) if isinstance(tokens_per_s, Mapping) else tokens_per_s
        secs = toks / rate if rate else None
        if secs is None:
            total_seconds = None
        elif total_seconds is not None:
            total_seconds += secs
        out.append(SettingEstimate(setting_id=s.setting_id, model=s.model, n_params=s.n_params, tokens=s.tokens,
                                   grid_tokens=toks, flops=toks * s.flops_per_token, seconds=secs))
    trials = kind.grid_trials(spec)
    tokens = sum(e.grid_tokens for e in out)
    over = None
    if trials > spec.max_trials:
        over = f"{trials} trials exceed max_trials={spec.max_trials}"
    elif tokens > spec.max_total_tokens:
        over = f"{tokens:.3g} training tokens exceed max_total_tokens={spec.max_total_tokens:.3g}"
    return ComputeEstimate(
        cells=len(settings) * len(spec.batch_sizes), trials=trials, tokens=tokens,
        flops=sum(e.flops for e in out),
        seconds=None if total_seconds is None else total_seconds / max(1, n_workers),
        n_workers=n_workers, settings=tuple(out), over_limit=over,
    )


def measure_tokens_per_s(model: str, context_tokens: int, *, batch_size: int = 8, steps: int = 3,
                         min_seconds: float = 0.0, vocab_size: int = 8192, device: str = "cpu",
                         threads: int | None = None) -> float:
    """Training tokens/s of a preset on this machine: AdamW steps on random tokens after one
    warm-up step, at least ``steps`` of them and at least ``min_seconds`` (a rough figure for the
    dry run's time estimate, not a benchmark: ``benchmarks/bench_train.py`` is that). On CUDA
    as a trial runs there (eager): bf16 autocast and fused AdamW."""
    import time

    import torch

    from cbscore.model.config import get_preset
    from cbscore.model.gpt import GPT

    if threads:
        torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    net = GPT(get_preset(model).config(vocab_size=vocab_size, context_tokens=context_tokens)).to(device)
    on_cuda = device.startswith("cuda")
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=on_cuda)
    idx = torch.randint(0, vocab_size, (batch_size, context_tokens + 1), generator=gen).to(device)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if on_cuda else contextlib.nullcontext

    def step() -> None:
        with autocast():
            _, loss = net(idx[:, :-1], idx[:, 1:])  # (B, T) inputs and shifted targets
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    step()
    sync()
    done, start = 0, time.perf_counter()
    while done < steps or time.perf_counter() - start < min_seconds:
        step()
        done += 1
        sync()
    return done * batch_size * context_tokens / (time.perf_counter() - start)


#: Largest model (non-embedding parameters) whose CPU throughput the dry run measures; bigger ones
#: are scaled from the largest measured by FLOPs per token (a step of 85M at B=256, T=512 takes
#: minutes on a CPU).
CPU_MEASURE_MAX_PARAMS = 10_000_000
#: Tokens per step of a throughput measurement on the CPU (B is cut to fit; tiny models reach
#: their steady rate well below it).
CPU_MEASURE_MAX_TOKENS = 2048
#: The model measured when a study has none small enough (the paper's presets): the CPU
#: throughput floor's shape, a fraction of a second per step.
CPU_PROXY_MODEL = "tiny-0.8M"


def _flops_with_head(model: str, context_tokens: int, vocab_size: int) -> float:
    """Training FLOPs per token with the untied LM head (``Preset.flops_per_token``): at V = 8192 the
    head dominates tiny models, so it must be in a ratio between a tiny and a large model."""
    from cbscore.model.config import PRESETS

    return float(PRESETS[model].flops_per_token(context_tokens, vocab_size=vocab_size))


def gpu_measure_batch(spec: StudySpec, model: str, free_bytes: float, *, vocab_size: int = 8192) -> int:
    """The micro-batch of a reference trial of ``model`` on one device: the spec's, or the one
    :mod:`cbscore.train.micro_batch` chooses from ``free_bytes``, at most B_ref's share per device."""
    from cbscore.model.config import PRESETS, padded_vocab_size
    from cbscore.train.micro_batch import activation_bytes_per_sequence, choose_micro_batch, static_bytes

    local = max(1, spec.b_ref // spec.devices_per_trial)
    if spec.micro_batch_size:
        return min(spec.micro_batch_size, local)
    config = PRESETS[model].config(vocab_size=padded_vocab_size(vocab_size), context_tokens=spec.context_tokens)
    total = config.n_params + 2 * config.d_model * config.vocab_size  # blocks and both embeddings
    return choose_micro_batch(local, free_bytes - static_bytes(total, 3), activation_bytes_per_sequence(config))


def measure_rates(spec: StudySpec, *, device: str | None = None, min_seconds: float = 0.5,
                  threads: int | None = None) -> tuple[dict[str, float], dict[str, str]]:
    """Training tokens/s of one worker for every model of ``spec`` on this machine, and how each
    figure was obtained (``threads``: torch threads per worker on a CPU; ``None`` = this process's).
    On a GPU (when torch sees one) every model is measured at a small batch; on a
    CPU models up to :data:`CPU_MEASURE_MAX_PARAMS` are measured (batch cut to
    :data:`CPU_MEASURE_MAX_TOKENS` tokens) and bigger ones scaled by FLOPs per token from the
    largest measured one (or from :data:`CPU_PROXY_MODEL` when none is small enough)."""
    import torch

    from cbscore.model.config import PRESETS

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    from cbscore.data import DataConfig

    vocab = DataConfig.from_dict(dict(spec.data)).expected_vocab_size or 8192
    t = spec.context_tokens
    models = sorted({s.model for s in spec.resolve_settings()}, key=lambda m: PRESETS[m].n_params)
    rates: dict[str, float] = {}
    how: dict[str, str] = {}
    before = torch.get_num_threads()
    threads = threads or before
    on_cpu = f"this CPU ({threads} thread{'' if threads == 1 else 's'})"
    if device.startswith("cuda"):
        # One pass of a reference trial (B_ref per device) at its micro-batch, in bf16 as trials
        # run; eager, so below a compiled trial's rate (an upper bound on the time).
        free, _ = torch.cuda.mem_get_info()
        for m in models:
            batch = gpu_measure_batch(spec, m, free, vocab_size=vocab)
            per_device = measure_tokens_per_s(m, t, batch_size=batch, min_seconds=min_seconds, vocab_size=vocab,
                                              device=device)
            rates[m] = per_device * spec.devices_per_trial  # a trial's ranks step together
            how[m] = (f"measured on {torch.cuda.get_device_name()} at a micro-batch of {batch} in bf16"
                      + (f", × {spec.devices_per_trial} devices" if spec.devices_per_trial > 1 else ""))
        return rates, how
    batch = max(1, min(spec.b_ref, CPU_MEASURE_MAX_TOKENS // t))
    small = [m for m in models if PRESETS[m].n_params <= CPU_MEASURE_MAX_PARAMS] or [CPU_PROXY_MODEL]
    measured: dict[str, float] = {}
    for m in small:
        try:
            measured[m] = measure_tokens_per_s(m, t, batch_size=batch, min_seconds=min_seconds, vocab_size=vocab,
                                               threads=threads)
        finally:
            torch.set_num_threads(before)
        if m in models:
            rates[m] = measured[m]
            how[m] = f"measured on {on_cpu} at B={batch}"
    ref = small[-1]
    ref_rate = measured[ref]
    for m in models:
        if m not in rates:
            rates[m] = ref_rate * _flops_with_head(ref, t, vocab) / _flops_with_head(m, t, vocab)
            how[m] = f"scaled by FLOPs per token from {ref} on {on_cpu}"
    return rates, how
