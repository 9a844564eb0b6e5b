"""Steps-to-target, the S(B) fit, the critical batch size and its scaling laws.

Pure numpy/scipy (never torch): the same code serves the trainer, the study runner
(``cbs study fit``), the Streamlit app and ``cbs fit`` on any steps table, published ones too.
Definitions: DESIGN.md §1. Every result is a frozen object; models are ``f(x, *params)``.

Per trial
    ``first_crossing(steps, losses, target)`` → the interpolated first step at or below the
    target (or ``None``); ``trial_steps(B, steps, losses, target)`` → ``TrialSteps`` with the
    outcome (``reached``/``censored``/``diverged``).
Per batch size
    ``measure_points(trials, estimator="fit"|"min")`` → ``MeasuredPoint`` per ``B``: ``S(B)`` per
    seed read off a parabola in ``ln η`` through the best reached rate and its neighbours
    (:func:`window_rates`; curvature shared by the setting's cells), or the paper's minimum over
    rates (reported beside as ``steps_min``); averaged on log axes over seeds; censored, diverged
    and other trials are counted, never entered as values, and where nothing reached the censored
    budgets give a lower bound, which stays in the fit (``fit_steps(..., lower_bounds=...)``).
Per setting
    ``fit_steps(B, S, free_alpha=False)`` → ``StepsFit`` (``S = a + b/B`` on ``log S``;
    ``s_min``, ``b_noise``, ``cbs(r, B_ref)``, fitted values, residuals, R²);
    ``cbs_empirical(B, S, B_ref, r)``; ``bootstrap_steps_fit(points, fit)`` → ``BootstrapResult``
    (by residuals of the log fit, and by seeds where a cell ran several; never by learning rates);
    ``sensitivity_table(fit, b_refs)``; ``analyze_setting(...)`` → ``SettingAnalysis``.
Target
    ``reference_target(histories, ref_steps)`` → ``ReferenceTarget``: the target loss from every
    reference run's evaluations (each run's loss at ``D`` from a local fit, the best over learning
    rates per seed from a fit across rates, the mean over seeds); ``target_draws`` redraws it for
    the bootstrap.
Across settings
    ``fit_power_law(x, B*, variable="n"|"d")`` → ``PowerLawFit`` (interval: a random-effects
    meta-regression weighted by each setting's own draws); ``fit_joint_power_law(N, D, B*)`` →
    ``JointPowerLawFit``; ``fit_scaling_laws`` → ``ScalingLaws``: laws in ``N`` per shared ``D``,
    in ``D`` per shared ``N``, in ``N`` per shared tokens-per-parameter ratio (``D ∝ N``, the
    paper's Chinchilla), and the joint law where ``N`` and ``D`` vary independently — never one
    pooled across settings whose other variable differs; ``forecast(n_params, tokens)`` →
    ``Forecast``. ``compare_with_paper(laws)`` → ``PaperComparison`` (the paper's exponents and
    whether the study supports "B* scales with D, not with N", :func:`scales_with_d_not_n`).
Seeds, noise and shape (DESIGN.md §1, "Intervals" and "Shape before slope")
    ``SeedTable.from_points(points)``: ``ln S`` per seed and batch size with the additive fit
    ``μ_B + γ_s + ε`` (the bootstrap holds ``γ``, a seed's common shift, and redraws ``ε``);
    ``doubling_ratios(table, b_ref)`` → ``DoublingRatio`` per doubling (seed-paired, with intervals);
    ``lack_of_fit(table, residuals)`` → ``LackOfFit`` (F test of ``a + b/B`` against the noise);
    ``TableAnalysis.shapes`` → ``LawShape`` per law (which doublings carry its trend);
    ``noise_components(tables, rate_fits)`` → ``NoiseComponents`` (rate-level, seed × cell,
    seed-common sd of ``ln S`` and the learning-rate curvature);
    ``TableAnalysis.paper_comparison()``: the verdict with the shape checks.
Noise-scale forecast
    ``forecast_setting(setting, b_simple=…, steps=…, b_run=…, target_step=…)`` → ``NoiseForecast``
    (``B̂``, ``Ŝ_min``, ``Ê_min`` and the forecast ``B*`` from one run's logged ``B_simple``);
    ``calibrate(forecasts, setting_analyses)`` → ``Calibration`` (measured ``B_noise`` / ``B̂``
    per setting and the study's factor with a bootstrap interval); ``forecast_batch_sizes``.
Tables
    ``read_steps_csv(path)`` → validated rows; ``StepsRow`` → one trial's row, typed (what the
    lab's reads return; ``to_dict()`` is its CSV row); ``analyze_table(rows, b_ref=256, overhead=0.2,
    free_alpha=False, bootstrap=1000, seed=0, skipped=None)`` → ``TableAnalysis`` whose
    ``to_json_dict()`` is the ``cbs fit --json`` object.

Refusals raise :class:`cbscore.errors.FitError`; the table-level analysis records them under
``errors`` and leaves the number ``None``.
"""

from cbscore.analysis._bootstrap import BootstrapResult, bootstrap_steps_fit
from cbscore.analysis._cbs import DEFAULT_B_REF, DEFAULT_OVERHEAD, cbs_closed_form, cbs_empirical
from cbscore.analysis._crossing import first_crossing
from cbscore.analysis._csv import (
    MAX_CSV_ROWS,
    MAX_IMPORT_ROWS,
    check_csv_bounds,
    check_csv_rows,
    read_steps_csv,
    steps_csv_text,
)
from cbscore.analysis._forecast import Forecast
from cbscore.analysis._interval import LEVEL, percentile_interval
from cbscore.analysis._joint_law import JointPowerLawFit, fit_joint_power_law
from cbscore.analysis._models import joint_power_law, power_law, steps_model, steps_model_free
from cbscore.analysis._noise import NoiseComponents, noise_components
from cbscore.analysis._noise_forecast import (
    Calibration,
    NoiseForecast,
    SettingCalibration,
    calibrate,
    forecast_batch_sizes,
    forecast_setting,
    weighted_noise_scale,
)
from cbscore.analysis._paper import (
    PAPER_EXPONENT_CHINCHILLA,
    PAPER_EXPONENT_D,
    PAPER_EXPONENT_N,
    ExponentEstimate,
    PaperComparison,
    compare_with_paper,
    scales_with_d_not_n,
)
from cbscore.analysis._points import (
    DEFAULT_ESTIMATOR,
    ESTIMATORS,
    MeasuredPoint,
    edge_phrase,
    fit_window,
    measure_points,
    window_rates,
)
from cbscore.analysis._power_law import PowerLawFit, fit_power_law
from cbscore.analysis._projection import project_pruned, step_at_loss, steps_ratio
from cbscore.analysis._rows import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, normalize_row
from cbscore.analysis._scaling import ScalingLaws, fit_scaling_laws
from cbscore.analysis._seeds import SeedTable
from cbscore.analysis._sensitivity import SENSITIVITY_OVERHEADS, SensitivityRow, sensitivity_table
from cbscore.analysis._setting import SettingAnalysis, analyze_setting
from cbscore.analysis._shape import (
    DoublingRatio,
    LackOfFit,
    LawShape,
    RatioTrend,
    doubling_pairs,
    doubling_ratios,
    lack_of_fit,
    law_ratio_trends,
)
from cbscore.analysis._steps_fit import MIN_BATCH_SIZES, StepsFit, fit_steps
from cbscore.analysis._steps_row import StepsRow
from cbscore.analysis._table import TableAnalysis, analyze_table
from cbscore.analysis._target import EvalHistory, ReferenceTarget, reference_target, target_draws
from cbscore.analysis._trial import OUTCOMES, TrialSteps, trial_steps
from cbscore.analysis._wsd_fit import EsFit, WsdEsAnalysis, es_points, fit_wsd_es, format_es

__all__ = [
    "EsFit", "WsdEsAnalysis", "es_points", "fit_wsd_es", "format_es",
    "DoublingRatio",
    "LackOfFit",
    "LawShape",
    "NoiseComponents",
    "RatioTrend",
    "SeedTable",
    "doubling_pairs",
    "doubling_ratios",
    "lack_of_fit",
    "law_ratio_trends",
    "noise_components",
    "Calibration",
    "project_pruned",
    "step_at_loss",
    "steps_ratio",
    "NoiseForecast",
    "SettingCalibration",
    "calibrate",
    "forecast_batch_sizes",
    "forecast_setting",
    "weighted_noise_scale",
    "DEFAULT_B_REF",
    "DEFAULT_ESTIMATOR",
    "ESTIMATORS",
    "DEFAULT_OVERHEAD",
    "LEVEL",
    "MIN_BATCH_SIZES",
    "OPTIONAL_COLUMNS",
    "OUTCOMES",
    "PAPER_EXPONENT_CHINCHILLA",
    "PAPER_EXPONENT_D",
    "PAPER_EXPONENT_N",
    "REQUIRED_COLUMNS",
    "SENSITIVITY_OVERHEADS",
    "BootstrapResult",
    "EvalHistory",
    "ReferenceTarget",
    "ExponentEstimate",
    "Forecast",
    "JointPowerLawFit",
    "MeasuredPoint",
    "edge_phrase",
    "PaperComparison",
    "PowerLawFit",
    "ScalingLaws",
    "SensitivityRow",
    "SettingAnalysis",
    "StepsFit",
    "StepsRow",
    "TableAnalysis",
    "TrialSteps",
    "analyze_setting",
    "analyze_table",
    "bootstrap_steps_fit",
    "cbs_closed_form",
    "cbs_empirical",
    "compare_with_paper",
    "first_crossing",
    "fit_joint_power_law",
    "fit_power_law",
    "fit_scaling_laws",
    "fit_steps",
    "joint_power_law",
    "measure_points",
    "window_rates",
    "fit_window",
    "normalize_row",
    "percentile_interval",
    "power_law",
    "read_steps_csv",
    "steps_csv_text",
    "check_csv_bounds",
    "MAX_CSV_ROWS",
    "MAX_IMPORT_ROWS",
    "check_csv_rows",
    "reference_target",
    "scales_with_d_not_n",
    "sensitivity_table",
    "steps_model",
    "steps_model_free",
    "target_draws",
    "trial_steps",
]
