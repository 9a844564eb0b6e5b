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
from dataclasses import dataclass

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


# ---------------------------------------------------------------------------------------------
# The table as half-lives in tokens, and the rule that scales it to any T, B and D (issue 10).
#
# What the table fixes is a horizon, not a decay: the EWA keeps the last ``1/(1 − τ)`` steps and
# Adam's second moment the last ``1/(1 − β2)``. A decay ``x`` forgets half its memory in
# ``h = ln ½ / ln x`` steps, i.e. ``h·B·T`` tokens. At the paper's scale (T = 512, B_ref = 256,
# the 151M model's D = 3.072B, the fixed-D budget of §3) those half-lives are a small share of a
# run: τ's from 1.5% (B = 64) to 19% (B = 16384) of D, β2's from 0.5% to 3.7%. The *scaled* rule
# keeps those shares: a batch size B of a study with reference batch size B_ref plays the role of
# the paper's column B·256/B_ref (nearest on a log scale), its half-life in tokens is that
# column's share times the setting's D, and ``τ = ½^(1/h)`` with ``h`` in steps. Run at the
# paper's own scale it gives back the table; a 100-step run at T = 128 gets a horizon of a few
# steps instead of the 2,000 that τ = 0.9995 would average over.
# ---------------------------------------------------------------------------------------------

#: Context length (tokens), reference batch size (sequences) and D (tokens) at which the table's
#: half-lives are read as shares of D (Zhang et al. 2025, §3: T = 512, B_ref = 256, and the
#: fixed-D study's D = 3.072B, the 151M model's Chinchilla budget).
PAPER_CONTEXT_TOKENS = 512
PAPER_B_REF = 256
PAPER_ANCHOR_TOKENS = 3_072_000_000

#: Recipe rules of a study: ``scaled`` (half-lives as a share of D, any T, B, D) or
#: ``paper_table`` (the table by batch size in sequences: the paper presets).
RECIPE_RULES = ("scaled", "paper_table")
#: Several τ are tracked at once: the rule's half-life times each of these (the target crossing
#: uses the best of them, and the trial records which one it was).
EWA_HALF_LIFE_MULTIPLES: tuple[float, ...] = (0.5, 1.0, 2.0)
#: β2 stays within the paper's own range: below 0.95 Adam's second moment is a few-step estimate
#: (the paper never went lower), above 0.999 it outlives a short run.
BETA2_RANGE = (0.95, 0.999)


def half_life_steps(decay: float) -> float:
    """Steps after which an exponential average with factor ``decay`` keeps half its memory:
    ``ln ½ / ln decay`` (``decay = 0.9995`` → 1386 steps)."""
    if not 0 < decay < 1:
        raise ValueError(f"decay must be in (0, 1), but got {decay!r}.")
    return math.log(0.5) / math.log(decay)


def decay_for_half_life(steps: float) -> float:
    """The factor whose half-life is ``steps`` (at least one step: ``½^(1/h)``)."""
    return 0.5 ** (1.0 / max(1.0, float(steps)))


def _share_of_d(table: tuple[float, ...], column: int) -> float:
    """Half-life in tokens of ``table[column]`` at the paper's scale, as a share of the anchor D."""
    tokens = half_life_steps(table[column]) * TABLE_BATCH_SIZES[column] * PAPER_CONTEXT_TOKENS
    return tokens / PAPER_ANCHOR_TOKENS


#: τ and β2 half-lives as a share of D, per column of the table (derived, not typed in).
TAU_HALF_LIFE_SHARES: tuple[float, ...] = tuple(_share_of_d(TABLE_EWA_TAU, i) for i in range(len(TABLE_BATCH_SIZES)))
BETA2_HALF_LIFE_SHARES: tuple[float, ...] = tuple(_share_of_d(TABLE_BETA2, i) for i in range(len(TABLE_BATCH_SIZES)))


def scaled_column(batch_size: int, b_ref: int) -> int:
    """The table column a batch size plays the role of: ``B·256/B_ref`` (nearest in log2)."""
    if b_ref <= 0:
        raise ValueError(f"b_ref must be a positive integer, but got {b_ref!r}.")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, but got {batch_size!r}.")
    log_b = math.log2(batch_size * PAPER_B_REF / b_ref)
    return min(range(len(TABLE_BATCH_SIZES)), key=lambda i: abs(math.log2(TABLE_BATCH_SIZES[i]) - log_b))


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """β2 and the τ tracked by one trial, with the horizons they imply."""

    beta2: float
    """AdamW β2."""
    ewa_taus: tuple[float, ...]
    """EWA decays tracked at once (increasing)."""
    tau_half_life_tokens: tuple[float, ...]
    """Half-life of each τ in tokens (``h·B·T``)."""
    beta2_half_life_tokens: float
    """Half-life of β2 in tokens."""


def study_recipe(rule: str, *, batch_size: int, context_tokens: int, d_tokens: int, b_ref: int) -> Recipe:
    """β2 and τ of a trial of a study (module section above; DESIGN.md §1, "Recipe defaults").

    ``paper_table``: the paper's β2 and τ at ``batch_size`` sequences, plus the τ with half the
    and twice the half-life. ``scaled``: the half-lives of column ``B·256/B_ref`` as the same
    share of ``d_tokens``, converted to steps of ``batch_size·context_tokens`` tokens.
    """
    if rule not in RECIPE_RULES:
        raise ValueError(f"rule must be one of {RECIPE_RULES}, but got {rule!r}.")
    batch_tokens = batch_size * context_tokens
    if rule == "paper_table":
        tau_steps = half_life_steps(paper_ewa_tau(batch_size))
        beta2 = paper_beta2(batch_size)
    else:
        col = scaled_column(batch_size, b_ref)
        tau_steps = TAU_HALF_LIFE_SHARES[col] * d_tokens / batch_tokens
        beta2_steps = BETA2_HALF_LIFE_SHARES[col] * d_tokens / batch_tokens
        lo, hi = BETA2_RANGE
        beta2 = min(hi, max(lo, decay_for_half_life(beta2_steps)))
    taus = []
    for multiple in EWA_HALF_LIFE_MULTIPLES:
        tau = paper_ewa_tau(batch_size) if (rule == "paper_table" and multiple == 1.0) else \
            decay_for_half_life(multiple * tau_steps)
        taus.append(round(tau, 6))  # tags and metric keys print τ with %g
    taus = sorted(set(taus))
    return Recipe(
        beta2=round(beta2, 6),
        ewa_taus=tuple(taus),
        tau_half_life_tokens=tuple(half_life_steps(t) * batch_tokens for t in taus),
        beta2_half_life_tokens=half_life_steps(beta2) * batch_tokens,
    )
