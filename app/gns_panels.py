"""Streamlit panels of the gradient noise scale and the CBS forecast; UI only.

The figures are :mod:`app.gns_charts`; the numbers are :mod:`cbscore.analysis` (forecast and
calibration) on the study's records (:func:`app.sources.forecast`).
"""

from __future__ import annotations

import math

import streamlit as st

from app import fit_view, gns_charts, sources

#: What the forecast is, for captions (McCandlish et al. 2018).
FORECAST_HELP = (
    "Forecast from the gradient noise scale B_simple = tr Σ / |G|² logged by the best reference run at B_ref: "
    "B̂ = Σ w·B_simple / Σ w with w = 1/(1 + B_simple/B_ref) up to the target step (McCandlish et al. 2018, "
    "eqs. 2.11–2.12), so S(B′) = Ŝ_min·(1 + B̂/B′) through the reference point and B* = (1 + r)·B_ref + r·B̂. "
    "B_simple ignores the Hessian and Adam's preconditioning, so the forecast is calibrated: c = measured "
    "B_noise / B̂, the geometric mean over settings, with a 95% bootstrap interval (settings resampled, each "
    "with one of its own B_noise bootstrap draws).")


def noise_scale_chart(record, context_tokens: int, curve: dict) -> None:
    """``B_simple`` against tokens for one running trial, when it logs one."""
    steps, values = curve.get("gns/b_simple", ((), ()))
    nc = gns_charts.noise_curve(f"lr {record.lr:.3g}", steps, values, record.batch_size * context_tokens)
    if not nc.b_simple:
        return
    st.caption("Gradient noise scale B_simple = tr Σ / |G|² (sequences; smoothed, McCandlish et al. 2018): "
               "where it sits far above B, a larger batch would still cut the steps nearly in proportion.")
    st.plotly_chart(gns_charts.noise_scale_figure([nc], b_run=record.batch_size, height=220),
                    key=f"studies.gns.{record.trial_id}", config={"displayModeBar": False})


def _calibrated(name: str, table):
    """``(StudyForecast, Calibration | None)`` of ``name`` against the page's fit ``table``."""
    from cbscore.analysis import calibrate

    fc = sources.forecast(name)
    if not fc.forecasts:
        return fc, None
    return fc, calibrate(list(fc.forecasts), table.settings, n_resamples=1000, seed=0)


def _factor_caption(cal) -> str:
    if cal is None or cal.factor is None:
        return "no calibration yet (it needs a fitted S(B) in a setting with a forecast)"
    ci = ""
    if cal.factor_ci is not None and all(math.isfinite(v) for v in cal.factor_ci):
        ci = f", 95% interval {cal.factor_ci[0]:.3g} – {cal.factor_ci[1]:.3g}"
    text = f"calibration c = measured B_noise / B̂ = **{cal.factor:.3g}**{ci} over {len(cal.settings)} setting(s)"
    if cal.spread is not None:
        ratios = [r.ratio for r in cal.settings]
        text += (f"; per setting c runs from {min(ratios):.3g} to {max(ratios):.3g} (sd of ln c {cal.spread:.2f}): "
                 "one factor serves only where the settings agree")
    for n, forecast, measured, _ in cal.d_trends:
        text += f"; at N = {n:.3g} the forecast grows as D^{forecast:.2f}, the measured B_noise as D^{measured:.2f}"
    return text


def render_forecast_overlay(name: str, table) -> None:
    """Curves page: the forecast S(B′) over each setting's measured points, raw and calibrated."""
    fc, cal = _calibrated(name, table)
    st.subheader("Forecast from the gradient noise scale")
    if not fc.forecasts:
        # each reason once, with the settings it holds for (a study whose runs log no B_simple says so once)
        why = "; ".join(fit_view.reasons_once(fc.errors)) or (
            "no setting has one. Launch a study with `gns_micro_batch_size` (or a micro_batch_size that splits "
            "B_ref) to log B_simple")
        st.info(f"No noise-scale forecast: {why}.", icon=":material/info:")
        return
    st.caption(FORECAST_HELP)
    st.markdown(_factor_caption(cal))
    by_setting = {s.setting: s for s in table.settings}
    factor = None if cal is None else cal.factor
    cols = st.columns(min(3, len(fc.forecasts)))
    for i, f in enumerate(fc.forecasts):
        s = by_setting.get(f.setting)
        measured = tuple((int(b), float(v)) for b, v in zip(s.batch_sizes, s.steps)) if s is not None else ()
        overlay = gns_charts.ForecastOverlay(label=f.setting, measured=measured, b_run=f.b_run,
                                             target_step=f.target_step, b_hat=f.b_hat, factor=factor,
                                             factor_ci=None if cal is None else cal.factor_ci)
        cols[i % len(cols)].plotly_chart(gns_charts.forecast_overlay_figure(overlay, height=320),
                                         key=f"{name}.gns.overlay.{f.setting}", config={"displaylogo": False})
    for e in fit_view.reasons_once(fc.errors + (cal.errors if cal is not None else ())):
        st.caption(f"note: {e}")


def render_forecast_vs_measured(name: str, table, b_ref: int, overhead: float) -> None:
    """Scaling page: forecast against measured B* across settings."""
    import pandas as pd

    fc, cal = _calibrated(name, table)
    st.subheader("Forecast against measured B*")
    if not fc.forecasts:
        st.info("No noise-scale forecast for this study (no reference run logged B_simple).", icon=":material/info:")
        return
    forecast_json = {"settings": [f.to_json_dict() for f in fc.forecasts]}
    calibration_json = None if cal is None else cal.to_json_dict()
    points = gns_charts.forecast_points(forecast_json, calibration_json, table.settings, b_ref=b_ref,
                                        overhead=overhead)
    st.caption(FORECAST_HELP + " " + _factor_caption(cal).replace("**", ""))
    if points:
        st.plotly_chart(gns_charts.forecast_vs_measured_figure(points), key=f"{name}.gns.vs",
                        config={"displaylogo": False})
    st.dataframe(pd.DataFrame([{
        "setting": f.setting, "B̂ (seq)": f.b_hat, "forecast B*": (1 + overhead) * b_ref + overhead * f.b_hat,
        "measured B_noise": next((r.b_noise for r in (cal.settings if cal else ()) if r.setting == f.setting), None),
        "ratio": next((r.ratio for r in (cal.settings if cal else ()) if r.setting == f.setting), None),
    } for f in fc.forecasts]), hide_index=True, width="stretch", placeholder="—", column_config={
        "B̂ (seq)": st.column_config.NumberColumn(format="%.3g"),
        "forecast B*": st.column_config.NumberColumn(format="%.3g"),
        "measured B_noise": st.column_config.NumberColumn(format="%.3g"),
        "ratio": st.column_config.NumberColumn(format="%.3g", help="measured B_noise / B̂"),
    })
