"""What a study will cost before anything runs: cells, trials, tokens, FLOPs and time.

The figures are the *fixed-budget grid* (every trial spends its whole budget), an upper bound:
stopping at the target, pruning and step caps spend less (``cbs study status`` reports both).
Training FLOPs are ``flops_per_token · tokens`` with 6N + 12·L·d·T per token (PaLM, appendix B).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from cbscore.study.planner import grid_trials, setting_grid_tokens
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
    for s in settings:
        toks = setting_grid_tokens(spec, s)
        rate = tokens_per_s.get(s.model) if isinstance(tokens_per_s, Mapping) else tokens_per_s
        secs = toks / rate if rate else None
        if secs is None:
            total_seconds = None
        elif total_seconds is not None:
            total_seconds += secs
        out.append(SettingEstimate(setting_id=s.setting_id, model=s.model, n_params=s.n_params, tokens=s.tokens,
                                   grid_tokens=toks, flops=toks * s.flops_per_token, seconds=secs))
    trials = grid_trials(spec)
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
                         vocab_size: int = 8192, device: str = "cpu", threads: int | None = None) -> float:
    """Training tokens/s of a preset on this machine: a few AdamW steps on random tokens after one
    warm-up step (a rough figure for the dry run's time estimate, not a benchmark)."""
    import time

    import torch

    from cbscore.model import GPT, get_preset

    if threads:
        torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    net = GPT(get_preset(model).config(vocab_size=vocab_size, context_tokens=context_tokens)).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    idx = torch.randint(0, vocab_size, (batch_size, context_tokens + 1), generator=gen).to(device)

    def step() -> None:
        _, loss = net(idx[:, :-1], idx[:, 1:])  # (B, T) inputs and shifted targets
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return steps * batch_size * context_tokens / (time.perf_counter() - start)
