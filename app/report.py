"""``cbs study report NAME --out DIR``: a study's evidence, in files anyone can refit.

Results that come from running the lab live under ``docs/results/<name>/``: the steps table (the
``cbs fit`` CSV), the fit of *that file* (so ``cbs fit steps.csv --b-ref B --overhead r --json``
gives it back byte for byte), the Curves and Scaling-laws figures drawn by the same chart code
the pages use (PNG through kaleido, when it and a Chrome are installed; HTML otherwise), the spec,
and ``summary.json`` with what it cost: wall time, tokens and trials, the machine. Where trials
logged the gradient noise scale: ``forecast.json`` (the ``forecast`` and ``calibration``
keys of ``cbs study fit --json``, calibrated against the committed CSV's fit), ``gns.csv`` (every
trial's logged ``gns/*`` values) and the forecast figures. A ``schedule`` study's steps table has one
setting per schedule (``{setting}.{schedule}``), so its Curves figure draws them side by side, and
``schedules.json``/``schedules.txt`` hold ``cbs study fit``'s readout (targets, WSD's E(S) fits).

Everything is written to a temporary folder first and moved into place at the end, so a failure
never leaves half a report.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from app.kinds import app_kind
from cbscore.analysis import StepsRow, steps_csv_text
from cbscore.cli.fit import format_analysis
from cbscore.errors import CbsError, ConfigError
from cbscore.study.lr_predict import allowed_rates
from workers.query.api import new_folder_beside, replace_folder


def fit_of_csv(steps_csv: Path, *, b_ref: int, overhead: float):
    """The analysis ``cbs fit STEPS --b-ref B --overhead r`` computes (1,000 resamples, seed 0), and
    the exact text its ``--json`` prints."""
    from cbscore.analysis import analyze_table, read_steps_csv

    analysis = analyze_table(read_steps_csv(steps_csv), b_ref=b_ref, overhead=overhead, bootstrap=1000, seed=0)
    return analysis, json.dumps(analysis.to_json_dict(), indent=2, allow_nan=False) + "\n"


def _figures(table, rows: Sequence[StepsRow], b_ref: int, overhead: float) -> dict[str, object]:
    """The pages' figures of the study (pure builders in ``app.charts``/``app.fit_view``): the fits
    of ``table`` (the committed CSV's), each point's best trial from ``rows`` (the full table)."""
    from app import charts, fit_view

    curves = fit_view.setting_curves(table, rows)
    figs: dict[str, object] = {
        "curves": charts.steps_to_target_figure(curves, b_ref=b_ref, overhead=overhead),
        "curves-normalized": charts.steps_to_target_figure(curves, b_ref=b_ref, overhead=overhead, normalized=True),
    }
    for variable, title in (("n", "N (millions of non-embedding parameters, log)"), ("d", "D (training tokens, log)")):
        points = fit_view.scaling_points(table, variable)
        if points:
            figs[f"scaling-{variable}"] = charts.scaling_law_figure(
                points, fits=fit_view.fitted_laws(table, variable), x_title=title)
    return figs


def _forecast_figures(table, forecast, b_ref: int, overhead: float) -> dict[str, object]:
    """The Curves page's forecast overlays and the Scaling page's forecast against measured B*."""
    from app import gns_charts

    cal = forecast.calibration
    by_setting = {s.setting: s for s in table.settings}
    figs: dict[str, object] = {}
    for f in forecast.forecasts:
        s = by_setting.get(f.setting)
        measured = tuple((int(b), float(v)) for b, v in zip(s.batch_sizes, s.steps)) if s is not None else ()
        figs[f"forecast-{f.setting}"] = gns_charts.forecast_overlay_figure(gns_charts.ForecastOverlay(
            label=f.setting, measured=measured, b_run=f.b_run, target_step=f.target_step, b_hat=f.b_hat,
            factor=None if cal is None else cal.factor, factor_ci=None if cal is None else cal.factor_ci))
    fc_json, cal_json = forecast.to_json_dict()
    points = gns_charts.forecast_points(fc_json, cal_json, table.settings, b_ref=b_ref, overhead=overhead)
    if points:
        figs["forecast-vs-measured"] = gns_charts.forecast_vs_measured_figure(points)
    return figs


#: Columns of ``gns.csv``: one row per logged noise-scale value of every ended trial.
NOISE_COLUMNS = ("trial_id", "setting", "batch_size", "role", "lr", "outcome", "step", "tokens", "g2",
                 "trace_sigma", "b_simple")


def _write_figures(figs: dict[str, object], folder: Path) -> list[str]:
    """PNG through kaleido where it can render (it needs a Chrome), else standalone HTML."""
    written = []
    for name, fig in figs.items():
        try:
            fig.write_image(str(folder / f"{name}.png"), width=1000, height=560, scale=2)
            written.append(f"{name}.png")
        except Exception as exc:  # kaleido missing or no Chrome: keep the figure as HTML, say why
            fig.write_html(str(folder / f"{name}.html"), include_plotlyjs="cdn")
            written.append(f"{name}.html (PNG failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
    return written


def best_learning_rates(rows: Iterable[StepsRow], allowed: tuple[float, ...]) -> list[dict]:
    """Per cell, the learning rate of its fastest trial and whether it sits at an end of the rates
    that cell ran (then the best rate may lie outside them, and S(B) is an upper bound on the tuned
    value; ``"only"`` when the cell ran one rate); under ``seeds``, the same for each training seed
    (the fastest trial is one seed's, and another seed's best may sit at the other edge). The rates run are the cell's own: the planner extends a cell's rates past the spec's grid
    (``search.lr_extensions``), so the spec's grid is not the edge. ``allowed_edge`` says whether the
    best rate is also an end of ``allowed`` (the grid and its extensions), past which no study of
    this spec could go."""
    best: dict[tuple[str, int], StepsRow] = {}  # (setting, B): the fastest reached trial
    run: dict[tuple[str, int], set[float]] = {}  # (setting, B): the rates run
    seed_best: dict[tuple[str, int], dict[int, StepsRow]] = {}  # the same per training seed
    seed_run: dict[tuple[str, int], dict[int, set[float]]] = {}
    for r in rows:
        if r.lr is None:
            continue
        key = (r.setting, r.batch_size)
        if r.outcome != "failed":
            run.setdefault(key, set()).add(float(r.lr))
            if r.seed is not None:
                seed_run.setdefault(key, {}).setdefault(r.seed, set()).add(float(r.lr))
        if r.outcome != "reached" or r.steps is None:
            continue
        if key not in best or r.steps < best[key].steps:
            best[key] = r
        if r.seed is not None:
            by_seed = seed_best.setdefault(key, {})
            if r.seed not in by_seed or r.steps < by_seed[r.seed].steps:
                by_seed[r.seed] = r
    out = []
    for (setting, b), r in sorted(best.items()):
        lr, rates = float(r.lr), sorted(run[(setting, b)])
        # each seed's own fastest rate (the fit reads every seed's optimum, cbscore.analysis._points): one
        # seed's trial can be the cell's fastest while the other seed's best sits at the other edge
        seeds = [{"seed": seed, "best_lr": float(v.lr), "steps": float(v.steps),
                  "at_grid_edge": _edge(float(v.lr), sorted(seed_run[(setting, b)][seed]))}
                 for seed, v in sorted(seed_best.get((setting, b), {}).items())]
        out.append({"setting": setting, "batch_size": b, "best_lr": lr, "steps": float(r.steps),
                    "tau": r.tau, "rates_run": rates, "at_grid_edge": _edge(lr, rates),
                    "allowed_edge": bool(allowed) and lr in (min(allowed), max(allowed)), "seeds": seeds})
    return out


def _edge(lr: float, rates: list[float]) -> str | None:
    """Where ``lr`` sits among the ascending ``rates`` run: ``only`` (one rate), ``lowest``,
    ``highest``, or ``None`` (inside)."""
    return "only" if len(rates) < 2 else "lowest" if lr == rates[0] else "highest" if lr == rates[-1] else None


def study_best_rates(spec, rows: Sequence[StepsRow]) -> list[dict] | None:
    """:func:`best_learning_rates` of a study whose search names each trial's rate (``grid``,
    ``chained``: ``search.runs_rates``); ``None`` for Optuna. Only a grid has a fixed set of allowed
    rates (its ``lrs`` and their extensions); a chained cell's rates follow its neighbour's best."""
    if not spec.search.runs_rates:
        return None
    # where the kind's rates move with B (a schedule study's decay.lr_exponent), no one set is allowed at every B
    same_at_every_b = app_kind(spec).same_rates_at_every_b
    fixed = spec.search.kind == "grid" and (same_at_every_b is None or same_at_every_b(spec))
    allowed = allowed_rates(spec.search.lrs, spec.search.lr_extensions) if fixed else ()
    return best_learning_rates(rows, allowed)


def write_report(name: str, out: str | os.PathLike, *, command: str | None = None) -> list[str]:
    """Write the study's report folder; returns the files written."""
    import torch

    from workers.query import api

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", str(out), "exists and is not a folder")
    spec = api.study_spec(name)
    status = api.study_status(name)
    kind = app_kind(spec)
    full = (api.study_table if kind.report_table is None else kind.report_table)(name)  # a schedule study's: per schedule
    if not full:
        raise CbsError(f"study {name!r} has no finished trials yet, so there is nothing to report.")
    wall = api.study_wall_time(name)
    # The whole report is made in a folder beside ``out`` and put in place with one rename: a file
    # of an earlier report never survives (the hand-written README.md is carried over).
    tmp = new_folder_beside(out)
    try:
        if (out / "README.md").is_file():
            shutil.copy2(out / "README.md", tmp / "README.md")
        (tmp / "steps.csv").write_text(steps_csv_text(full, api.FIT_COLUMNS))
        (tmp / "trials.csv").write_text(steps_csv_text(full, api.TABLE_COLUMNS))
        table, fit_text = fit_of_csv(tmp / "steps.csv", b_ref=spec.b_ref, overhead=spec.overhead)
        (tmp / "fit.json").write_text(fit_text)
        # The same fit as `cbs fit steps.csv --b-ref B --overhead r` prints it: per setting the interval's
        # basis, doubling ratios and lack of fit; the noise by source; which doublings carry each law.
        (tmp / "fit.txt").write_text(format_analysis(table) + "\n")
        if kind.report_readout is not None:  # the kind's own readout (`cbs study fit`'s per schedule)
            kind.report_readout(name, tmp)
        (tmp / "spec.yaml").write_text(spec.to_yaml())
        figs = _figures(table, full, spec.b_ref, spec.overhead)
        forecast = api.study_forecast(name, analysis=table)
        if forecast.forecasts:
            fc_json, cal_json = forecast.to_json_dict()
            (tmp / "forecast.json").write_text(
                json.dumps({"forecast": fc_json, "calibration": cal_json}, indent=2, allow_nan=False) + "\n")
            figs.update(_forecast_figures(table, forecast, spec.b_ref, spec.overhead))
        noise = api.study_noise_scale_rows(name)
        if noise:
            (tmp / "gns.csv").write_text(steps_csv_text(noise, NOISE_COLUMNS))
        figures = _write_figures(figs, tmp)
        summary = {
            "study": name, "status": status.status, "counts": dict(status.counts), "trials": status.n_trials,
            "tokens_spent": status.tokens_spent, "tokens_fixed_budget_grid": status.grid_tokens,
            # Against the grid stopped at the target and the oracle (cbscore.study.costs).
            "costs": status.costs.to_dict() if status.costs is not None else None,
            "wall_seconds": wall.seconds, "first_trial_start": wall.first_start, "last_trial_end": wall.last_end,
            "targets": dict(status.targets), "command": command,
            "refit": f"cbs fit steps.csv --b-ref {spec.b_ref} --overhead {spec.overhead:g} --json",
            "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                        "cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
            "figures": figures,
            "best_learning_rates": study_best_rates(spec, full),
        }
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        written = sorted(f.name for f in tmp.iterdir() if f.name != "README.md")
        tmp.chmod(0o755)  # mkdtemp's folder is private
        replace_folder(tmp, out)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
