"""The CBS forecast from the gradient noise scale of one run, and its calibration against ``S(B)`` fits.

McCandlish et al. 2018 (arXiv 1812.06162). A run at a fixed batch ``B_run`` needs
``1 + B_noise/B_run`` steps per step of the ideal (infinite-batch) run (§2.3, eq. 2.11), so its
step ``t`` stands for ``w_t = 1/(1 + B_noise(t)/B_run)`` steps of ``S_min`` and ``w_t·B_noise(t)``
examples of ``E_min``; summed up to the target step, ``B_crit = E_min/S_min`` (eq. 2.12) is the
``w``-weighted mean of ``B_noise(t)`` (App. D, where the noise scale changes during training).
With the measured ``B_simple(t)`` for ``B_noise(t)`` (DESIGN.md §1 for the curve):

    B̂ = Σ_t w_t·B_simple(t) / Σ_t w_t,     w_t = 1/(1 + B_simple(t)/B_run)
    S(B′) = Ŝ_min + Ê_min/B′ = Ŝ_min·(1 + B̂/B′),   B*_forecast = (1 + r)·B_ref + r·B̂

``Ŝ_min = Σ_t w_t`` and ``Ê_min = Σ_t w_t·B_simple(t)``, so the forecast curve passes through the
reference run's own point ``S(B_run) = Σ_t 1``. ``B_simple`` ignores the Hessian and Adam's
preconditioning (McCandlish §2.2; Merrill et al. 2025 find it off by orders of magnitude for
Adam), so the forecast is only useful *calibrated*: :func:`calibrate` measures, per study, the
factor ``c = B_noise(measured, S(B) fit) / B̂``.

Pure Python and numpy, like the rest of :mod:`cbscore.analysis` (``cbscore.train.gns`` holds the
estimators that produce ``B_simple`` inside the trainer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._cbs import cbs_closed_form
from cbscore.analysis._interval import LEVEL
from cbscore.errors import ConfigError, FitError


def _positive(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(field, value, "must be a positive finite number")
    return float(value)


def weighted_noise_scale(
    b_simple: Sequence[float], b_run: float, steps: Sequence[float] | None = None, until_step: float | None = None
) -> tuple[float, float, float]:
    """``(B̂, Ŝ_min, Ê_min)`` from ``B_simple`` logged during one run at ``b_run`` sequences.

    ``b_simple[k]`` was logged at optimizer step ``steps[k]`` (ascending) and stands for the steps
    since the previous log, ``(steps[k-1], steps[k]]`` (the first for ``(0, steps[0]]``), clipped
    at ``until_step`` (the target step; default the last step logged): the per-step sum of the
    module docstring with ``B_simple`` held constant between logs. Without ``steps`` every value
    is one step (the issue's formula as written). Non-finite and non-positive values (the
    tracker's warm-up) are left out and the steps they stand for are shared by the others, so
    ``Ŝ_min + Ê_min/b_run`` equals the steps covered (``until_step``).
    """
    b_run = _positive("b_run", b_run)
    values = np.asarray([float(v) for v in b_simple], dtype=float)
    at = np.arange(1.0, values.size + 1) if steps is None else np.asarray([float(s) for s in steps], dtype=float)
    if at.shape != values.shape:
        raise ConfigError("steps", len(at), f"must give one step per B_simple value ({values.size})")
    if values.size and np.any(np.diff(at) <= 0):
        raise ConfigError("steps", list(at[:8]), "must be strictly increasing")
    end = float(at[-1]) if until_step is None and values.size else until_step
    if end is not None:
        end = _positive("until_step", end)
    clipped = np.minimum(at, end) if values.size else at
    width = np.diff(np.concatenate([[0.0], clipped]))  # steps each value stands for
    keep = np.isfinite(values) & (values > 0) & (width > 0)
    if not np.any(keep):
        raise ConfigError("b_simple", [float(v) for v in values[:8]],
                          "must hold at least one positive finite value before the target step")
    v, dt = values[keep], width[keep]
    w = 1.0 / (1.0 + v / b_run)  # McCandlish et al. eq. 2.11, per step
    covered = float(end)
    s_min = covered * float(np.sum(w * dt) / np.sum(dt))
    e_min = covered * float(np.sum(w * v * dt) / np.sum(dt))
    return e_min / s_min, s_min, e_min


@dataclass(frozen=True, kw_only=True)
class NoiseForecast:
    """One setting's forecast from the ``B_simple`` of its best reference run."""

    setting: str
    """Setting id."""
    b_run: float
    """Batch size of the run measured (sequences; the reference batch size)."""
    b_hat: float
    """``B̂``: forecast ``B_noise`` (sequences)."""
    s_min: float
    """``Ŝ_min``: forecast steps of the ideal run to the target."""
    e_min: float
    """``Ê_min = Ŝ_min·B̂``: forecast sequences to the target at the smallest batch."""
    target_step: float
    """Steps of the run up to the target (``Ŝ_min + Ê_min/b_run``)."""
    n_values: int
    """``B_simple`` values logged up to the target."""
    cbs: float
    """``B* = (1 + r)·B_ref + r·B̂`` (DESIGN.md §1; sequences)."""
    run_id: str = ""
    """Tracking run the values came from."""

    def steps_at(self, batch_size: float, factor: float = 1.0) -> float:
        """Forecast ``S(B′)``; with ``factor = c`` the calibrated curve ``S_min·(1 + c·B̂/B′)``
        through the reference run's own point ``(b_run, target_step)``."""
        b_noise = factor * self.b_hat
        s_min = self.target_step / (1.0 + b_noise / self.b_run)
        return s_min * (1.0 + b_noise / float(batch_size))

    def to_json_dict(self) -> dict:
        return {"setting": self.setting, "b_run": self.b_run, "b_hat": self.b_hat, "s_min": self.s_min,
                "e_min": self.e_min, "target_step": self.target_step, "n_values": self.n_values, "cbs": self.cbs,
                "run_id": self.run_id}


def forecast_setting(setting: str, *, b_simple: Sequence[float], steps: Sequence[float], b_run: float,
                     target_step: float | None, b_ref: float, overhead: float, run_id: str = "") -> NoiseForecast:
    """:class:`NoiseForecast` of one run (see :func:`weighted_noise_scale`)."""
    b_hat, s_min, e_min = weighted_noise_scale(b_simple, b_run, steps, target_step)
    end = float(steps[-1]) if target_step is None else float(target_step)
    n = sum(1 for s, v in zip(steps, b_simple) if s <= end and math.isfinite(v) and v > 0)
    cbs = float(cbs_closed_form(b_hat, float(b_ref), overhead))  # DESIGN.md §1
    return NoiseForecast(setting=setting, b_run=float(b_run), b_hat=b_hat, s_min=s_min, e_min=e_min,
                         target_step=end, n_values=n, cbs=cbs, run_id=run_id)


@dataclass(frozen=True, kw_only=True)
class SettingCalibration:
    """One setting: measured ``B_noise`` against the forecast ``B̂``."""

    setting: str
    b_hat: float
    """Forecast ``B_noise`` (sequences)."""
    b_noise: float
    """``B_noise`` of the setting's ``S(B)`` fit (sequences)."""
    b_noise_ci: tuple[float, float] | None
    """The fit's bootstrap interval of ``B_noise``."""
    ratio: float
    """``b_noise / b_hat``."""
    cbs_forecast: float
    """``(1 + r)·B_ref + r·B̂``."""
    cbs_measured: float | None
    """The fitted ``B*``."""


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Per study: ``c = B_noise(measured)/B̂``, the geometric mean over settings, with an interval."""

    factor: float | None
    """``c``: ``exp(mean_s log(B_noise_s/B̂_s))``; ``None`` without a setting that has both."""
    factor_ci: tuple[float, float] | None
    """Percentile bootstrap interval of ``c`` (see :func:`calibrate`); ``None`` without draws."""
    settings: tuple[SettingCalibration, ...]
    """The settings that entered, in the order given."""
    n_resamples: int
    method: str
    """How the interval was drawn, in words."""
    errors: tuple[str, ...] = ()
    """Settings left out, and why."""
    d_trends: tuple[tuple[float, float, float, int], ...] = ()
    """Per ``N`` shared by settings at two or more ``D``: ``(N, exponent of B̂ in D, exponent of the
    measured B_noise in D, settings)`` (least squares on log axes): a factor ``c`` is one number only
    where the two exponents agree (on ``demo-gns`` B̂ grew as D^0.66, B_noise as D^0.17)."""

    @property
    def spread(self) -> float | None:
        """Standard deviation over settings of ``ln(B_noise/B̂)`` (``None`` with one setting): how far
        from one number ``c`` the settings are."""
        if len(self.settings) < 2:
            return None
        return float(np.std([math.log(r.ratio) for r in self.settings], ddof=1))

    def to_json_dict(self) -> dict:
        def num(x):
            return None if x is None or not math.isfinite(x) else float(x)

        return {
            "factor": num(self.factor),
            "factor_ci": None if self.factor_ci is None else [num(self.factor_ci[0]), num(self.factor_ci[1])],
            "level": LEVEL, "n_resamples": self.n_resamples, "method": self.method,
            "settings": [{"setting": s.setting, "b_hat": num(s.b_hat), "b_noise": num(s.b_noise),
                          "b_noise_ci": None if s.b_noise_ci is None else [num(s.b_noise_ci[0]), num(s.b_noise_ci[1])],
                          "ratio": num(s.ratio), "cbs_forecast": num(s.cbs_forecast),
                          "cbs_measured": num(s.cbs_measured)} for s in self.settings],
            "spread_ln": num(self.spread),
            "d_trends": [{"n_params": num(n), "exponent_forecast": num(ef), "exponent_measured": num(em),
                          "settings": k} for n, ef, em, k in self.d_trends],
            "errors": list(self.errors),
        }


def calibrate(forecasts: Sequence[NoiseForecast], analyses: Sequence, *, n_resamples: int = 1000,
              seed: int = 0) -> Calibration:
    """The calibration factor of a study: measured ``B_noise`` (``analyses``: the
    :class:`~cbscore.analysis.SettingAnalysis` of each setting) over the forecast ``B̂``.

    ``c`` is the geometric mean of the per-setting ratios (ratios of scales: averaged on log
    axes). Its interval is a percentile bootstrap (Efron & Tibshirani 1993, ch. 13) drawn the way
    the scaling laws' intervals are: settings resampled with replacement (pairs over settings,
    so the settings' scatter counts), each drawn with one of its own ``B_noise`` bootstrap
    samples (so each setting's fit uncertainty counts). With one setting only the latter is
    left. The forecasts' own noise (the ``B_simple`` estimates) is not resampled: the interval is
    that of the measured side only.
    """
    by_setting = {a.setting: a for a in analyses}
    rows: list[SettingCalibration] = []
    draws: list[np.ndarray] = []
    errors: list[str] = []
    for f in forecasts:
        a = by_setting.get(f.setting)
        if a is None or a.b_noise is None or not math.isfinite(a.b_noise) or a.b_noise <= 0:
            errors.append(f"setting {f.setting!r}: no measured B_noise (the S(B) fit is refused or not yet possible); "
                          "left out of the calibration")
            continue
        boot = getattr(a, "bootstrap", None)
        rows.append(SettingCalibration(
            setting=f.setting, b_hat=f.b_hat, b_noise=float(a.b_noise),
            b_noise_ci=None if boot is None else tuple(float(x) for x in boot.b_noise_ci),
            ratio=float(a.b_noise) / f.b_hat, cbs_forecast=f.cbs, cbs_measured=a.cbs))
        samples = np.asarray(boot.b_noise_samples, dtype=float) if boot is not None else np.asarray([a.b_noise])
        draws.append(np.log(np.maximum(samples, 1e-300)) - math.log(f.b_hat))  # log ratio per draw; +inf kept
    if not rows:
        return Calibration(factor=None, factor_ci=None, settings=(), n_resamples=0, method="", errors=tuple(errors))
    factor = math.exp(float(np.mean([math.log(r.ratio) for r in rows])))
    method = ("pairs bootstrap over settings, each with one of its own B_noise bootstrap draws" if len(rows) > 1
              else "the setting's own B_noise bootstrap draws")
    if all(d.size == 1 for d in draws) and len(rows) == 1:
        return Calibration(factor=factor, factor_ci=None, settings=tuple(rows), n_resamples=0,
                           method="no draws (no bootstrap of the fit)", errors=tuple(errors))
    rng = np.random.default_rng([int(seed), 14])
    k = len(rows)
    picks = rng.integers(0, k, size=(n_resamples, k)) if k > 1 else np.zeros((n_resamples, 1), dtype=int)
    logs = np.empty((n_resamples, k))
    for j in range(k):
        which = picks[:, j]
        for s in range(k):
            rows_s = which == s
            if np.any(rows_s):
                logs[rows_s, j] = rng.choice(draws[s], size=int(rows_s.sum()))
    samples = np.exp(np.mean(logs, axis=1))  # +inf where a draw's S_min fitted to 0
    tail = (1.0 - LEVEL) / 2.0
    lo = float(np.quantile(samples, tail, method="lower"))
    hi = float(np.quantile(samples, 1.0 - tail, method="higher"))
    return Calibration(factor=factor, factor_ci=(lo, hi), settings=tuple(rows), n_resamples=n_resamples,
                       method=method, errors=tuple(errors), d_trends=_d_trends(rows, by_setting))


def _d_trends(rows: Sequence[SettingCalibration], by_setting: dict) -> tuple[tuple[float, float, float, int], ...]:
    """Per shared ``N``, the D-exponents of the forecast and of the measured ``B_noise``."""
    groups: dict[float, list[tuple[float, float, float]]] = {}
    for r in rows:
        a = by_setting[r.setting]
        if getattr(a, "n_params", None) and getattr(a, "tokens", None):
            groups.setdefault(float(a.n_params), []).append((float(a.tokens), r.b_hat, r.b_noise))
    out = []
    for n, pts in sorted(groups.items()):
        if len({d for d, _, _ in pts}) < 2:
            continue
        log_d = np.log([d for d, _, _ in pts])
        slope = lambda y: float(np.polyfit(log_d, np.log(y), 1)[0])  # noqa: E731
        out.append((n, slope([b for _, b, _ in pts]), slope([m for _, _, m in pts]), len(pts)))
    return tuple(out)


def forecast_batch_sizes(b_ref: int, b_noise: Sequence[float], *, below: int = 2, beyond: float = 4.0,
                         min_sizes: int = 5) -> tuple[int, ...]:
    """Batch sizes around a (calibrated) forecast ``B_noise``: ``B_ref·2^k`` from ``below`` halvings
    under ``B_ref`` (not under 1) up to the first at or past ``beyond × `` the largest forecast
    ``B_noise`` and ``B*`` (the S(B) fit needs points on both sides of the bend at ``B_noise``,
    and ``S_min`` is pinned only well past it; DESIGN.md §1), at least ``min_sizes`` of them."""
    b_ref = int(_positive("b_ref", b_ref))
    finite = [float(b) for b in b_noise if b is not None and math.isfinite(b) and b > 0]
    if not finite:
        raise FitError("no finite forecast B_noise to choose batch sizes around")
    top = beyond * max(finite)
    sizes = [b_ref >> i for i in range(below, 0, -1) if b_ref >> i >= 1 and (b_ref >> i) << i == b_ref]
    b = b_ref
    sizes.append(b)
    while b < top * (1 - 1e-9) or len(sizes) < min_sizes:  # a factor that is 3 up to rounding reaches 4×
        b *= 2
        sizes.append(b)
    return tuple(sizes)
