"""How fast the lab's pages are with 1,000 finished trials in MLflow.

Seeds a real SQLite MLflow store in a temporary folder (through ``workers.tracking`` and MLflow's
client, the layout the runner and workers write; tests/app/store_seed.py) and the ledger (each
trial's lease, and each ended trial's row of the pages' read model, as a trial keeps it when it
ends: workers/studies/read_model.py), then renders the Curves, Scaling laws and Studies pages with
Streamlit's AppTest (the page scripts exactly as the server runs them, in a process warmed up as
``cbs web`` warms its own: app/warm_up.py) and times:

* ``first``: the very first read of the study on this host: every cache empty, the page's and
  the tracker's, in memory and on disk (the ended trials from the ledger's read model, MLflow
  asked for the trials in flight; the fit of the steps table as the read model keeps it);
* ``unfit``: the same with no fit of this table kept yet (the first visit anywhere after a trial
  ended: the page bootstraps the table and keeps the fit);
* ``runner``: the first visit of a web app that starts on a host whose runner (``cbs study
  watch``, as ``cbs up`` runs it) has passed over the study: the runner's read fills the same
  on-disk caches (issue 25: "keep the per-host cache warm from the runner");
* ``restart``: the first visit after the web app restarted: nothing in memory, the ended runs
  this host already read on disk (``workers.tracking``), so MLflow is asked for what changed;
* ``cold``: the page's caches empty within a running app (the first visit, or the first after
  the data changed);
* ``warm``: the same page again within the caches' ttl (moving between pages, a rerun);
* ``refresh``: the Studies page with its live reads expired (what ``st.fragment(run_every=2)``
  costs every five seconds: the study's records, the workers, the planner, the figures; the
  studies list, the running trials' throughput and the steps table are reused for 10 s);
* the ``workers.query.api`` reads behind them.

Targets: a first visit under 1 s on every page (issue 43), the studies page refresh under 1 s
(issue 6). ``first`` and ``unfit`` are reported as the median and the slowest of ``--repeat``, and
every case's median again in the process's CPU seconds (the pages run on a host other work may
share: its load inflates the wall times, much less the CPU).

    .venv/bin/python benchmarks/bench_app.py [--trials 1000] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000, help="finished trials to seed (about; default 1000)")
    parser.add_argument("--repeat", type=int, default=3, help="timings per figure (median reported)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="cbs-bench-app-"))
    os.environ.update({
        "CBS_HOME": str(folder / "home"), "CBS_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
        "CBS_ARTIFACT_ROOT": str(folder / "artifacts"), "CBS_LEDGER_URL": f"sqlite:///{folder / 'ledger.db'}",
        "CBS_OPTUNA_STORAGE": f"sqlite:///{folder / 'optuna.db'}", "CBS_TRACKING_UI_URL": "http://127.0.0.1:9",
        "MLFLOW_DISABLE_TELEMETRY": "true", "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
    })
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from tests.app.store_seed import seed_study, spec_for
    from workers.query import api
    from workers.tracking import Tracker

    # 8 settings × 9 batch sizes × 14 learning rates = 1,008 trials (+ 4 still running).
    batch_sizes = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)
    n_settings = 8
    n_lrs = max(3, round(args.trials / (n_settings * len(batch_sizes))))
    lrs = tuple(round(1e-3 * 1.3**k, 6) for k in range(n_lrs))
    spec = spec_for("bench", n_settings=n_settings, batch_sizes=batch_sizes, lrs=lrs, b_ref=256)
    tracker = Tracker(os.environ["CBS_TRACKING_URI"], os.environ["CBS_ARTIFACT_ROOT"])
    t0 = time.perf_counter()
    seed_study(tracker, spec, running=4, b_noise_per_setting=[256 * 1.5**i for i in range(n_settings)],
               ledger=api.open_ledger())
    seed_s = time.perf_counter() - t0
    n_trials = len(api.study_records("bench"))
    print(f"seeded {n_trials} trials (study 'bench': {n_settings} settings × {len(batch_sizes)} batch sizes × "
          f"{n_lrs} learning rates, + 4 running) in {seed_s:.0f} s, store {folder}", flush=True)

    from app import warm_up

    warm_up.warm()  # what `cbs web` does as it starts (app/server.py): imports, stores, the collector settled
    app = str(ROOT / "app" / "streamlit_app.py")

    def page(name: str) -> AppTest:
        at = AppTest.from_file(app, default_timeout=120)
        at.query_params["study"] = "bench"
        at.run()
        at.switch_page(f"app_pages/{name}.py")
        return at

    import shutil

    from cbscore import paths
    from workers.studies import read_model

    def forget(disk: bool) -> None:
        """A new web app process: the page caches, the tracker's in-memory caches and the ended
        trials the process remembers go; ``disk``: the on-disk cache of ended runs too (the first
        read of the study on this host)."""
        st.cache_data.clear()
        st.cache_resource.clear()
        Tracker._ENDED.clear()
        Tracker._HISTORY.clear()
        read_model.forget()
        if disk:
            shutil.rmtree(paths.cbs_home() / "cache", ignore_errors=True)

    def runner_pass() -> None:
        """What one pass of ``cbs study watch`` reads of the study (``Runner._advance_once``): its
        trial runs and the records the planner needs, through the same tracker caches."""
        from workers.infra.settings import WorkerSettings
        from workers.studies.ledger import Ledger
        from workers.studies.records import build_records

        parent = tracker.study_run("bench")
        runs = tracker.trial_runs(parent.info.experiment_id, parent.info.run_id)
        build_records(runs, Ledger(WorkerSettings.from_env().ledger_url).leases("bench"), tracker)

    def forget_fits() -> None:
        """No fit of the study's table kept in the read model (as after a trial ended)."""
        from workers.studies.ledger import FITS

        with api.open_ledger().engine.begin() as conn:
            conn.execute(FITS.delete().where(FITS.c.study == "bench"))

    def run_timed(at: AppTest, out: dict[str, list[tuple[float, float]]], case: str) -> None:
        """One render of the page, its (wall, CPU) seconds added to ``out[case]``."""
        t, c = time.perf_counter(), time.process_time()
        at.run()
        out.setdefault(case, []).append((time.perf_counter() - t, time.process_time() - c))
        assert not at.exception, at.exception

    cases = ("first", "unfit", "runner", "restart", "cold", "warm", "refresh")
    figures: dict[str, dict[str, float]] = {}
    for name in ("curves", "scaling", "studies"):
        at = page(name)
        times: dict[str, list[tuple[float, float]]] = {}
        for _ in range(args.repeat):
            for disk, case in ((True, "unfit"), (True, "first"), (False, "restart")):
                forget(disk)
                if case == "unfit":
                    forget_fits()
                run_timed(at, times, case)
            # A runner on this host has passed over the study (its read: every trial run, the records
            # with the curves the planner needs), then the web app starts: its first visit.
            forget(True)
            runner_pass()
            forget(False)
            run_timed(at, times, "runner")
        for _ in range(args.repeat):
            st.cache_data.clear()
            st.cache_resource.clear()
            run_timed(at, times, "cold")
            run_timed(at, times, "warm")
        if name == "studies":
            from app import sources

            for _ in range(args.repeat):  # the live reads expire every LIVE_TTL_S: read them again
                for fn in (sources.records, sources.alive_workers):
                    fn.clear()
                run_timed(at, times, "refresh")
        figures[name] = {}
        for case, pairs in times.items():
            figures[name][f"{case}_s"] = statistics.median(w for w, _ in pairs)
            figures[name][f"{case}_cpu_s"] = statistics.median(c for _, c in pairs)
        for case in ("first", "unfit"):
            figures[name][f"{case}_max_s"] = max(w for w, _ in times[case])
        figures[name]["after_runner_s"] = figures[name]["runner_s"]  # the name earlier JSON used

    calls = {
        "list_studies": lambda: api.list_studies(),
        "study_records": lambda: api.study_records("bench"),
        "study_table": lambda: api.study_table("bench"),
        "analyze_table (bootstrap 1000)": lambda: __import__("cbscore.analysis", fromlist=["x"]).analyze_table(
            api.study_table("bench"), b_ref=256, bootstrap=1000),
    }
    api_figures = {k: statistics.median(_timed(fn, args.repeat)) for k, fn in calls.items()}

    print(f"\npages with {n_trials} trials (median of {args.repeat}, slowest after /; seconds of server-side render; "
          "cpu: this process's CPU seconds):")
    print(f"{'page':<10} {'first':>11} {'cpu':>5} {'unfit':>11} {'cpu':>5} {'runner':>7} {'restart':>8} {'cold':>7} "
          f"{'warm':>7} {'refresh':>8}   target")
    targets = {"curves": "first < 1 s", "scaling": "first < 1 s", "studies": "first, refresh < 1 s"}
    for name, f in figures.items():
        refresh = f"{f['refresh_s']:.2f}" if "refresh_s" in f else "—"
        first = f"{f['first_s']:.2f}/{f['first_max_s']:.2f}"
        unfit = f"{f['unfit_s']:.2f}/{f['unfit_max_s']:.2f}"
        print(f"{name:<10} {first:>11} {f['first_cpu_s']:>5.2f} {unfit:>11} {f['unfit_cpu_s']:>5.2f} "
              f"{f['runner_s']:>7.2f} {f['restart_s']:>8.2f} {f['cold_s']:>7.2f} {f['warm_s']:>7.2f} "
              f"{refresh:>8}   {targets[name]}")
    print("\nthe same, CPU seconds of this process (what load on the host does not inflate):")
    print(f"{'page':<10}" + "".join(f" {c:>8}" for c in cases))
    for name, f in figures.items():
        print(f"{name:<10}" + "".join(f" {f[c + '_cpu_s']:>8.2f}" if c + "_cpu_s" in f else f" {'—':>8}" for c in cases))
    print("\nworkers.api and analysis behind them:")
    for k, v in api_figures.items():
        print(f"  {k:<32} {v:6.2f} s")
    if args.json:
        args.json.write_text(json.dumps({"trials": n_trials, "pages": figures, "api": api_figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
