"""The paper's per-batch-size optimizer choices (Zhang et al. 2025, §3.1 and appendix; DESIGN.md §1).

The paper tuned AdamW's β2 and the weight-averaging decay τ per batch size:

| B (seq) | 64 | 128 | 256 | 512 | 1024 | 2048 | 4096 | 8192 | 16384 |
|---|---|---|---|---|---|---|---|---|---|
| β2 | .999 | .999 | .995 | .99 | .99 | .95 | .95 | .95 | .95 |
| EWA τ | .9995 | .9995 | .9995 | .9995 | .999 | .998 | .995 | .99 | .99 |

Batch sizes off the table take the entry of the **nearest tabulated batch size on a log scale**
(the table is a ladder of powers of two, and larger batches mean fewer, noisier-averaged steps,
so distance in log B is the natural one). Below 64 that is the 64 column, above 16384 the 16384
column. Between two entries the closer one in log2 wins; an integer B is never exactly halfway
between two powers of two on a log scale, so there are no ties.
"""

from __future__ import annotations

import math

#: Batch sizes (sequences) of the paper's table.
TABLE_BATCH_SIZES: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
#: AdamW β2 at those batch sizes.
TABLE_BETA2: tuple[float, ...] = (0.999, 0.999, 0.995, 0.99, 0.99, 0.95, 0.95, 0.95, 0.95)
#: EWA decay τ at those batch sizes.
TABLE_EWA_TAU: tuple[float, ...] = (0.9995, 0.9995, 0.9995, 0.9995, 0.999, 0.998, 0.995, 0.99, 0.99)

#: Paper defaults that do not depend on the batch size (DESIGN.md §1).
BETA1 = 0.95
EPS = 1e-8
WEIGHT_DECAY = 0.0
GRAD_CLIP = 1.0
#: The warm-up starts at this fraction of the peak learning rate.
WARMUP_START_RATIO = 0.1
#: Default warm-up length as a fraction of the setting's reference token budget.
WARMUP_FRACTION = 0.25


def _nearest_column(batch_size: int) -> int:
    """Index of the tabulated batch size nearest to ``batch_size`` in log2."""
    if batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, but got {batch_size!r}.")
    log_b = math.log2(batch_size)
    return min(range(len(TABLE_BATCH_SIZES)), key=lambda i: abs(math.log2(TABLE_BATCH_SIZES[i]) - log_b))


def paper_beta2(batch_size: int) -> float:
    """AdamW β2 the paper used at ``batch_size`` sequences (nearest column on a log scale)."""
    return TABLE_BETA2[_nearest_column(batch_size)]


def paper_ewa_tau(batch_size: int) -> float:
    """EWA decay τ the paper used at ``batch_size`` sequences (nearest column on a log scale)."""
    return TABLE_EWA_TAU[_nearest_column(batch_size)]
