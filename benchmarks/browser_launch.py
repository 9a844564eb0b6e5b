"""Launching studies from the web app in a headless chromium, for the benchmarks that must start them
as a researcher does (``chaos.py``, ``demo_browser.py``): the e2e test's chromium and its helpers."""

from __future__ import annotations

from pathlib import Path


def launch_in_browser(web_url: str, specs: dict[str, str], shots: Path) -> None:
    """Launch each spec from the web app's Launch page in a headless chromium: paste the YAML,
    load it into the form, click "Launch study", wait for the study's live page."""
    from tests.app import test_e2e_browser as e2e

    if not (Path(e2e.CHROMIUM).exists() and Path(e2e.CHROMEDRIVER).exists()):
        raise RuntimeError("the chaos run launches its studies through the web app in a real browser, which needs "
                           "Debian's chromium and chromedriver: apt-get install -y chromium chromium-driver")
    from selenium.webdriver.common.by import By

    expander = "//summary[.//*[contains(text(), 'Paste or upload a YAML spec')]]"
    with chromium(e2e, shots / "chromium-profile") as driver:
        for name, text in specs.items():
            print(f"chaos: launching {name} in the browser", flush=True)
            try:
                driver.get(web_url)
                _until(driver, lambda d: d.find_elements(By.XPATH, expander), 90, "the Launch page's YAML box")
                _act(driver, lambda: driver.find_element(By.XPATH, expander).click())
                _act(driver, lambda: e2e._input(driver, "YAML spec", "textarea").send_keys(text))
                _act(driver, lambda: e2e._button(driver, "Load YAML into the form").click())
                _until(driver, lambda d: e2e._input(d, "Study name").get_attribute("value") == name, 30,
                       f"the form filled from {name}'s YAML")
                _act(driver, lambda: e2e._button(driver, "Launch study").click())
                held = "Not launched: the browser sent the form before it showed its values"
                _until(driver, lambda d: page_errors(d) or held in d.page_source
                       or ("/studies" in d.current_url and name in d.page_source), 300, f"{name}'s live page")
                if held in driver.page_source and not page_errors(driver):
                    # clicked while the page still drew the YAML's values: it shows their plan and
                    # launches at the second click (issue 42, finding 4)
                    print(f"chaos: {name}: the page held the first click; clicking Launch again", flush=True)
                    _act(driver, lambda: e2e._button(driver, "Launch study").click())
                    _until(driver, lambda d: page_errors(d) or ("/studies" in d.current_url and name in d.page_source),
                           300, f"{name}'s live page")
                if page_errors(driver):
                    raise RuntimeError(f"the Launch page says: {page_errors(driver)}")
            except Exception as exc:
                driver.save_screenshot(str(shots / f"launch-{name}.png"))
                raise RuntimeError(f"launching {name} in the browser failed ({type(exc).__name__}: {exc}); "
                                   f"screenshot {shots / f'launch-{name}.png'}") from exc
            driver.save_screenshot(str(shots / f"launched-{name}.png"))
            print(f"chaos: {name} launched", flush=True)


def _until(driver, condition, timeout_s: float, what: str):
    """Wait for ``condition``; an element that Streamlit redrew between being found and being read
    (StaleElementReferenceException) is looked up again at the next poll, not a failure (the
    redis-pg full run of issue 42 failed on one while the Launch page redrew the form)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout_s, poll_frequency=0.5,
                         ignored_exceptions=(StaleElementReferenceException,)).until(condition, message=what)


def _act(driver, action, tries: int = 5):
    """Find an element and act on it, finding it again when Streamlit redrew it in between: a stale
    element's click or keys never reached the page (the driver refuses the command), so repeating it
    cannot act twice."""
    from selenium.common.exceptions import StaleElementReferenceException

    for attempt in range(tries):
        try:
            return action()
        except StaleElementReferenceException:
            if attempt == tries - 1:
                raise
            import time

            time.sleep(0.5)


def page_errors(driver) -> list[str]:
    """The error messages the page shows (Streamlit's error alerts and exceptions)."""
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, "[data-testid='stAlert'], [data-testid='stException']")
    # an alert's text starts with its icon's name (material "error", "block"): errors only
    return [e.text[:1000] for e in found if e.text.strip().startswith(("error", "block", "Traceback"))
            or e.get_attribute("data-testid") == "stException"]


def chromium(e2e, profile: Path):
    """The e2e test's chromium (its ``chromium`` helper, or its ``browser`` fixture's body)."""
    import contextlib

    if hasattr(e2e, "chromium"):
        return e2e.chromium(profile)

    @contextlib.contextmanager
    def driver():
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        for flag in (*e2e.CHROME_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        options.binary_location = e2e.CHROMIUM
        d = webdriver.Chrome(service=Service(e2e.CHROMEDRIVER), options=options)
        d.set_page_load_timeout(60)
        try:
            yield d
        finally:
            d.quit()

    return driver()
