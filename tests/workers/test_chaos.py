"""The chaos run at its small size (issues 12 and 22): a grid study and an Optuna cell, launched
in a browser through the web app under ``cbs up`` and tracked through the MLflow server, complete
with the same steps table and B* as an undisturbed run while workers, their children, the runner,
the MLflow server and the web app are killed at random, ``$CBS_HOME`` fills up for 30 s and (Redis
+ PostgreSQL) each service is cut off for 30 s; no run left open, no checkpoint left, every
history whole (no step twice, none missing). ``benchmarks/chaos.py`` runs the larger size of docs/operating.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["fs", pytest.param("redis-pg", marks=pytest.mark.services)])
def test_a_small_study_survives_random_kills(tmp_path, backend):
    from tests.app.test_e2e_browser import CHROMEDRIVER, CHROMIUM

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("the chaos run launches in a browser: apt-get install -y chromium chromium-driver")
    if backend == "redis-pg":
        from tests.workers.test_worker_process import POSTGRES_URL, redis_or_skip

        redis_or_skip()
        import psycopg2

        try:
            psycopg2.connect(POSTGRES_URL, connect_timeout=2).close()
        except Exception as exc:  # noqa: BLE001
            from tests.workers.test_worker_process import missing_service

            missing_service(f"no PostgreSQL answers at {POSTGRES_URL} ({type(exc).__name__})")
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--backend", backend,
                           "--size", "small", "--home", str(tmp_path / "home"), "--json", str(out)],
                          capture_output=True, text=True, timeout=2700, cwd=ROOT)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert sum(report["kills"].values()) >= 3, report["kills"]
    assert "error" not in report, report["error"]
    assert report["identical_table"], {k: v for k, v in report.items() if k.startswith("table_diff")}
    assert report["b_star_calm"] == report["b_star_chaos"]
    assert report["runs_left_open"] == [] and report["chaos_files_left"] == []
    assert report["histories_with_gaps_or_duplicates"] == {} and report["histories_unlike_calm"] == {}
    assert report["optuna_trials_left_running"] == []
    assert report["passed"] and proc.returncode == 0
