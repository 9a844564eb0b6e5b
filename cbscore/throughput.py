"""Tokens per second and model-FLOPs utilisation (MFU; Chowdhery et al. 2022, PaLM, appendix B).

``MFU = tokens_per_s · flops_per_token / peak_flops`` with ``flops_per_token = 6N + 12·L·d·T``
(:mod:`cbscore.model`) and ``peak_flops`` the accelerator's dense bf16 peak from its data sheet.
A measured H200 reached about 790e12 bf16 FLOP/s on large matmuls, so an MFU near 0.8 there is
the practical ceiling, not 1.0. CPUs have no meaningful table entry: their MFU is ``None``.
"""

from __future__ import annotations

import resource
import sys

import torch

#: Dense bf16 peak FLOP/s by device-name substring (NVIDIA data sheets; no sparsity).
PEAK_BF16_FLOPS: dict[str, float] = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
}


def peak_flops(device: torch.device) -> float | None:
    """Dense bf16 peak FLOP/s of ``device``, or ``None`` (CPU or an unknown GPU)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, flops in PEAK_BF16_FLOPS.items():
        if key in name:
            return flops
    return None


def mfu(tokens_per_s: float | None, flops_per_token: float, peak: float | None) -> float | None:
    """Model-FLOPs utilisation, or ``None`` where the peak or the rate is unknown."""
    if peak is None or not tokens_per_s:
        return None
    return tokens_per_s * flops_per_token / peak


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this process: CUDA ``max_memory_allocated``, else the peak RSS."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB
