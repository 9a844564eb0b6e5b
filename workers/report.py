"""``cbs study report NAME --out DIR``: a study's evidence, in files anyone can refit.

Results that come from running the lab live under ``docs/results/<name>/``: the steps table (the
``cbs fit`` CSV), the fit of *that file* (so ``cbs fit steps.csv --b-ref B --overhead r --json``
gives it back byte for byte), the Curves and Scaling-laws figures drawn by the same chart code
the pages use (PNG through kaleido, when it and a Chrome are installed; HTML otherwise), the spec,
and ``summary.json`` with what it cost: wall time, tokens and trials, the machine.

Everything is written to a temporary folder first and moved into place at the end, so a failure
never leaves half a report.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path

from cbscore.errors import CbsError, ConfigError


def _csv_text(rows: list[dict], columns: tuple[str, ...]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})
    return buf.getvalue()


def fit_of_csv(steps_csv: Path, *, b_ref: int, overhead: float):
    """The analysis ``cbs fit STEPS --b-ref B --overhead r`` computes (1,000 resamples, seed 0), and
    the exact text its ``--json`` prints."""
    from cbscore.analysis import analyze_table, read_steps_csv

    analysis = analyze_table(read_steps_csv(steps_csv), b_ref=b_ref, overhead=overhead, bootstrap=1000, seed=0)
    return analysis, json.dumps(analysis.to_json_dict(), indent=2, allow_nan=False) + "\n"


def _figures(table, rows: list[dict], b_ref: int, overhead: float) -> dict[str, object]:
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


def best_learning_rates(rows: list[dict], lrs: tuple[float, ...]) -> list[dict]:
    """Per cell, the learning rate of its fastest trial and whether it sits at an end of the grid
    (then the best rate may lie outside it, and S(B) is an upper bound on the tuned value)."""
    best: dict[tuple[str, int], dict] = {}
    for r in rows:
        if r.get("outcome") != "reached" or r.get("steps") in (None, ""):
            continue
        key = (r["setting"], int(r["batch_size"]))
        if key not in best or float(r["steps"]) < float(best[key]["steps"]):
            best[key] = r
    lo, hi = min(lrs), max(lrs)
    out = []
    for (setting, b), r in sorted(best.items()):
        lr = float(r["lr"])
        edge = "lowest" if lr == lo else "highest" if lr == hi else None
        out.append({"setting": setting, "batch_size": b, "best_lr": lr, "steps": float(r["steps"]),
                    "tau": r.get("tau"), "at_grid_edge": edge})
    return out


def _wall_seconds(name: str) -> tuple[float | None, str | None, str | None]:
    """Seconds from the first trial's start to the last trial's end (MLflow run times)."""
    from datetime import datetime, timezone

    from workers import api

    tracker = api._tracker()
    parent = api._parent(tracker, name)
    runs = tracker.trial_runs(parent.info.experiment_id, parent.info.run_id)
    starts = [r.info.start_time for r in runs if r.info.start_time]
    ends = [r.info.end_time for r in runs if r.info.end_time]
    if not starts or not ends:
        return None, None, None
    iso = lambda ms: datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    return (max(ends) - min(starts)) / 1000.0, iso(min(starts)), iso(max(ends))


def write_report(name: str, out: str | os.PathLike, *, command: str | None = None) -> list[str]:
    """Write the study's report folder; returns the files written."""
    import torch

    from workers import api

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", str(out), "exists and is not a folder")
    spec = api.study_spec(name)
    status = api.study_status(name)
    full = api.study_table(name)
    if not full:
        raise CbsError(f"study {name!r} has no finished trials yet, so there is nothing to report.")
    wall, first, last = _wall_seconds(name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent if out.parent.exists() else None))
    try:
        (tmp / "steps.csv").write_text(_csv_text(full, api.FIT_COLUMNS))
        (tmp / "trials.csv").write_text(_csv_text(full, api.TABLE_COLUMNS))
        table, fit_text = fit_of_csv(tmp / "steps.csv", b_ref=spec.b_ref, overhead=spec.overhead)
        (tmp / "fit.json").write_text(fit_text)
        (tmp / "spec.yaml").write_text(spec.to_yaml())
        figures = _write_figures(_figures(table, full, spec.b_ref, spec.overhead), tmp)
        summary = {
            "study": name, "status": status.status, "counts": dict(status.counts), "trials": status.n_trials,
            "tokens_spent": status.tokens_spent, "tokens_fixed_budget_grid": status.grid_tokens,
            "wall_seconds": wall, "first_trial_start": first, "last_trial_end": last,
            "targets": dict(status.targets), "command": command,
            "refit": f"cbs fit steps.csv --b-ref {spec.b_ref} --overhead {spec.overhead:g} --json",
            "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                        "cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
            "figures": figures,
            "best_learning_rates": best_learning_rates(full, spec.search.lrs) if spec.search.kind == "grid" else None,
        }
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for f in sorted(tmp.iterdir()):
            os.replace(f, out / f.name)  # README.md and other files already in the folder stay
            written.append(f.name)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
