"""The simulator's truths (:mod:`cbscore.study.simulate`): a setting's known steps-to-target
curve ``S(B) = S_min·(1 + B_noise/B)``, read from a CSV or derived from the paper's published laws,
and written back as a CSV. (Re-exported by :mod:`cbscore.study.simulate`.)"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from cbscore.analysis import fit_steps
from cbscore.errors import ConfigError, DataError, FitError
from cbscore.study.spec import StudySpec


@dataclass(frozen=True, kw_only=True)
class TruthCurve:
    """The known steps-to-target curve of one setting."""

    s_min: float
    """``S_min``: steps to target at infinite batch size."""
    b_noise: float
    """``B_noise`` in sequences (McCandlish et al.'s B_crit)."""

    def steps(self, batch_size: float) -> float:
        """``S(B) = S_min·(1 + B_noise/B)`` (McCandlish et al. 2018, eq. 2.11)."""
        return self.s_min * (1.0 + self.b_noise / batch_size)


# ------------------------------------------------------------------------------------------ truth
def read_truth(source: str | os.PathLike, spec: StudySpec) -> dict[str, TruthCurve]:
    """The truth curve of every setting of ``spec`` from a CSV: either ``setting,s_min,b_noise``
    (optionally ``n_params,tokens``), or a steps table in the ``cbs fit`` format whose rows are fitted
    per setting. A truth row matches a spec setting by setting id, else by (``n_params``, ``tokens``).
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
    curves: list[tuple[str, float | None, float | None, TruthCurve]] = []
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

        table = read_steps_csv(path)
        by_setting: dict[str, list[dict]] = {}
        for row in table:
            if row.get("outcome", "reached") == "reached" and row.get("steps") is not None:
                by_setting.setdefault(row["setting"], []).append(row)
        for name, srows in by_setting.items():
            best: dict[float, float] = {}
            for r in srows:
                best[r["batch_size"]] = min(best.get(r["batch_size"], math.inf), r["steps"])
            try:
                fit = fit_steps(list(best), list(best.values()))
            except FitError as exc:
                raise DataError(f"--truth {path}: setting {name!r}: {exc}") from None
            curves.append((name, _num(srows[0].get("n_params")), _num(srows[0].get("tokens")),
                           TruthCurve(s_min=fit.s_min, b_noise=fit.b_noise)))
    out: dict[str, TruthCurve] = {}
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


def paper_truth(spec: StudySpec) -> dict[str, TruthCurve]:
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


def write_truth_csv(truth: Mapping[str, TruthCurve], spec: StudySpec, path: str | os.PathLike) -> None:
    """``setting,n_params,tokens,s_min,b_noise`` (what ``--truth`` reads), written atomically."""
    settings = {s.setting_id: s for s in spec.resolve_settings()}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["setting", "n_params", "tokens", "s_min", "b_noise"])
    for sid, c in truth.items():
        w.writerow([sid, settings[sid].n_params, settings[sid].tokens, f"{c.s_min:.6g}", f"{c.b_noise:.6g}"])
    tmp = Path(f"{path}.tmp")
    tmp.write_text(buf.getvalue())
    os.replace(tmp, path)
