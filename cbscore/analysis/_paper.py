"""This study's exponents beside the paper's, and whether it supports "B* scales with D, not N".

Zhang et al. 2025 (arXiv 2410.21676, §4 and Figure 1) find that the critical batch size grows
with the data size ``D`` (``B* ∝ D^0.47`` at fixed ``N``) and barely with the model size ``N`` at
fixed ``D`` (``B* ∝ N^0.087``); along the Chinchilla line ``D ∝ N`` it grows like ``N^0.47``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    d_ci: tuple[float, float] | None, n_ci: tuple[float, float] | None
) -> tuple[str, str]:
    """The rule: does a study support "B* scales with D, not with N"?

    Supported when the interval of the ``D``-exponent at fixed ``N`` excludes 0 (lies above it)
    and the interval of the ``N``-exponent at fixed ``D`` lies below the ``D``-exponent's or
    contains 0. Not supported when ``B*`` falls with ``D`` or the ``N``-exponent's interval lies
    wholly above the ``D``-exponent's. Inconclusive otherwise (a missing interval, a
    ``D``-exponent interval that contains 0, or an ``N``-exponent interval above 0 that overlaps
    the ``D``-exponent's).

    Returns:
        ``(verdict, reason)``: the verdict and one clause saying which condition held or failed.
    """
    d_ci, n_ci = _usable(d_ci), _usable(n_ci)
    if d_ci is None:
        return INCONCLUSIVE, (
            "there is no interval for the D-exponent at fixed N (it needs a law in D over 3 or more "
            "settings that share N, or a joint law over 5 or more)"
        )
    if n_ci is None:
        return INCONCLUSIVE, (
            "there is no interval for the N-exponent at fixed D (it needs a law in N over 3 or more "
            "settings that share D, or a joint law over 5 or more)"
        )
    (d_lo, d_hi), (n_lo, n_hi) = d_ci, n_ci
    if d_hi < 0:
        return NOT_SUPPORTED, f"B* falls with D at fixed N (D-exponent interval {_fmt(d_ci)} lies below 0)"
    if d_lo <= 0:
        return INCONCLUSIVE, f"the D-exponent's interval {_fmt(d_ci)} includes 0"
    if n_lo <= 0 <= n_hi:
        return SUPPORTED, (
            f"the D-exponent's interval {_fmt(d_ci)} excludes 0 and the N-exponent's {_fmt(n_ci)} "
            "includes 0"
        )
    if n_hi < d_lo:
        return SUPPORTED, (
            f"the D-exponent's interval {_fmt(d_ci)} excludes 0 and the N-exponent's {_fmt(n_ci)} "
            "lies below it"
        )
    if n_lo > d_hi:
        return NOT_SUPPORTED, (
            f"B* grows faster with N than with D: the N-exponent's interval {_fmt(n_ci)} lies above "
            f"the D-exponent's {_fmt(d_ci)}"
        )
    return INCONCLUSIVE, (
        f"the N-exponent's interval {_fmt(n_ci)} excludes 0 and overlaps the D-exponent's {_fmt(d_ci)}"
    )


def _pick(laws, joint_value, joint_ci, joint_source) -> ExponentEstimate | None:
    """The law over the most settings that has an interval, else the joint law's exponent if it
    has one, else whichever estimate exists (shown, without an interval)."""
    candidates = [
        ExponentEstimate(
            value=law.exponent, ci=law.exponent_ci,
            source=f"law in {law.variable.upper()} {_fixed_words(law)}, {len(law.x)} settings",
        )
        for law in sorted(laws, key=lambda law: -len(law.x))
    ]
    if joint_value is not None:
        candidates.append(ExponentEstimate(value=joint_value, ci=joint_ci, source=joint_source))
    with_ci = [c for c in candidates if _usable(c.ci) is not None]
    return (with_ci or candidates or [None])[0]


def _fixed_words(law) -> str:
    if law.fixed_name == "tokens":
        return "at fixed D" + ("" if law.fixed_value is None else f" = {law.fixed_value:.4g}")
    if law.fixed_name == "n_params":
        return "at fixed N" + ("" if law.fixed_value is None else f" = {law.fixed_value:.4g}")
    if law.fixed_name == "tokens_per_param":
        return f"with D ∝ N at {law.fixed_value:.3g} tokens per parameter"
    return ""


def compare_with_paper(laws) -> PaperComparison:
    """This study's exponents (from a :class:`ScalingLaws`) beside the paper's, with the verdict
    of :func:`scales_with_d_not_n`."""
    joint = laws.joint
    joint_source = f"joint law B* = c·N^α·D^β, {len(joint.cbs)} settings" if joint is not None else ""
    exponent_d = _pick(laws.d_laws, joint and joint.exponent_d, joint and joint.exponent_d_ci, joint_source)
    exponent_n = _pick(laws.n_laws, joint and joint.exponent_n, joint and joint.exponent_n_ci, joint_source)
    chinchilla = _pick(laws.chinchilla, None, None, "")
    verdict, reason = scales_with_d_not_n(
        exponent_d.ci if exponent_d else None, exponent_n.ci if exponent_n else None
    )
    return PaperComparison(
        exponent_d=exponent_d,
        exponent_n=exponent_n,
        exponent_chinchilla=chinchilla,
        verdict=verdict,
        reason=reason,
    )
