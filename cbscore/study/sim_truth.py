"""The simulator's truths (:mod:`cbscore.study.simulate`): a setting's known steps-to-target curve
``S(B)`` and the B* that the paper's 20% rule reads off it.

Three kinds of truth (each a :class:`Truth`):

- :class:`TruthCurve`, the fitted form ``S(B) = S_min·(1 + B_noise/B)`` (McCandlish et al. 2018,
  eq. 2.11): read from ``setting,s_min,b_noise`` rows or derived from the paper's published laws;
- :class:`TableTruth`, a measured steps table used as given: ``ln S`` interpolated linearly in
  ``ln B`` between its batch sizes and extrapolated with its end slopes, never refitted;
- :class:`PenaltyTruth`, any truth times a small-batch penalty like the lab's own (the
  first doubling from ``B_ref`` steeper than ``S_min·(1 + B_noise/B)`` allows);
- :class:`KneeShiftTruth`, any truth moved along ``ln B`` (a knee that moves with D).

A truth's B* is the paper's rule applied to the true curve (:meth:`Truth.cbs`), so a structural
bias of the estimator is measured against the curve itself, not against the fitted form.
(Re-exported by :mod:`cbscore.study.simulate`.)
"""

from __future__ import annotations

import csv
import functools
import io
import math
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cbscore.analysis import cbs_closed_form
from cbscore.errors import ConfigError, DataError
from cbscore.study.spec import StudySpec

#: The largest batch size the 20% rule searches, as a multiple of ``B_ref`` (2^30): a truth whose
#: curve still passes there has no finite B* (``inf``).
CBS_SEARCH_RANGE = 2.0 ** 30
#: Grid points per e-fold of ``B`` on which :func:`rule_cbs` looks for the last passing batch size
#: before bisecting (a dip of the rule's margin narrower than 1/200 of an e-fold is not seen).
CBS_GRID_PER_EFOLD = 200


class Truth(ABC):
    """The known steps-to-target curve of one setting (any shape). The simulator scales it so that
    ``S(B_ref)`` sits at the reference run's ``D/(B_ref·T)`` steps (a scale of ``S`` leaves B*
    unchanged)."""

    kind: str = "truth"
    """What the report names this shape by."""

    @abstractmethod
    def steps(self, batch_size: float) -> float:
        """``S(B)``: steps to the target at batch size ``batch_size`` (sequences)."""

    def cbs(self, b_ref: float, overhead: float) -> float:
        """B* of the true curve by the paper's rule (:func:`rule_cbs`), computed once per (hashable) truth."""
        if self.__hash__ is None:  # (a mutable subclass: no cache)
            return rule_cbs(self.steps, b_ref, overhead)
        return _truth_cbs(self, float(b_ref), float(overhead))


@functools.lru_cache(maxsize=4096)
def _truth_cbs(truth: Truth, b_ref: float, overhead: float) -> float:
    """:func:`rule_cbs` of a (frozen, hashable) truth: every study of a simulation asks again."""
    return rule_cbs(truth.steps, b_ref, overhead)


def rule_cbs(steps, b_ref: float, overhead: float) -> float:
    """The paper's 20% rule on a curve ``steps(B)`` (Zhang et al. 2025, arXiv 2410.21676, §2.2;
    DESIGN.md §1): the largest ``B > B_ref`` with ``S(B) ≤ (1 + r)·S(B_ref)·B_ref/B``, i.e. with
    ``u(B) = ln(B·S(B)) − ln((1 + r)·B_ref·S(B_ref)) ≤ 0``. The last passing point of a log grid
    (:data:`CBS_GRID_PER_EFOLD`) is bisected against the next failing one; ``inf`` where the curve
    still passes at ``CBS_SEARCH_RANGE·B_ref``."""
    level = math.log1p(overhead) + math.log(b_ref) + math.log(steps(b_ref))
    span = math.log(CBS_SEARCH_RANGE)
    grid = math.log(b_ref) + np.linspace(0.0, span, int(span * CBS_GRID_PER_EFOLD) + 1)[1:]  # (G,) ln B

    def u(log_b: float) -> float:
        return log_b + math.log(steps(math.exp(log_b))) - level

    passing = [i for i, g in enumerate(grid) if u(g) <= 0]
    if not passing:  # fails just above B_ref: B* between B_ref (u = −ln(1 + r) < 0) and the first point
        lo, hi = math.log(b_ref), grid[0]
    elif passing[-1] == len(grid) - 1:
        return math.inf
    else:
        lo, hi = grid[passing[-1]], grid[passing[-1] + 1]
    for _ in range(80):  # u(lo) ≤ 0 < u(hi)
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if u(mid) <= 0 else (lo, mid)
    return math.exp(lo)


@dataclass(frozen=True, kw_only=True)
class TruthCurve(Truth):
    """The fitted form, ``S(B) = S_min·(1 + B_noise/B)``."""

    s_min: float
    """``S_min``: steps to target at infinite batch size."""
    b_noise: float
    """``B_noise`` in sequences (McCandlish et al.'s B_crit)."""
    kind = "S_min·(1 + B_noise/B)"

    def steps(self, batch_size: float) -> float:
        """``S(B) = S_min·(1 + B_noise/B)`` (McCandlish et al. 2018, eq. 2.11)."""
        return self.s_min * (1.0 + self.b_noise / batch_size)

    def cbs(self, b_ref: float, overhead: float) -> float:
        """The rule's closed form on this curve, ``(1 + r)·B_ref + r·B_noise`` (DESIGN.md §1)."""
        return float(cbs_closed_form(self.b_noise, b_ref=b_ref, overhead=overhead))


@dataclass(frozen=True, kw_only=True)
class TableTruth(Truth):
    """A measured curve used as given: ``ln S`` linear in ``ln B`` between the table's batch sizes,
    and past either end along the slope of its last two points (no model fitted)."""

    batch_sizes: tuple[float, ...]
    """The measured batch sizes, ascending (sequences; two or more)."""
    steps_at: tuple[float, ...]
    """``S`` at each of them (steps)."""
    kind = "steps table (ln S interpolated in ln B)"

    def __post_init__(self) -> None:
        if len(self.batch_sizes) < 2 or list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ConfigError("batch_sizes", self.batch_sizes, "must be two or more distinct ascending batch sizes")
        if len(self.steps_at) != len(self.batch_sizes) or not all(s > 0 and math.isfinite(s) for s in self.steps_at):
            raise ConfigError("steps_at", self.steps_at, "must be one positive number of steps per batch size")

    def steps(self, batch_size: float) -> float:
        """``S(B)`` interpolated linearly on log–log axes (extrapolated with the end slopes)."""
        lb, ls = np.log(self.batch_sizes), np.log(self.steps_at)  # (K,), (K,)
        x = math.log(batch_size)
        if x < lb[0]:
            i = 0
        elif x > lb[-1]:
            i = len(lb) - 2
        else:
            return math.exp(float(np.interp(x, lb, ls)))
        slope = (ls[i + 1] - ls[i]) / (lb[i + 1] - lb[i])
        return math.exp(float(ls[i] + slope * (x - lb[i])))


@dataclass(frozen=True, kw_only=True)
class PenaltyTruth(Truth):
    """A base truth times a small-batch penalty, ``S(B) = S_base(B)·(1 + p·max(0, log2(2·B_ref/B)))``:
    nothing from ``2·B_ref`` up, a factor ``1 + p`` at ``B_ref`` and ``p`` more per halving below.
    The shape of the lab's own curves (in ``docs/results/reproduce/earlier`` S(2)/S(4)
    grows from 1.49 to 2.18 with D, while S(16)/S(32) falls), so the first doubling's ratio
    ``S(B_ref)/S(2·B_ref) = (1 + p)·S_base(B_ref)/S_base(2·B_ref)`` can exceed the 2 that
    ``S_min·(1 + B_noise/B)`` allows."""

    base: Truth
    """The curve the penalty multiplies."""
    penalty: float
    """``p``: the extra share of steps at ``B_ref`` (dimensionless, ≥ 0)."""
    b_ref: float
    """``B_ref`` of the study (sequences)."""

    @property
    def kind(self) -> str:
        return f"{self.base.kind} × (1 + p·max(0, log2(2·B_ref/B)))"

    def steps(self, batch_size: float) -> float:
        return self.base.steps(batch_size) * (1.0 + self.penalty * max(0.0, math.log2(2.0 * self.b_ref / batch_size)))


@dataclass(frozen=True, kw_only=True)
class KneeShiftTruth(Truth):
    """A base truth moved along ``ln B``: ``S(B) = S_base(B/f)``. Every batch size of its shape is
    ``f`` times larger (for ``S_min·(1 + B_noise/B)``: ``B_noise·f``), so a factor that grows with D is
    a knee that moves with D, the paper's finding (Zhang et al. 2025, §4: ``B* ∝ D^0.47``)."""

    base: Truth
    """The curve that is moved."""
    factor: float
    """``f``: how many times larger the knee's batch sizes are (dimensionless, > 0)."""

    @property
    def kind(self) -> str:
        return f"{self.base.kind} with its knee moved ×(D/D0)^γ"

    def steps(self, batch_size: float) -> float:
        return self.base.steps(batch_size / self.factor)


def parse_truth_shape(text: str) -> dict[str, tuple[float, float]]:
    """``penalty:P0[,GAMMA]``, ``knee:GAMMA`` or both joined by ``+`` (``--truth-shape``) →
    ``{"penalty": (P0, GAMMA), "knee": (1, GAMMA)}`` (:func:`apply_truth_shape`)."""
    out: dict[str, tuple[float, float]] = {}
    for part in (text or "").split("+"):
        m = re.fullmatch(r"\s*(penalty|knee)\s*:\s*([^,\s]+)\s*(?:,\s*([^,\s]+)\s*)?", part)
        try:
            if m is None or m.group(1) in out or (m.group(1) == "knee" and m.group(3) is not None):
                raise ValueError
            a, b = float(m.group(2)), float(m.group(3) or 0.0)
        except ValueError:
            raise ConfigError("--truth-shape", text, "must be penalty:P0[,GAMMA], knee:GAMMA, or both joined "
                                                     "by + (numbers)") from None
        if m.group(1) == "knee":
            a, b = 1.0, a
        if not (math.isfinite(a) and a >= 0 and math.isfinite(b)):
            raise ConfigError("--truth-shape", text, "needs P0 ≥ 0 and finite exponents")
        out[m.group(1)] = (a, b)
    return out


def apply_truth_shape(truth: Mapping[str, Truth], spec: StudySpec, shape: str) -> dict[str, Truth]:
    """Every setting's truth reshaped by ``shape`` (:func:`parse_truth_shape`), in a setting of D
    tokens with D0 the smallest D of the spec: ``knee:GAMMA`` moves the curve to ``S(B/f)``,
    ``f = (D/D0)^GAMMA`` (:class:`KneeShiftTruth`: B_noise ∝ D^GAMMA); then ``penalty:P0[,GAMMA]``
    multiplies it by the small-batch penalty with ``p = P0·(D/D0)^GAMMA`` (:class:`PenaltyTruth`), so
    a penalty that grows with D is a first-doubling trend that leaves the knee where it was."""
    parts = parse_truth_shape(shape)
    settings = spec.resolve_settings()
    d0 = min(s.tokens for s in settings)
    out: dict[str, Truth] = {}
    for s in settings:
        t = truth[s.setting_id]
        if "knee" in parts:
            t = KneeShiftTruth(base=t, factor=(s.tokens / d0) ** parts["knee"][1])
        if "penalty" in parts:
            p0, gamma = parts["penalty"]
            t = PenaltyTruth(base=t, penalty=p0 * (s.tokens / d0) ** gamma, b_ref=spec.b_ref)
        out[s.setting_id] = t
    return out


# ------------------------------------------------------------------------------------------ truth
def read_truth(source: str | os.PathLike, spec: StudySpec) -> dict[str, Truth]:
    """The truth of every setting of ``spec`` from a CSV: either ``setting,s_min,b_noise`` rows
    (optionally ``n_params,tokens``; a :class:`TruthCurve` each), or a steps table in the ``cbs fit``
    format used as given (a :class:`TableTruth` each: per batch size the best reached steps over
    learning rates of each seed, averaged over seeds in ``ln S``; never refitted). A truth row
    matches a spec setting by setting id, else by (``n_params``, ``tokens``).
    """
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError) as exc:
        raise DataError(f"--truth {path}: cannot be read ({type(exc).__name__}).") from None
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise DataError(f"--truth {path}: no rows.")
    cols = set(rows[0])
    curves: list[tuple[str, float | None, float | None, Truth]] = []
    if {"s_min", "b_noise"} <= cols:
        for i, row in enumerate(rows, start=2):
            try:
                curve = TruthCurve(s_min=float(row["s_min"]), b_noise=float(row["b_noise"]))
            except ValueError:
                raise DataError(f"--truth {path}: line {i}: s_min and b_noise must be numbers.") from None
            if not (curve.s_min > 0 and curve.b_noise > 0 and math.isfinite(curve.s_min * curve.b_noise)):
                raise DataError(f"--truth {path}: line {i}: s_min and b_noise must be positive.")
            curves.append((row.get("setting", ""), _num(row.get("n_params")), _num(row.get("tokens")), curve))
    else:
        from cbscore.analysis import read_steps_csv

        by_setting: dict[str, list[dict]] = {}
        for row in read_steps_csv(path):
            if row.get("outcome", "reached") == "reached" and row.get("steps") is not None:
                by_setting.setdefault(row["setting"], []).append(row)
        for name, srows in by_setting.items():
            best: dict[tuple[float, int | None], float] = {}  # (B, seed) -> fewest steps over rates
            for r in srows:
                key = (float(r["batch_size"]), r.get("seed"))
                best[key] = min(best.get(key, math.inf), float(r["steps"]))
            sizes = sorted({b for b, _ in best})
            if len(sizes) < 2:
                raise DataError(f"--truth {path}: setting {name!r}: a truth table needs two or more batch sizes "
                                f"that reached the target, but got {len(sizes)}.")
            log_s = [float(np.mean([math.log(s) for (b, _), s in best.items() if b == size])) for size in sizes]
            curves.append((name, _num(srows[0].get("n_params")), _num(srows[0].get("tokens")),
                           TableTruth(batch_sizes=tuple(sizes), steps_at=tuple(math.exp(v) for v in log_s))))
    out: dict[str, Truth] = {}
    for setting in spec.resolve_settings():
        match = [c for name, n, d, c in curves if name == setting.setting_id]
        if not match:
            match = [c for name, n, d, c in curves
                     if n is not None and d is not None and math.isclose(n, setting.n_params, rel_tol=1e-3)
                     and math.isclose(d, setting.tokens, rel_tol=1e-3)]
        if not match:
            raise DataError(f"--truth {path}: no curve for setting {setting.setting_id!r} (match by setting id, "
                            f"or by n_params={setting.n_params} and tokens={setting.tokens}).")
        out[setting.setting_id] = match[0]
    return out


def _num(value) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


# ------------------------------------------------------------------------- the paper's own curves
#: The paper's published laws (Zhang et al. 2025, §4, N in millions, D in billions of tokens):
#: Chinchilla ``B* = 93.20·N^0.47``; fixed D = 3.072B ``B* = 621.3·N^0.087``; fixed N,
#: ``B* ∝ D^0.47``, anchored here at the Chinchilla law's value for the 302M model at 6.144B.
PAPER_CHINCHILLA_LAW = (93.20, 0.47)
PAPER_FIXED_D_LAW = (621.3, 0.087)
PAPER_FIXED_N_EXPONENT = 0.47


def paper_truth(spec: StudySpec) -> dict[str, Truth]:
    """Truth curves of a ``paper-*`` spec from the paper's fitted laws: B* of each setting from its
    law, ``B_noise = (B* − (1 + r)·B_ref)/r`` (DESIGN.md §1, the 20% rule's closed form), and
    ``S_min`` that puts ``S(B_ref)`` at ``D/(B_ref·T)`` steps (the reference run's length)."""
    settings = spec.resolve_settings()
    n_m = {s.setting_id: s.n_params / 1e6 for s in settings}
    d_b = {s.setting_id: s.tokens / 1e9 for s in settings}
    out = {}
    for s in settings:
        if spec.kind == "fixed_d":
            c, a = PAPER_FIXED_D_LAW
            cbs = c * n_m[s.setting_id] ** a
        elif spec.kind == "fixed_n":
            c, a = PAPER_CHINCHILLA_LAW
            anchor_d = 20 * s.n_params / 1e9
            cbs = c * n_m[s.setting_id] ** a * (d_b[s.setting_id] / anchor_d) ** PAPER_FIXED_N_EXPONENT
        else:
            c, a = PAPER_CHINCHILLA_LAW
            cbs = c * n_m[s.setting_id] ** a
        b_noise = (cbs - (1 + spec.overhead) * spec.b_ref) / spec.overhead
        if b_noise <= 0:
            raise ConfigError("--truth", "paper", f"the paper's law gives B* = {cbs:.0f} ≤ (1 + r)·B_ref for "
                              f"{s.setting_id!r}: no positive B_noise")
        s_ref = s.tokens / (spec.b_ref * spec.context_tokens)
        out[s.setting_id] = TruthCurve(s_min=s_ref / (1 + b_noise / spec.b_ref), b_noise=b_noise)
    return out


def write_truth_csv(truth: Mapping[str, Truth], spec: StudySpec, path: str | os.PathLike) -> None:
    """What ``--truth`` reads, written atomically: ``setting,n_params,tokens,s_min,b_noise`` where every
    truth is a :class:`TruthCurve`, else a steps table ``setting,batch_size,steps,n_params,tokens`` of
    each truth at the spec's batch sizes (read back as a :class:`TableTruth`: the same curve between
    them)."""
    settings = {s.setting_id: s for s in spec.resolve_settings()}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if all(isinstance(c, TruthCurve) for c in truth.values()):
        w.writerow(["setting", "n_params", "tokens", "s_min", "b_noise"])
        for sid, c in truth.items():
            w.writerow([sid, settings[sid].n_params, settings[sid].tokens, f"{c.s_min:.6g}", f"{c.b_noise:.6g}"])
    else:
        w.writerow(["setting", "batch_size", "steps", "n_params", "tokens"])
        for sid, c in truth.items():
            for b in spec.batch_sizes:
                w.writerow([sid, b, f"{c.steps(b):.10g}", settings[sid].n_params, settings[sid].tokens])
    tmp = Path(f"{path}.tmp")
    tmp.write_text(buf.getvalue())
    os.replace(tmp, path)
