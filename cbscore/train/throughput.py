"""Tokens per second and model-FLOPs utilisation (MFU; Chowdhery et al. 2022, PaLM, appendix B).

``MFU = tokens_per_s · flops_per_token / peak_flops`` with ``flops_per_token = 6·(N + d·V) +
12·L·d·T`` (:mod:`cbscore.model.gpt`: block matmuls, output head and attention) and ``peak_flops``
the accelerator's dense bf16 peak from its data sheet, looked up by the exact CUDA device name:
an H100 PCIe (756e12) is not an H100 SXM (989e12). A measured H200 reached about 790e12 bf16
FLOP/s on large matmuls, so an MFU near 0.8 there is the practical ceiling, not 1.0.

``CBS_PEAK_FLOPS`` (FLOP/s) overrides the table on any device. Without it, a CPU or a GPU not in
the table has no peak: its MFU is ``None`` (unknown, never a guess), and an unknown GPU says so
in a warning that names the device and the variable.
"""

from __future__ import annotations

import math
import os
import re
import resource
import sys
import warnings

import torch

from cbscore.errors import ConfigError

#: Environment variable that sets the peak FLOP/s by hand (wins over the table).
PEAK_FLOPS_ENV = "CBS_PEAK_FLOPS"

#: Dense (no 2:4 sparsity) bf16 tensor-core peak FLOP/s, keyed on the names
#: ``torch.cuda.get_device_name`` reports (matched after :func:`normalise_device_name`).
#: NVIDIA data sheets print the sparse figure; the dense one is half of it.
PEAK_BF16_FLOPS: dict[str, float] = {
    # A100 data sheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): 312 TFLOPS, SXM and PCIe alike
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-SXM-80GB": 312e12,
    "NVIDIA A100-PCIE-40GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    # H100 data sheet (nvidia.com/en-us/data-center/h100): SXM 1,979 / PCIe 1,513 / NVL 1,671
    # TFLOPS with sparsity
    "NVIDIA H100 80GB HBM3": 989e12,  # H100 SXM5
    "NVIDIA H100 PCIe": 756e12,
    "NVIDIA H100 NVL": 835e12,
    # GH200 data sheet: the Hopper GPU of the superchip has the H100 SXM's tensor cores
    "NVIDIA GH200 480GB": 989e12,
    # H200 data sheet (nvidia.com/en-us/data-center/h200): SXM 1,979 / NVL 1,671 TFLOPS sparse
    "NVIDIA H200": 989e12,
    "NVIDIA H200 NVL": 835e12,
    # L40S data sheet: 362.05 TFLOPS dense (733 sparse)
    "NVIDIA L40S": 362e12,
    # L4 data sheet: 242 TFLOPS sparse
    "NVIDIA L4": 121e12,
    # A10G (AWS G5; no NVIDIA data sheet): 70 TFLOPS dense, below the A10's 125 TFLOPS
    "NVIDIA A10G": 70e12,
}


def normalise_device_name(name: str) -> str:
    """``'NVIDIA A100-SXM4-80GB'`` -> ``'A100 SXM4 80GB'``: upper case, no vendor prefix, and
    hyphens, underscores and runs of spaces as one space. Nothing else is dropped, so the
    words that tell variants apart (PCIe, NVL, HBM3) stay."""
    words = re.sub(r"[\s_-]+", " ", name).strip().upper()
    return words.removeprefix("NVIDIA ").strip()


_PEAK_BY_NAME: dict[str, float] = {normalise_device_name(k): v for k, v in PEAK_BF16_FLOPS.items()}


def peak_flops_override() -> float | None:
    """``CBS_PEAK_FLOPS`` as FLOP/s, or ``None`` when it is unset or blank."""
    raw = os.environ.get(PEAK_FLOPS_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(PEAK_FLOPS_ENV, raw, "must be a positive number of FLOP/s, such as 989e12")
    return value


def peak_flops_for_name(name: str) -> float | None:
    """Dense bf16 peak FLOP/s of the CUDA device called ``name``; ``CBS_PEAK_FLOPS`` wins.

    A name that is not in :data:`PEAK_BF16_FLOPS` gives ``None`` and a warning naming the
    device and ``CBS_PEAK_FLOPS``: a near match (another board of the same chip) is not used.
    """
    override = peak_flops_override()
    if override is not None:
        return override
    peak = _PEAK_BY_NAME.get(normalise_device_name(name))
    if peak is None:
        warnings.warn(
            f"MFU unknown: no dense bf16 peak is known for the device {name!r}; "
            f"set {PEAK_FLOPS_ENV} to its peak in FLOP/s (e.g. {PEAK_FLOPS_ENV}=989e12) to report MFU.",
            stacklevel=2,
        )
    return peak


def peak_flops(device: torch.device) -> float | None:
    """Dense bf16 peak FLOP/s of ``device``; ``CBS_PEAK_FLOPS`` wins, a CPU has none."""
    if device.type != "cuda":
        return peak_flops_override()
    return peak_flops_for_name(torch.cuda.get_device_name(device))


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
