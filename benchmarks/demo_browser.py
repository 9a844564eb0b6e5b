"""The demo as a researcher meets it (issue 27): a fresh clone, ``make run``, the ``demo`` preset
launched by clicking "Launch study" in a real browser, and the Scaling laws page read back once the
study is done.

    python benchmarks/demo_browser.py --out docs/results/demo

What it does, in order (each step's wall time goes to ``run.json`` in ``--out``):

1. ``git clone`` of this checkout's HEAD into ``--workdir`` (a new folder), so nothing of this
   checkout (its ``.venv``, ``.cbs``, caches) is reused;
2. ``make run`` there, in its own process group, with every tool cache inside the clone; waits for
   ``cbs up: ready``;
3. a headless chromium (Debian's, through chromedriver and selenium, as the e2e test drives it)
   opens the Launch page, checks that the form holds the ``demo`` preset, and clicks "Launch study";
4. polls ``cbs study status demo --json`` until the study is done (a line a minute);
5. opens the Scaling laws page of the study and copies what it says of the ordering by D at fixed
   N, with and without the reference point, into ``page.json`` (and a screenshot);
6. ``cbs study report demo --out OUT`` (it replaces OUT as a whole), the screenshots and the tail
   of ``make run``'s log into ``OUT/browser/``, the timings into ``OUT/run.json``; then Ctrl-C to ``cbs up`` (SIGINT to its group; SIGKILL
   after 60 s).

The figure the issue asks for is step 4's wall time (≤ 20 min on two cores). Nothing else should
run on the machine meanwhile; the script records the load average at the start and at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STUDY = "demo"
READY = re.compile(r"cbs up: ready — web app (http://127\.0\.0\.1:\d+)")


def _env(clone: Path) -> dict[str, str]:
    """The environment of ``make run``: this one less anything that points into this checkout or at
    another lab, and every cache inside the clone (as the Makefile's test environment does)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CBS_", "MLFLOW_TRACKING", "VIRTUAL_ENV", "PYTHONPATH"))}
    cache = clone / ".cache"
    env.update(HF_HOME=str(cache / "hf"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), MLFLOW_DISABLE_TELEMETRY="true",
               DO_NOT_TRACK="1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false",
               XDG_CACHE_HOME=str(cache / "xdg"), MPLCONFIGDIR=str(cache / "mpl"))
    return env


def _cli(clone: Path, env: dict, *args: str, timeout_s: float = 300) -> dict:
    out = subprocess.run([str(clone / ".venv/bin/cbs"), *args], env=env, cwd=clone, capture_output=True,
                         text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"cbs {' '.join(args)} exited {out.returncode}: {out.stderr[-2000:]}")
    return json.loads(out.stdout) if "--json" in args else {"stdout": out.stdout}


def _wait_ready(log: Path, proc: subprocess.Popen, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if m := READY.search(text):
            return m.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"make run exited {proc.returncode} before it was ready:\n{text[-3000:]}")
        time.sleep(2)
    raise RuntimeError(f"make run was not ready after {timeout_s:.0f} s; see {log}")


def _launch(driver, web: str, shots: Path) -> None:
    """Open the Launch page, check it holds the demo preset, click "Launch study", wait for the
    study's live page."""
    from benchmarks.browser_launch import page_errors as _errors
    from tests.app import test_e2e_browser as e2e

    driver.get(web)
    e2e._wait(driver, lambda d: "Launch a study" in d.page_source, 120, "the Launch page")
    e2e._wait(driver, lambda d: e2e._input(d, "Study name").get_attribute("value") == STUDY, 60,
              "the form's study name to be the demo preset's")
    driver.save_screenshot(str(shots / "launch.png"))
    e2e._button(driver, "Launch study").click()
    e2e._wait(driver, lambda d: _errors(d) or ("/studies" in d.current_url and STUDY in d.page_source), 300,
              "the study's live page")
    if errors := _errors(driver):
        raise RuntimeError(f"the Launch page says: {errors}")
    driver.save_screenshot(str(shots / "launched.png"))


def _read_scaling_page(driver, web: str, shots: Path) -> dict:
    """What the Scaling laws page says of the ordering by D (its alerts under "Ordering by D")."""
    from selenium.webdriver.common.by import By

    from tests.app import test_e2e_browser as e2e

    driver.get(f"{web}/scaling?study={STUDY}")
    e2e._wait(driver, lambda d: "Ordering by D at fixed N" in d.page_source, 180, "the ordering by D")
    time.sleep(5)  # the page finishes rendering its charts after the section's heading
    sentences = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stAlert']")
                 if "ordering by D" in a.text]
    driver.save_screenshot(str(shots / "scaling.png"))
    return {"url": f"/scaling?study={STUDY}", "ordering_by_d": sentences}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "docs/results/demo", help="the report's folder")
    p.add_argument("--workdir", type=Path, default=None, help="where to clone (a new folder; default /tmp/cbs-demo-<time>)")
    p.add_argument("--timeout-min", type=float, default=40.0, help="give up on the study after this long")
    args = p.parse_args(argv)

    from benchmarks.browser_launch import chromium as _chromium
    from tests.app import test_e2e_browser as e2e

    clone = args.workdir or Path(f"/tmp/cbs-demo-{int(time.time())}")
    if clone.exists():
        p.error(f"--workdir {clone} exists; give a new folder")
    out = args.out.resolve()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    record: dict = {"commit": commit, "command": "python benchmarks/demo_browser.py --out " + str(args.out),
                    "machine": {"cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
                                "load_at_start": os.getloadavg()}}
    t0 = time.monotonic()
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    env = _env(clone)
    # `cbs study report` replaces OUT as a whole, so the screenshots wait in the clone until it has
    shots = clone / "browser"
    shots.mkdir()
    log = clone / "make-run.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(["make", "run"], cwd=clone, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        web = _wait_ready(log, proc, timeout_s=1200)
        record["make_run_to_ready_s"] = round(time.monotonic() - t0, 1)
        print(f"demo: make run ready after {record['make_run_to_ready_s']:.0f} s at {web}", flush=True)
        with _chromium(e2e, shots / "chromium-profile") as driver:
            _launch(driver, web, shots)
            t_launch = time.monotonic()
            print("demo: launched from the browser", flush=True)
            status: dict = {}
            next_line = 0.0
            while time.monotonic() - t_launch < args.timeout_min * 60:
                status = _cli(clone, env, "study", "status", STUDY, "--json")
                if status.get("status") == "done":
                    break
                if time.monotonic() >= next_line:
                    print(f"demo: {time.monotonic() - t_launch:5.0f} s {json.dumps(status.get('counts', status))[:200]}",
                          flush=True)
                    next_line = time.monotonic() + 60
                # `cbs study status` is a whole Python start-up and an MLflow read (~3 s of a core):
                # polled every 5 s it took a third of a core from the study it timed (the first run)
                time.sleep(30)
            record["launch_to_done_s"] = round(time.monotonic() - t_launch, 1)
            if status.get("status") != "done":
                raise RuntimeError(f"the demo was not done after {args.timeout_min} min: {status}")
            print(f"demo: done {record['launch_to_done_s']:.0f} s after the click", flush=True)
            record["page"] = _read_scaling_page(driver, web, shots)
        _cli(clone, env, "study", "report", STUDY, "--out", str(out), timeout_s=900)
        record["machine"]["load_at_end"] = os.getloadavg()
        summary = json.loads((out / "summary.json").read_text())
        record["tokens"] = summary.get("tokens_spent")
        record["wall_seconds_first_start_to_last_end"] = summary.get("wall_seconds")
        record["status"] = status
    finally:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        (shots / "make-run.log").write_text(log.read_text(errors="replace")[-20000:] if log.exists() else "")
        (out / "browser").mkdir(parents=True, exist_ok=True)
        for f in [*shots.glob("*.png"), shots / "make-run.log"]:
            shutil.copy2(f, out / "browser" / f.name)
        (out / "run.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(json.dumps(record, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
