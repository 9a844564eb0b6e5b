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
from collections.abc import Iterable
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
# The table as half-lives in tokens, and the rules that carry it to any T, B and D (issues 10, 19).
#
# What the table fixes is a horizon, not a decay: the EWA keeps the last ``1/(1 − τ)`` steps and
# Adam's second moment the last ``1/(1 − β2)``. A decay ``x`` forgets half its memory in
# ``h = ln ½ / ln x`` steps, i.e. ``h·B·T`` tokens. At the paper's scale (T = 512, B_ref = 256,
# the 151M model's D = 3.072B, the fixed-D budget of §3) those half-lives are a small share of a
# run: τ's from 1.5% (B = 64) to 19% (B = 16384) of D, β2's from 0.5% to 3.7%. A batch size B of a
# study with reference batch size B_ref plays the role of the paper's column B·256/B_ref (nearest
# on a log scale); its half-lives in tokens are that column's shares of a D, and ``x = ½^(1/h)``
# with ``h`` in steps of B·T tokens. Which D:
#
# * ``fixed`` (the default): the study's reference D, ``√(D_min·D_max)`` over its settings, for
#   every setting: one β2 and one set of τ per batch size for the whole study, as the paper kept
#   one table for all its D. Were the horizons to follow each setting's D, a fixed-N study's
#   D-exponent would measure the recipe too. The geometric centre keeps every setting's horizons
#   within √(D_max/D_min) of the paper's share (×2.8 either way for a factor 8 in D); the largest D
#   would stretch the smallest setting's τ over a third of its run, the smallest would shrink the
#   largest setting's by the whole factor.
# * ``scaled``: each setting's own D (kept for comparison).
#
# Then three bounds, the same for both rules:
#
# * β2 keeps its horizon **in tokens** below 8·B_ref (Marek et al. 2025, arXiv 2507.07101: hold
#   β2's token half-life and ``β2 = β2_ref^(B/B_ref)``), so a smaller batch gets a larger β2. The
#   table does so itself: its β2 half-lives are 14–45M tokens from B = 64 to 2048, where it first
#   reaches its floor 0.95 (2048 = 8·B_ref). The half-life in tokens is therefore at least that of
#   β2 = 0.95 at 8·B_ref: ``13.5·8·B_ref·T`` tokens (the *horizon floor*; at the paper's scale it
#   binds nowhere). On a short run, where the share of D is a step or two, β2 is 0.95 at 8·B_ref
#   and ``0.95^(B/(8·B_ref))`` below it: 0.9936 at B_ref, 0.9747 at 4·B_ref.
# * β2 stays within the paper's range [0.95, 0.999] per cell: below 0.95 the second moment is a
#   few-step estimate (the paper never went lower; larger batches than 8·B_ref get 0.95, as in
#   the table), above 0.999 (a 693-step half-life) it outlives a short run (the *ceiling*).
# * τ's half-life is at least 4 steps (``TAU_MIN_HALF_LIFE_STEPS``; τ ≥ 0.8409): below it averaging
#   switches off (a one-step half-life is τ = 0.5). The three τ tracked are ×½, ×1 and ×2 that
#   half-life, floored or not, so they never collapse into one (at the floor: 2, 4 and 8 steps).
#
# At the paper's own scale either rule gives back the table; a 100-step run at T = 128 gets a τ
# horizon of a few steps instead of the 1,386 that τ = 0.9995 would average over.
# ---------------------------------------------------------------------------------------------

#: Context length (tokens), reference batch size (sequences) and D (tokens) at which the table's
#: half-lives are read as shares of D (Zhang et al. 2025, §3: T = 512, B_ref = 256, and the
#: fixed-D study's D = 3.072B, the 151M model's Chinchilla budget).
PAPER_CONTEXT_TOKENS = 512
PAPER_B_REF = 256
PAPER_ANCHOR_TOKENS = 3_072_000_000

#: Recipe rules of a study: ``fixed`` (half-lives as a share of the study's reference D: one
#: recipe per batch size for the whole study), ``scaled`` (a share of each setting's own D) or
#: ``paper_table`` (the table by batch size in sequences: the paper presets).
RECIPE_RULES = ("fixed", "scaled", "paper_table")
#: Several τ are tracked at once: the rule's half-life times each of these (the target crossing
#: uses the best of them, and the trial records which one it was).
EWA_HALF_LIFE_MULTIPLES: tuple[float, ...] = (0.5, 1.0, 2.0)
#: β2's floor and ceiling in every cell: the paper's own range (0.95 is a 13.5-step half-life,
#: 0.999 a 693-step one).
BETA2_RANGE = (0.95, 0.999)
#: β2's half-life in tokens is at least that of the floor β2 at this many times B_ref: the
#: table's first column at its floor, 2048, over its B_ref (= 8).
BETA2_FLOOR_BATCH_RATIO: float = TABLE_BATCH_SIZES[TABLE_BETA2.index(min(TABLE_BETA2))] / PAPER_B_REF
#: The middle τ's half-life is at least this many steps (the ×½ one's at least half of it).
TAU_MIN_HALF_LIFE_STEPS = 4.0


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


def reference_d_tokens(tokens: Iterable[int]) -> int:
    """The study's reference D of the ``fixed`` rule: the geometric centre ``√(D_min·D_max)`` of
    its settings' D (tokens), e.g. 141,421 for D = 50k, 141k and 400k."""
    values = [int(t) for t in tokens]
    if not values or min(values) <= 0:
        raise ValueError(f"tokens must be positive token counts, but got {values!r}.")
    return round(math.sqrt(min(values) * max(values)))


def beta2_horizon_floor_tokens(b_ref: int, context_tokens: int) -> float:
    """The least half-life of β2 in tokens: that of β2 = 0.95 at ``8·b_ref`` sequences
    (``13.5 · 8·B_ref · T``; module section above)."""
    return half_life_steps(BETA2_RANGE[0]) * BETA2_FLOOR_BATCH_RATIO * b_ref * context_tokens


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
    bounds: tuple[str, ...] = ()
    """The floors and ceilings that set a value here, in words (empty where none did): ``"β2
    ceiling 0.999"``, ``"β2 floor 0.95"``, ``"β2 horizon floor (0.95 at 8·B_ref)"``, ``"τ floor 4
    steps"``."""


def _beta2(column: int, d_tokens: float, batch_tokens: int, b_ref: int, context_tokens: int) -> tuple[float, str | None]:
    """β2 of the ``fixed``/``scaled`` rules and the bound that set it, if any."""
    share = BETA2_HALF_LIFE_SHARES[column] * d_tokens
    floor = beta2_horizon_floor_tokens(b_ref, context_tokens)
    beta2 = round(decay_for_half_life(max(share, floor) / batch_tokens), 6)
    lo, hi = BETA2_RANGE
    if beta2 < lo:
        return lo, f"β2 floor {lo:g}"
    if beta2 > hi:
        return hi, f"β2 ceiling {hi:g}"
    if floor > share * (1 + 1e-9):  # at the paper's scale they tie at B = 2048 up to rounding
        return beta2, f"β2 horizon floor ({lo:g} at {BETA2_FLOOR_BATCH_RATIO:g}·B_ref)"
    return beta2, None


def study_recipe(rule: str, *, batch_size: int, context_tokens: int, d_tokens: int, b_ref: int,
                 d_ref_tokens: int | None = None) -> Recipe:
    """β2 and τ of a trial of a study (module section above; DESIGN.md §1, "Recipe defaults").

    ``paper_table``: the paper's β2 and τ at ``batch_size`` sequences, plus the τ with half the
    and twice the half-life. ``scaled``: the half-lives of column ``B·256/B_ref`` as the same
    share of ``d_tokens`` (the setting's D), converted to steps of ``batch_size·context_tokens``
    tokens. ``fixed``: the same shares of ``d_ref_tokens`` (the study's reference D,
    :func:`reference_d_tokens`; ``None`` = ``d_tokens``, a trial that is its own reference). Both
    then take the bounds above, named in :attr:`Recipe.bounds`.
    """
    if rule not in RECIPE_RULES:
        raise ValueError(f"rule must be one of {RECIPE_RULES}, but got {rule!r}.")
    batch_tokens = batch_size * context_tokens
    bounds: list[str] = []
    if rule == "paper_table":
        tau_steps = half_life_steps(paper_ewa_tau(batch_size))
        beta2 = paper_beta2(batch_size)
    else:
        d = d_tokens if rule == "scaled" or d_ref_tokens is None else d_ref_tokens
        if d <= 0:
            raise ValueError(f"d_tokens must be a positive token count, but got {d!r}.")
        col = scaled_column(batch_size, b_ref)
        beta2, bound = _beta2(col, d, batch_tokens, b_ref, context_tokens)
        bounds += [bound] if bound else []
        tau_steps = TAU_HALF_LIFE_SHARES[col] * d / batch_tokens
        if tau_steps < TAU_MIN_HALF_LIFE_STEPS:
            tau_steps = TAU_MIN_HALF_LIFE_STEPS
            bounds.append(f"τ floor {TAU_MIN_HALF_LIFE_STEPS:g} steps")
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
        bounds=tuple(bounds),
    )


def spec_recipe(spec, *, batch_size: int, d_tokens: int) -> Recipe:
    """The recipe of a study's cell: :func:`study_recipe` under ``spec.recipe``, with the study's
    reference D taken over ``spec.resolve_settings()`` (the spec's own ``beta2``/``ewa_taus``, where
    given, override it: ``cbscore.study.planner.cell_recipe``); a study extended by settings keeps
    the reference D it had (``spec.recipe_d_ref_tokens``)."""
    d_ref = getattr(spec, "recipe_d_ref_tokens", None) or reference_d_tokens(s.tokens for s in spec.resolve_settings())
    return study_recipe(spec.recipe, batch_size=batch_size, context_tokens=spec.context_tokens, d_tokens=d_tokens,
                        b_ref=spec.b_ref, d_ref_tokens=d_ref)


def trial_recipe(*, batch_size: int, context_tokens: int, d_tokens: int) -> Recipe:
    """The recipe of a trial outside any study (``cbs train``, a ``TrainConfig`` without β2/τ):
    the ``fixed`` rule with the trial as its own reference run (``B_ref = B``, D = its budget)."""
    return study_recipe("fixed", batch_size=batch_size, context_tokens=context_tokens, d_tokens=d_tokens,
                        b_ref=batch_size, d_ref_tokens=d_tokens)
