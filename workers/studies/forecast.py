"""The noise-scale forecast of a study, read from MLflow (:mod:`cbscore.analysis` does the math).

Per setting, the forecast comes from the *best reference run* (the reference trial at ``B_ref``
whose final loss set the setting's target, DESIGN.md §1): its logged ``gns/b_simple`` history up
to its crossing of the target (:func:`cbscore.analysis.forecast_setting`). It is known as soon as
the reference cell has finished, before any other cell has run. The calibration compares it with
the ``B_noise`` of the setting's ``S(B)`` fit (:func:`cbscore.analysis.calibrate`).

``forecast_from: OTHER`` (a spec field) takes the other study's calibrated forecast to choose a
new study's batch sizes (:func:`forecast_spec`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cbscore.analysis import (
    Calibration,
    NoiseForecast,
    calibrate,
    first_crossing,
    forecast_batch_sizes,
    forecast_setting,
)
from cbscore.errors import ConfigError, FitError
from cbscore.study import StudySpec, TrialRecord

#: The MLflow key of the smoothed noise scale (sequences), written by ``workers.tracking``.
B_SIMPLE_KEY = "gns/b_simple"


@dataclass(frozen=True, kw_only=True)
class StudyForecast:
    """A study's forecasts per setting and, where fits exist, their calibration."""

    forecasts: tuple[NoiseForecast, ...]
    """One per setting whose best reference run logged ``B_simple``."""
    calibration: Calibration | None
    """``None`` until a fit is given."""
    errors: tuple[str, ...]
    """Settings without a forecast, and why."""

    def to_json_dict(self) -> tuple[dict, dict | None]:
        """``(forecast, calibration)`` entries of ``cbs study fit --json`` (docs/ARCHITECTURE.md)."""
        forecast = {"settings": [f.to_json_dict() for f in self.forecasts], "errors": list(self.errors)}
        return forecast, None if self.calibration is None else self.calibration.to_json_dict()


def best_reference(records: Sequence[TrialRecord], setting_id: str, target: float) -> TrialRecord | None:
    """The reference trial of ``setting_id`` with the lowest final loss, if it reached ``target``.

    The target comes from the whole reference cell (:func:`cbscore.analysis.reference_target`), so
    the best run crosses it near D, not exactly at its last evaluation; a run that never evaluated
    at or below it gives no forecast."""
    refs = [r for r in records if r.setting_id == setting_id and r.role == "reference"
            and r.final_eval_loss is not None and math.isfinite(r.final_eval_loss)]
    if not refs:
        return None
    best = min(refs, key=lambda r: r.final_eval_loss)
    reached = best.final_eval_loss <= target + 1e-12 or any(
        math.isfinite(v) and v <= target for v in best.eval_losses)
    return best if reached else None


def setting_forecasts(spec: StudySpec, records: Sequence[TrialRecord], history) -> tuple[list[NoiseForecast], list[str]]:
    """Forecast of every setting whose targets are known; ``history(run_id, key) -> (steps, values)``."""
    from cbscore.study.targets import setting_targets

    targets, _ = setting_targets(spec, records)
    out, errors = [], []
    for setting in spec.resolve_settings():
        sid = setting.setting_id
        target = targets.get(sid)
        if target is None:
            errors.append(f"setting {sid!r}: no target yet (its reference runs have not finished)")
            continue
        best = best_reference(records, sid, target)
        if best is None or not best.run_id:
            errors.append(f"setting {sid!r}: no finished reference run at the target")
            continue
        steps, values = history(best.run_id, B_SIMPLE_KEY)
        if not steps:
            errors.append(f"setting {sid!r}: its best reference run logged no {B_SIMPLE_KEY} (launch with "
                          "gns_micro_batch_size, or a micro_batch_size that accumulates at B_ref)")
            continue
        crossing = first_crossing(list(best.eval_steps), list(best.eval_losses), target) if best.eval_steps else None
        if crossing is None and best.eval_steps and best.final_eval_loss <= target + 1e-12:
            crossing = float(best.eval_steps[-1])  # at the target to rounding: its last evaluation
        try:
            out.append(forecast_setting(sid, b_simple=values, steps=steps, b_run=best.batch_size,
                                        target_step=crossing, b_ref=spec.b_ref, overhead=spec.overhead,
                                        run_id=best.run_id))
        except ConfigError as exc:
            errors.append(f"setting {sid!r}: {exc}")
    return out, errors


def study_forecast(spec: StudySpec, records: Sequence[TrialRecord], history, analysis=None, *,
                   bootstrap: int = 1000, seed: int = 0) -> StudyForecast:
    """Forecasts, and their calibration against ``analysis`` (a ``TableAnalysis``) when given."""
    forecasts, errors = setting_forecasts(spec, records, history)
    calibration = None
    if analysis is not None and forecasts:
        calibration = calibrate(forecasts, analysis.settings, n_resamples=max(bootstrap, 1), seed=seed)
    return StudyForecast(forecasts=tuple(forecasts), calibration=calibration, errors=tuple(errors))


@dataclass(frozen=True, kw_only=True)
class ForecastRange:
    """Batch sizes chosen for a study from another study's calibrated forecast (``forecast_from``)."""

    source: str
    """The study the forecast comes from."""
    factor: float
    """Its calibration factor ``c``."""
    factor_ci: tuple[float, float] | None
    b_noise: dict[str, float]
    """Calibrated forecast ``c·B̂`` per setting of the new study (sequences)."""
    borrowed: dict[str, str]
    """Setting of the new study → setting of the source whose forecast it takes."""
    batch_sizes: tuple[int, ...]
    """The chosen batch sizes (:func:`cbscore.analysis.forecast_batch_sizes`)."""

    def describe(self) -> str:
        ci = "" if self.factor_ci is None else f" [{self.factor_ci[0]:.3g}, {self.factor_ci[1]:.3g}]"
        parts = ", ".join(f"{s}: {b:.3g} (from {self.borrowed[s]})" for s, b in self.b_noise.items())
        return (f"batch sizes {list(self.batch_sizes)} from study {self.source!r}: calibration c = {self.factor:.3g}{ci}; "
                f"calibrated B_noise per setting {parts}")


def forecast_range(spec: StudySpec, source: str, source_forecast: StudyForecast) -> ForecastRange:
    """Choose ``spec``'s batch sizes around ``source``'s calibrated forecast.

    A setting of ``spec`` takes the forecast of the source's setting with the same id, else of
    the source's setting nearest on log axes in ``D`` (same model preferred), and multiplies it by
    the source's calibration factor. Refuses (``ConfigError`` on ``forecast_from``) a source
    without a calibration factor.
    """
    cal = source_forecast.calibration
    if cal is None or cal.factor is None or not source_forecast.forecasts:
        raise ConfigError("forecast_from", source,
                          "has no calibrated forecast yet (it needs finished reference runs with gns/b_simple "
                          "and at least one fitted setting)")
    by_id = {f.setting: f for f in source_forecast.forecasts}
    b_noise, borrowed = {}, {}
    for setting in spec.resolve_settings():
        f = by_id.get(setting.setting_id)
        if f is None:
            def distance(f: NoiseForecast) -> tuple[int, float]:
                model, _, tokens = f.setting.rpartition("_D")
                same_model = 0 if model == setting.model else 1
                return same_model, abs(math.log(max(_tokens(tokens), 1.0)) - math.log(setting.tokens))
            f = min(source_forecast.forecasts, key=distance)
        b_noise[setting.setting_id] = cal.factor * f.b_hat
        borrowed[setting.setting_id] = f.setting
    try:
        sizes = forecast_batch_sizes(spec.b_ref, list(b_noise.values()))
    except FitError as exc:
        raise ConfigError("forecast_from", source, str(exc)) from None
    return ForecastRange(source=source, factor=cal.factor, factor_ci=cal.factor_ci, b_noise=b_noise,
                         borrowed=borrowed, batch_sizes=sizes)


def _tokens(text: str) -> float:
    """``"50K"`` → 5e4 (the suffix of a setting id, ``cbscore.study.format_tokens``)."""
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
    try:
        return float(text[:-1]) * scale[text[-1]] if text and text[-1] in scale else float(text)
    except ValueError:
        return 1.0


def forecast_spec(spec: StudySpec, source_forecast: StudyForecast) -> tuple[StudySpec, ForecastRange]:
    """``spec`` with its batch sizes replaced by those around ``forecast_from``'s calibrated forecast."""
    chosen = forecast_range(spec, spec.forecast_from, source_forecast)
    return spec.replace(batch_sizes=chosen.batch_sizes), chosen
