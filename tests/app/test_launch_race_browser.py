"""Issue 42 (finding 4) in a real browser: the Launch page launches exactly what it shows.

A YAML pasted over the ``demo`` preset, loaded, and "Launch study" clicked at once, as the chaos
run's harness does (it waits for the name field only): the browser may still show the preset's
learning rates under the YAML's name, and sends them with the click. Today's page refuses such a
submit (it names the fill it was drawn from), shows the plan of the YAML, and launches the YAML's
rates at the second click; a YAML pasted and launched without loading it is launched as it is.

The race needs the page to be slow between the name field and the rates field, as on a loaded
machine: the web app runs with a ``sitecustomize`` that holds the first drawing of "Learning
rates" after the form is filled with each of the test's studies for a few seconds (the fault injection; nothing else changes). Only
``cbs web`` runs (a launch enqueues; no worker is needed to read the launched spec back).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.app.test_e2e_browser import (
    CHROMEDRIVER,
    CHROMIUM,
    _button,
    _free_port,
    _input,
    _open_expander,
    _wait,
    _wait_http,
    chromium,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

#: The YAML's rates are none of the demo preset's (0.006, 0.012, 0.024).
RATES = (0.003, 0.01, 0.03)
SPEC_YAML = f"""name: {{name}}
kind: custom
settings:
  - {{{{model: tiny-0.1M, tokens: 8000}}}}
batch_sizes: [2, 4, 8]
context_tokens: 16
b_ref: 4
search: {{{{kind: grid, lrs: [{', '.join(map(str, RATES))}]}}}}
data: {{{{source: builtin, vocab_size: 512, max_documents: 120, val_fraction: 0.1}}}}
"""
#: Holds the first drawing of the rates field after the form is filled with one of this test's
#: studies (a slow page; keyed by the name field, which the page had before this issue too).
SLOW_RATES = '''
import time
import streamlit as st
from streamlit.elements.widgets.text_widgets import TextWidgetsMixin

_original, _held = TextWidgetsMixin.text_input, set()


def text_input(self, label, *args, **kwargs):
    name = str(st.session_state.get("launch.name", ""))  # the study the form was just filled with
    if label == "Learning rates" and name.startswith("race-") and name not in _held:
        _held.add(name)
        time.sleep(4)
    return _original(self, label, *args, **kwargs)


TextWidgetsMixin.text_input = text_input
'''


@pytest.fixture
def slow_web(tmp_path):
    """``cbs web`` alone on a free port, slow between the name and the rates of a fresh fill."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)")
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SLOW_RATES)
    port = _free_port()
    env = {**os.environ, "CBS_HOME": str(tmp_path / "home"), "CBS_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "CBS_ARTIFACT_ROOT": str(tmp_path / "artifacts"), "CBS_TRIAL_QUEUE": "cpu", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": str(inject)}
    for key in ("CBS_BROKER_URL", "CBS_LEDGER_URL", "CBS_OPTUNA_STORAGE", "MLFLOW_TRACKING_URI"):
        env.pop(key, None)
    log = open(tmp_path / "web.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "cbs"), "web", "--port", str(port)], env=env,
                            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/_stcore/health", 90)
        yield f"http://127.0.0.1:{port}", env
    finally:
        import signal

        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)


def _launched_lrs(env: dict, name: str) -> list[float]:
    from workers.tracking import Tracker

    tracker = Tracker(env["CBS_TRACKING_URI"])
    return list(tracker.study_spec(tracker.study_run(name))["search"]["lrs"])


def _paste(driver, text: str) -> None:

    _open_expander(driver, "Paste or upload a YAML spec", "YAML spec", "textarea").send_keys(text)


def _value(driver, label: str) -> str | None:
    """The value of the input labelled ``label``, None while the page shows none (no waiting)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        found = driver.find_elements(By.CSS_SELECTOR, f"input[aria-label='{label}']")
        return found[0].get_attribute("value") if found else None
    except StaleElementReferenceException:
        return None


def _launched(driver, name: str) -> bool:
    return "/studies" in driver.current_url and name in driver.page_source


def test_yaml_pasted_over_a_preset_and_launched_at_once_launches_the_yamls_rates(slow_web, tmp_path):
    web, env = slow_web
    with chromium(tmp_path / "chromium-profile") as browser:
        browser.get(web)
        _wait(browser, lambda d: _input(d, "Learning rates").get_attribute("value") == "0.006, 0.012, 0.024", 90,
              "the demo preset's rates")
        # 1. Loaded, and Launch clicked as soon as the name is the YAML's (the rates may not be yet).
        _paste(browser, SPEC_YAML.format(name="race-loaded"))
        _button(browser, "Load YAML into the form").click()
        _wait(browser, lambda d: _input(d, "Study name").get_attribute("value") == "race-loaded", 30, "the YAML's name")
        stale_rates = _input(browser, "Learning rates").get_attribute("value")
        _button(browser, "Launch study").click()
        held = "Not launched: the browser sent the form before it showed its values"
        _wait(browser, lambda d: held in d.page_source or _launched(d, "race-loaded"), 60, "a hold or the launch")
        browser.save_screenshot(str(tmp_path / "after-first-click.png"))
        if held in browser.page_source:  # the plan of the YAML is shown, its rates named
            assert "0.003, 0.01, 0.03 in every cell" in browser.page_source
            _button(browser, "Launch study").click()
        _wait(browser, lambda d: _launched(d, "race-loaded"), 60, "race-loaded's live page")
        assert _launched_lrs(env, "race-loaded") == list(RATES)
        # the slow page did open the race: the browser still showed the preset's rates at the click
        assert stale_rates == "0.006, 0.012, 0.024"

        # 2. Pasted and launched without loading: the YAML as it is.
        browser.get(web)
        _wait(browser, lambda d: _input(d, "Study name").get_attribute("value") == "demo", 90, "a fresh Launch page")
        _paste(browser, SPEC_YAML.format(name="race-unloaded"))
        _button(browser, "Launch study").click()  # the box commits its text as the click blurs it
        # Launched at once, or the click's run was restarted by the box's commit (Streamlit drops a
        # button's value then): the form then shows the YAML, whose Launch launches it.
        shows_yaml = lambda d: _value(d, "Study name") == "race-unloaded" and _value(d, "Learning rates") == "0.003, 0.01, 0.03"  # noqa: E731
        try:
            _wait(browser, lambda d: _launched(d, "race-unloaded") or shows_yaml(d), 60,
                  "the launch, or the form showing the YAML")
        except Exception:
            from selenium.webdriver.common.by import By

            browser.save_screenshot(str(tmp_path / "unloaded-timeout.png"))
            (tmp_path / "unloaded-timeout.txt").write_text(browser.find_element(By.TAG_NAME, "body").text)
            raise
        browser.save_screenshot(str(tmp_path / "unloaded-first-click.png"))
        if not _launched(browser, "race-unloaded"):
            _button(browser, "Launch study").click()
        _wait(browser, lambda d: _launched(d, "race-unloaded"), 90, "race-unloaded's live page")
        assert _launched_lrs(env, "race-unloaded") == list(RATES)
