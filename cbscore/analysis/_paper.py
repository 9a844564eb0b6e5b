"""This study's exponents beside the paper's, and whether it supports "B* scales with D, not N".

Zhang et al. 2025 (arXiv 2410.21676, §4 and Figure 1) find that the critical batch size grows
with the data size ``D`` (``B* ∝ D^0.47`` at fixed ``N``) and barely with the model size ``N`` at
fixed ``D`` (``B* ∝ N^0.087``); along the Chinchilla line ``D ∝ N`` it grows like ``N^0.47``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from cbscore.analysis._interval import LEVEL, percentile_interval

#: The paper's exponent of ``D`` at fixed ``N`` (Zhang et al. 2025, §4).
PAPER_EXPONENT_D = 0.47
#: The paper's exponent of ``N`` at fixed ``D`` (Zhang et al. 2025, §4: ``B* = 621.3·N^0.087``).
PAPER_EXPONENT_N = 0.087
#: The paper's exponent of ``N`` with ``D ∝ N`` (Chinchilla, "N and D together": ``B* = 93.20·N^0.47``).
PAPER_EXPONENT_CHINCHILLA = 0.47

#: Verdicts of :func:`scales_with_d_not_n`.
SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive"


@dataclass(frozen=True, kw_only=True)
class ExponentEstimate:
    """One exponent this study measured, and which law it comes from."""

    value: float
    """The fitted exponent."""
    ci: tuple[float, float] | None
    """Its 95% interval; ``None`` where the data cannot support one."""
    source: str
    """The law it comes from, in words (e.g. ``"law in D at fixed N = 1.51e+08, 3 settings"``)."""
    samples: np.ndarray | None = field(default=None, compare=False, repr=False)
    """(R,) the law's draws of this exponent (paired across laws, see :func:`scales_with_d_not_n`)."""


@dataclass(frozen=True, kw_only=True)
class PaperComparison:
    """This study's exponents beside the paper's, and the verdict on "B* scales with D, not N"."""

    exponent_d: ExponentEstimate | None
    """Exponent of ``D`` at fixed ``N`` (paper: :data:`PAPER_EXPONENT_D`)."""
    exponent_n: ExponentEstimate | None
    """Exponent of ``N`` at fixed ``D`` (paper: :data:`PAPER_EXPONENT_N`)."""
    exponent_chinchilla: ExponentEstimate | None
    """Exponent of ``N`` with ``D ∝ N`` (paper: :data:`PAPER_EXPONENT_CHINCHILLA`)."""
    verdict: str
    """:data:`SUPPORTED`, :data:`NOT_SUPPORTED` or :data:`INCONCLUSIVE`."""
    reason: str
    """One sentence: which condition held or failed."""
    trend_note: str = ""
    """Which doublings of the D law carry a trend (:meth:`LawShape.sentence`), when checked."""

    @property
    def sentence(self) -> str:
        """The verdict in words, for a page."""
        head = {
            SUPPORTED: "This study supports the paper's finding that B* scales with D, not with N",
            NOT_SUPPORTED: "This study does not support the paper's finding that B* scales with D, not with N",
            INCONCLUSIVE: "This study is inconclusive on the paper's finding that B* scales with D, not with N",
        }[self.verdict]
        return f"{head}: {self.reason}."


def _usable(ci: tuple[float, float] | None) -> tuple[float, float] | None:
    if ci is None or any(math.isnan(v) for v in ci):
        return None
    return ci


def _fmt(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def scales_with_d_not_n(
    d_samples: np.ndarray | None, n_samples: np.ndarray | None, level: float = LEVEL
) -> tuple[str, str]:
    """The rule: does a study support "B* scales with D, not with N"? Read off joint draws.

    ``d_samples`` and ``n_samples`` are draws of the ``D``-exponent at fixed ``N`` (``beta_D``) and
    of the ``N``-exponent at fixed ``D`` (``alpha_N``), paired: draw ``r`` of each comes from the
    same bootstrap draw (the joint law's draws are paired by construction; laws over different
    settings share their random numbers, :func:`fit_scaling_laws`). With ``tail = (1 - level)/2``:

    - supported when the lower ``tail`` quantile of ``beta_D`` is above 0 *and* that of
      ``beta_D - alpha_N`` is above 0 (B* grows with ``D``, and faster than with ``N``);
    - not supported when the upper ``tail`` quantile of ``beta_D`` is below 0 or that of
      ``beta_D - alpha_N`` is below 0;
    - inconclusive otherwise, or without draws.

    An ``N``-exponent interval that merely includes 0 is no evidence that ``B*`` does not grow
    with ``N`` (DESIGN.md §1): a wide one, as from few settings, includes 0 and ``beta_D`` alike.

    Returns:
        ``(verdict, reason)``: the verdict and one clause with the quantiles it rests on.
    """
    if d_samples is None:
        return INCONCLUSIVE, (
            "there is no interval for the D-exponent at fixed N, so no draws (it needs a law in D over 3 or more "
            "settings that share N, or a joint law over 5 or more)"
        )
    if n_samples is None:
        return INCONCLUSIVE, (
            "there is no interval for the N-exponent at fixed D, so no draws (it needs a law in N over 3 or more "
            "settings that share D, or a joint law over 5 or more)"
        )
    d, n = np.asarray(d_samples, dtype=float), np.asarray(n_samples, dtype=float)
    if d.shape != n.shape or d.ndim != 1:
        return INCONCLUSIVE, (
            f"the draws of the two exponents do not pair up ({d.size} and {n.size} draws)"
        )
    both = np.isfinite(d) & np.isfinite(n)
    if both.sum() < 2:
        return INCONCLUSIVE, "no draw gives both exponents"
    d_ci = percentile_interval(d[both], level)
    diff_ci = percentile_interval(d[both] - n[both], level)
    pct = f"{level:.0%}"
    if d_ci[1] < 0:
        return NOT_SUPPORTED, f"B* falls with D at fixed N (D-exponent {pct} interval {_fmt(d_ci)} lies below 0)"
    if diff_ci[1] < 0:
        return NOT_SUPPORTED, (
            f"B* grows faster with N than with D: D-exponent minus N-exponent over the same draws "
            f"{_fmt(diff_ci)} lies below 0"
        )
    if d_ci[0] > 0 and diff_ci[0] > 0:
        return SUPPORTED, (
            f"the D-exponent's {pct} interval {_fmt(d_ci)} lies above 0 and so does D-exponent minus "
            f"N-exponent over the same draws, {_fmt(diff_ci)}"
        )
    if d_ci[0] <= 0:
        return INCONCLUSIVE, f"the D-exponent's {pct} interval {_fmt(d_ci)} includes 0"
    return INCONCLUSIVE, (
        f"the D-exponent's {pct} interval {_fmt(d_ci)} lies above 0, but D-exponent minus N-exponent "
        f"over the same draws, {_fmt(diff_ci)}, includes 0"
    )


def _pick(laws, joint_value, joint_ci, joint_source, joint_samples=None) -> ExponentEstimate | None:
    """The law over the most settings that has an interval, else the joint law's exponent if it
    has one, else whichever estimate exists (shown, without an interval)."""
    candidates = [
        ExponentEstimate(value=law.exponent, ci=law.exponent_ci, samples=law.exponent_samples, source=law_source(law))
        for law in sorted(laws, key=lambda law: -len(law.x))
    ]
    if joint_value is not None:
        candidates.append(ExponentEstimate(value=joint_value, ci=joint_ci, source=joint_source,
                                           samples=joint_samples))
    with_ci = [c for c in candidates if _usable(c.ci) is not None]
    return (with_ci or candidates or [None])[0]


def law_source(law) -> str:
    """A one-variable law in words, as :class:`ExponentEstimate.source` and the shape checks name it."""
    return f"law in {law.variable.upper()} {_fixed_words(law)}, {len(law.x)} settings"


def joint_source(joint) -> str:
    """The joint law in words."""
    return f"joint law B* = c·N^α·D^β, {len(joint.cbs)} settings"


def _fixed_words(law) -> str:
    if law.fixed_name == "tokens":
        return "at fixed D" + ("" if law.fixed_value is None else f" = {law.fixed_value:.4g}")
    if law.fixed_name == "n_params":
        return "at fixed N" + ("" if law.fixed_value is None else f" = {law.fixed_value:.4g}")
    if law.fixed_name == "tokens_per_param":
        return f"with D ∝ N at {law.fixed_value:.3g} tokens per parameter"
    return ""


def compare_with_paper(laws, *, without_ref=None, shapes: Sequence = ()) -> PaperComparison:
    """This study's exponents (from a :class:`ScalingLaws`) beside the paper's, with the verdict
    of :func:`scales_with_d_not_n` read off the two exponents' paired draws.

    With ``without_ref`` (the laws of ``B*`` fitted without the reference point) and ``shapes``
    (:class:`cbscore.analysis.LawShape` of each law; :meth:`TableAnalysis.paper_comparison` passes
    both), "supported" also needs (DESIGN.md §1, "Shape before slope"): the D-exponent without the
    reference point above 0 at 97.5%, and the D-slope of the doubling ratios beyond the first
    doubling from ``B_ref``, pooled, above 0 at 97.5%. A trend carried by the first doubling alone
    is a small-batch effect and is named as one; later doublings that fall with ``D`` make it
    "not supported".
    """
    joint = laws.joint
    joint_src = joint_source(joint) if joint is not None else ""
    joint_d = joint_n = None
    if joint is not None and joint.samples is not None:
        joint_n, joint_d = joint.samples[:, 1], joint.samples[:, 2]
    exponent_d = _pick(laws.d_laws, joint and joint.exponent_d, joint and joint.exponent_d_ci, joint_src, joint_d)
    exponent_n = _pick(laws.n_laws, joint and joint.exponent_n, joint and joint.exponent_n_ci, joint_src, joint_n)
    chinchilla = _pick(laws.chinchilla, None, None, "")
    usable = [e.samples if e is not None and _usable(e.ci) is not None else None for e in (exponent_d, exponent_n)]
    verdict, reason = scales_with_d_not_n(*usable)
    shape = None
    if exponent_d is not None:
        shape = next((s for s in shapes if s.variable == "d" and s.source == exponent_d.source), None)
    trend_note = "" if shape is None else shape.sentence()
    if verdict == SUPPORTED and (without_ref is not None or shapes):
        verdict, reason = _shape_verdict(reason, without_ref, shape)
    elif shape is not None and shape.first is not None and shape.first.positive and not (
            shape.beyond is not None and shape.beyond.positive):
        reason += ("; the D-trend that the doubling ratios show is carried by the first doubling from B_ref "
                   "alone (a small-batch effect, not a moving critical batch size)")
    return PaperComparison(
        exponent_d=exponent_d,
        exponent_n=exponent_n,
        exponent_chinchilla=chinchilla,
        verdict=verdict,
        reason=reason,
        trend_note=trend_note,
    )


def _shape_verdict(reason: str, without_ref, shape) -> tuple[str, str]:
    """The "supported" of the exponents, checked against the shape of ``S(B)``."""
    if shape is None or shape.beyond is None:
        return INCONCLUSIVE, (
            f"{reason}; but whether the trend holds beyond the first doubling from B_ref cannot be checked "
            "(it needs the doubling ratios of a law in D beyond B = 2·B_ref, seed-paired)"
        )
    beyond = shape.beyond
    first = shape.first
    first_words = ("" if first is None else
                   f" while the first doubling's moves by {first.slope:+.3f} [{first.ci[0]:+.3f}, {first.ci[1]:+.3f}]")
    if beyond.negative:
        return NOT_SUPPORTED, (
            f"{reason}; but the doublings beyond the first from B_ref fall with D (pooled slope of ln S(B)/S(2B) "
            f"{beyond.slope:+.3f} [{beyond.ci[0]:+.3f}, {beyond.ci[1]:+.3f}] per e-fold of D){first_words}: the "
            "knee does not move with D"
        )
    if not beyond.positive:
        effect = (" The trend is carried by the first doubling from B_ref alone: a small-batch effect, not a "
                  "moving critical batch size" if first is not None and first.positive else "")
        return INCONCLUSIVE, (
            f"{reason}; but beyond the first doubling from B_ref the ratios S(B)/S(2B) do not grow with D (pooled "
            f"slope {beyond.slope:+.3f} [{beyond.ci[0]:+.3f}, {beyond.ci[1]:+.3f}] per e-fold of D){first_words}."
            f"{effect}"
        ).rstrip(".")
    wo_d = None
    if without_ref is not None:
        picked = compare_with_paper(without_ref)
        wo_d = picked.exponent_d
    wo_ci = None if wo_d is None else _usable(wo_d.ci)
    if wo_ci is None:
        return INCONCLUSIVE, f"{reason}; but without the reference point there is no interval for the D-exponent"
    if wo_ci[0] <= 0:
        return INCONCLUSIVE, (
            f"{reason}; but without the reference point the D-exponent's interval {_fmt(wo_ci)} includes 0"
        )
    return SUPPORTED, (
        f"{reason}; the trend holds without the reference point (D-exponent {_fmt(wo_ci)}) and beyond the first "
        f"doubling from B_ref (pooled slope of ln S(B)/S(2B) {beyond.slope:+.3f} [{beyond.ci[0]:+.3f}, "
        f"{beyond.ci[1]:+.3f}] per e-fold of D)"
    )
