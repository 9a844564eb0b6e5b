"""The table-level analysis behind ``cbs fit``, ``cbs study fit`` and the app's fit page."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cbscore.analysis._cbs import DEFAULT_B_REF, DEFAULT_OVERHEAD, check_cbs_settings
from cbscore.analysis._joint_law import JointPowerLawFit
from cbscore.analysis._noise import NoiseComponents, noise_components
from cbscore.analysis._paper import PaperComparison, compare_with_paper, joint_source, law_source
from cbscore.analysis._points import DEFAULT_ESTIMATOR
from cbscore.analysis._power_law import PowerLawFit
from cbscore.analysis._rows import normalize_row
from cbscore.analysis._scaling import ScalingLaws, fit_scaling_laws
from cbscore.analysis._setting import SettingAnalysis, analyze_setting, json_number
from cbscore.analysis._shape import LawShape, law_ratio_trends
from cbscore.analysis._steps_row import StepsRow
from cbscore.analysis._target import EvalHistory
from cbscore.analysis._trial import REACHED, TrialSteps
from cbscore.errors import ConfigError, DataError

#: The note of a table fitted without evaluation histories (a plain steps CSV).
FIXED_TARGET_NOTE = (
    "intervals hold each setting's target loss fixed (no evaluation histories given, as in a plain "
    "steps table): an error in the target moves every S(B) together and is not in them"
)


@dataclass(frozen=True, kw_only=True, eq=False)
class TableAnalysis:
    """Every setting of a steps table and the scaling laws across them."""

    settings: tuple[SettingAnalysis, ...]
    """One per setting, in order of first appearance in the table."""
    scaling: ScalingLaws
    """``B*`` against ``N`` at fixed ``D``, ``D`` at fixed ``N``, ``N`` with ``D ∝ N``, and both."""
    errors: tuple[str, ...]
    """Every refusal and note: the settings' first, then the scaling laws'."""
    b_ref: float
    """``B_ref`` (sequences)."""
    overhead: float
    """``r``."""
    free_alpha: bool
    """Whether the free-exponent curve was fitted beside."""
    bootstrap: int
    """Resamples per setting (0: no intervals)."""
    seed: int
    """Seed of every bootstrap."""
    noise: NoiseComponents | None = None
    """The study's noise of ``ln S`` by source (rate-level, seed × cell, seed-common) and its
    learning-rate curvature."""
    shapes: tuple[LawShape, ...] = ()
    """Per law (and the joint law, per variable), which doublings of ``B`` carry its trend."""
    scaling_without_ref: ScalingLaws | None = None
    """The laws of ``B*`` fitted without the reference point ``B_ref``."""
    scaling_empirical: ScalingLaws | None = None
    """The laws of the empirical ``B*`` (the paper's rule read off the points)."""
    scaling_knee: ScalingLaws | None = None
    """The laws of the knee (where doubling stops paying, :func:`cbscore.analysis._shape.knee`), over
    the settings where it lies inside the grid."""

    def paper_comparison(self) -> PaperComparison:
        """The exponents beside the paper's and the verdict, with the shape checks
        (:func:`compare_with_paper` with the laws without ``B_ref`` and :attr:`shapes`)."""
        return compare_with_paper(self.scaling, without_ref=self.scaling_without_ref, shapes=self.shapes)

    def setting(self, name: str) -> SettingAnalysis:
        """The analysis of the setting called ``name`` (``KeyError`` if absent)."""
        for s in self.settings:
            if s.setting == name:
                return s
        raise KeyError(name)

    def to_json_dict(self) -> dict:
        """The ``cbs fit --json`` object (schema in docs/ARCHITECTURE.md, "Analysis").

        ``scaling`` lists every law per group of settings that defines it, with the group's key
        (``"fixed": {"tokens": 3.072e9}`` for a law in ``N`` at fixed ``D``, ``{"n_params": …}``
        at fixed ``N``, ``{"tokens_per_param": …}`` with ``D ∝ N``), and each coefficient both raw
        (``x`` in parameters or tokens) and in the paper's units (``N`` in millions, ``D`` in
        billions). Deterministic for a given seed.
        """
        scaling = self.scaling
        return {
            "settings": [s.to_json_dict() for s in self.settings],
            "scaling": {
                "n": [_law_json(law) for law in scaling.n_laws],
                "d": [_law_json(law) for law in scaling.d_laws],
                "chinchilla": [_law_json(law) for law in scaling.chinchilla],
                "joint": _joint_json(scaling.joint),
            },
            "scaling_without_ref": _laws_json(self.scaling_without_ref),
            "scaling_empirical": _laws_json(self.scaling_empirical),
            "scaling_knee": _laws_json(self.scaling_knee),
            "noise": None if self.noise is None else self.noise.to_json_dict(),
            "shape": [_shape_json(shape) for shape in self.shapes],
            "verdict": _verdict_json(self.paper_comparison()),
            "errors": list(self.errors),
        }


def _laws_json(laws: ScalingLaws | None) -> dict | None:
    if laws is None:
        return None
    return {"n": [_law_json(law) for law in laws.n_laws], "d": [_law_json(law) for law in laws.d_laws],
            "chinchilla": [_law_json(law) for law in laws.chinchilla], "joint": _joint_json(laws.joint)}


def _trend_json(t) -> dict | None:
    if t is None:
        return None
    return {"doublings": [list(p) for p in t.doublings], "place": t.place, "slope": json_number(t.slope),
            "slope_ci": _ci_json(t.ci), "dof": t.dof, "settings": t.n_settings}


def _shape_json(shape: LawShape) -> dict:
    return {"variable": shape.variable, "law": shape.source, "settings": list(shape.settings),
            "trends": [_trend_json(t) for t in shape.trends], "beyond_first": _trend_json(shape.beyond)}


def _verdict_json(c: PaperComparison) -> dict:
    return {"verdict": c.verdict, "sentence": c.sentence, "trend": c.trend_note}


def _ci_json(ci: tuple[float, float] | None) -> list | None:
    return None if ci is None else [json_number(ci[0]), json_number(ci[1])]


def _law_json(law: PowerLawFit) -> dict:
    return {
        "variable": law.variable,
        "fixed": {law.fixed_name: json_number(law.fixed_value)} if law.fixed_name else {},
        "settings": list(law.settings),
        "coef": json_number(law.coef),
        "coef_ci": _ci_json(law.coef_ci),
        "coefficient_paper_units": json_number(law.coef_paper_units),
        "coefficient_paper_units_ci": _ci_json(law.coef_paper_units_ci),
        "units": law.paper_units,
        "exponent": json_number(law.exponent),
        "exponent_ci": _ci_json(law.exponent_ci),
        "r2": json_number(law.r2),
    }


def _joint_json(joint: JointPowerLawFit | None) -> dict | None:
    if joint is None:
        return None
    return {
        "settings": list(joint.settings),
        "coef": json_number(joint.coef),
        "coefficient_paper_units": json_number(joint.coef_paper_units),
        "coefficient_paper_units_ci": _ci_json(joint.coef_paper_units_ci),
        "units": joint.paper_units,
        "exponent_n": json_number(joint.exponent_n),
        "exponent_d": json_number(joint.exponent_d),
        "exponent_n_ci": _ci_json(joint.exponent_n_ci),
        "exponent_d_ci": _ci_json(joint.exponent_d_ci),
        "r2": json_number(joint.r2),
    }


def analyze_table(
    rows: Iterable[Mapping | StepsRow],
    b_ref: float = DEFAULT_B_REF,
    overhead: float = DEFAULT_OVERHEAD,
    free_alpha: bool = False,
    bootstrap: int = 1000,
    seed: int = 0,
    skipped: Mapping[str, Iterable[int]] | None = None,
    histories: Mapping[str, Sequence[EvalHistory]] | None = None,
    estimator: str = DEFAULT_ESTIMATOR,
) -> TableAnalysis:
    """Fit every setting of a steps table and the scaling laws across settings.

    Args:
        rows: one mapping per trial with ``setting``, ``batch_size``, ``steps`` and optionally
            ``n_params``, ``tokens``, ``context``, ``outcome``, ``seed``, ``budget_steps``
            (strings or numbers; the rows of :func:`read_steps_csv` or of the study export), or
            one :class:`~cbscore.analysis.StepsRow` per trial (the lab's reads).
        b_ref: reference batch size ``B_ref`` in sequences (the paper's 256).
        overhead: ``r`` of the overhead rule (the paper's 0.2).
        free_alpha: also fit ``a + b·B^-alpha`` and report it beside.
        bootstrap: resamples per setting; 0 for no intervals.
        seed: seed of the bootstraps (same seed, same numbers).
        skipped: per setting name, batch sizes the planner never ran (named in the notes).
        estimator: per-cell ``S(B)`` from the learning rates, ``"fit"`` (rows need ``lr``; a cell
            without rates falls back to its minimum) or the paper's ``"min"``
            (:func:`cbscore.analysis.measure_points`).
        histories: per setting name, every trial's evaluation history (the reference cell's with
            ``role="reference"``): the bootstrap then redraws the target and recomputes every
            crossing (:func:`analyze_setting`). Without them it holds the target fixed, and says so.

    Raises:
        ConfigError: a setting out of range.
        DataError: a row that cannot be used (naming row and column), a setting whose rows
            disagree on ``n_params``/``tokens``/``context``, or no rows at all. Fits the data
            cannot support are not raised: they are ``None`` with a reason in ``errors``.
    """
    check_cbs_settings(overhead, b_ref)
    for field, value in (("bootstrap", bootstrap), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ConfigError(field, value, "must be a non-negative integer")
    bootstrap, seed = int(bootstrap), int(seed)
    trials: dict[str, list[TrialSteps]] = {}
    meta: dict[str, dict[str, tuple[object, int]]] = {}
    for index, raw in enumerate(rows, start=1):
        row = normalize_row(raw, f"row {index}")
        name = row["setting"]
        trials.setdefault(name, []).append(
            TrialSteps(
                batch_size=row["batch_size"],
                outcome=row["outcome"],
                steps=row["steps"] if row["outcome"] == REACHED else None,
                seed=row["seed"],
                budget_steps=row["budget_steps"],
                lr=row["lr"],
                steps_projected=row.get("steps_projected"),
            )
        )
        known = meta.setdefault(name, {})
        for column in ("n_params", "tokens", "context"):
            value = row[column]
            if value is None:
                continue
            if column in known and known[column][0] != value:
                first_value, first_row = known[column]
                raise DataError(
                    f"row {index}, column {column!r}: setting {name!r} has {column} "
                    f"{first_value:g} in row {first_row}, but got {value:g}."
                )
            known.setdefault(column, (value, index))
    if not trials:
        raise DataError("the steps table has no rows.")
    settings = []
    for name, setting_trials in trials.items():
        known = meta[name]
        settings.append(
            analyze_setting(
                name,
                setting_trials,
                n_params=known.get("n_params", (None,))[0],
                tokens=known.get("tokens", (None,))[0],
                context=known.get("context", (None,))[0],
                b_ref=b_ref,
                overhead=overhead,
                free_alpha=free_alpha,
                bootstrap=bootstrap,
                seed=seed,
                skipped=(skipped or {}).get(name, ()),
                histories=None if histories is None else histories.get(name),
                estimator=estimator,
            )
        )
    fitted = [s for s in settings if s.cbs is not None]
    scaling = fit_scaling_laws(
        [s.setting for s in fitted],
        [s.n_params for s in fitted],
        [s.tokens for s in fitted],
        [s.cbs for s in fitted],
        [s.bootstrap.cbs_samples for s in fitted] if bootstrap else None,
        n_draws=bootstrap or 1000,
        seed=seed,
    )
    without = [s for s in settings if s.cbs_without_ref is not None]
    scaling_wo = fit_scaling_laws(
        [s.setting for s in without], [s.n_params for s in without], [s.tokens for s in without],
        [s.cbs_without_ref for s in without],
        [s.bootstrap_without_ref.cbs_samples for s in without] if bootstrap and all(
            s.bootstrap_without_ref is not None for s in without) else None,
        n_draws=bootstrap or 1000, seed=seed,
    ) if without else None
    empirical = [s for s in settings if s.cbs_empirical is not None]
    scaling_emp = fit_scaling_laws(
        [s.setting for s in empirical], [s.n_params for s in empirical], [s.tokens for s in empirical],
        [s.cbs_empirical for s in empirical],
        [s.bootstrap.cbs_empirical_samples() for s in empirical] if bootstrap else None,
        n_draws=bootstrap or 1000, seed=seed,
    ) if empirical else None
    kneed = [s for s in settings if s.knee is not None and math.isfinite(s.knee)]
    scaling_knee = fit_scaling_laws(
        [s.setting for s in kneed], [s.n_params for s in kneed], [s.tokens for s in kneed], [s.knee for s in kneed],
        [s.knee_samples for s in kneed] if bootstrap and all(s.knee_samples is not None for s in kneed) else None,
        n_draws=bootstrap or 1000, seed=seed,
    ) if kneed else None
    errors = [e for s in settings for e in s.errors] + list(scaling.errors)
    if bootstrap and histories is None:
        errors.append(FIXED_TARGET_NOTE)
    return TableAnalysis(
        settings=tuple(settings),
        scaling=scaling,
        errors=tuple(errors),
        b_ref=float(b_ref),
        overhead=float(overhead),
        free_alpha=bool(free_alpha),
        bootstrap=bootstrap,
        seed=seed,
        noise=noise_components([s.seed_table for s in settings if s.seed_table is not None],
                               [s.rate_fit for s in settings if s.rate_fit is not None]),
        shapes=law_shapes(settings, scaling, b_ref),
        scaling_without_ref=scaling_wo,
        scaling_empirical=scaling_emp,
        scaling_knee=scaling_knee,
    )


def law_shapes(settings: Sequence[SettingAnalysis], scaling: ScalingLaws, b_ref: float) -> tuple[LawShape, ...]:
    """Which doublings carry each law's trend (:func:`cbscore.analysis._shape.law_ratio_trends`):
    every one-variable law over its own settings, and the joint law in ``D`` holding ``ln N`` (and in
    ``N`` holding ``ln D``) as a covariate."""
    by_name = {s.setting: s for s in settings}
    out = []
    for law in scaling.laws:
        group = [by_name[n] for n in law.settings if n in by_name]
        key = "tokens" if law.variable == "d" else "n_params"
        rows = [(getattr(s, key), s.doublings) for s in group if getattr(s, key)]
        trends, beyond = law_ratio_trends(rows, b_ref)
        if trends:
            out.append(LawShape(variable=law.variable, source=law_source(law), settings=tuple(law.settings),
                                trends=trends, beyond=beyond))
    joint = scaling.joint
    if joint is not None:
        group = [by_name[n] for n in joint.settings if n in by_name]
        for variable, key, other in (("d", "tokens", "n_params"), ("n", "n_params", "tokens")):
            rows = [(getattr(s, key), s.doublings, (math.log(getattr(s, other)),)) for s in group]
            trends, beyond = law_ratio_trends(rows, b_ref)
            if trends:
                out.append(LawShape(variable=variable, source=joint_source(joint), settings=tuple(joint.settings),
                                    trends=trends, beyond=beyond))
    return tuple(out)
