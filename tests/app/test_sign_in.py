"""Sign-in end to end (issue 21): a real OpenID Connect provider (``oidc-provider-mock``, Authlib)
on 127.0.0.1, a real ``cbs web`` configured for it, and chromium. Alice signs in and launches a
study; Bob may not cancel it and is told who may; an admin cancels it. A browser without a
session gets the sign-in page and nothing of the app.

The provider shows an authorization form where the test types the user's subject (the mock
gives it as the e-mail claim too); no worker runs, so the study's trials stay queued.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.app.test_e2e_browser import (
    CHROMEDRIVER,
    CHROMIUM,
    _button,
    _free_port,
    _wait,
    _wait_http,
    browser,  # noqa: F401  (the same headless chromium fixture)
)
from tests.process_groups import stop_group

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ALICE, BOB, ADMIN = "alice@lab.test", "bob@lab.test", "admin@lab.test"


@pytest.fixture(scope="session")
def provider():
    """A real OIDC provider on 127.0.0.1 (any client id and secret are accepted; it keeps no state
    between sign-ins, so one serves every test)."""
    pytest.importorskip("oidc_provider_mock")
    import oidc_provider_mock
    import werkzeug.serving

    # the lab's users have verified e-mails (an unverified e-mail is no identity: app/auth.py)
    users = [oidc_provider_mock.User(sub=u, claims={"email": u, "email_verified": True}) for u in (ALICE, BOB, ADMIN)]
    server = werkzeug.serving.make_server("127.0.0.1", 0, oidc_provider_mock.app(user_claims=users), threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def web_with_sign_in(folder: Path, provider: str, env: dict[str, str] | None = None):
    """``cbs web`` run from ``folder`` with ``[auth]`` pointing at ``provider`` and its state in
    ``folder`` (``env`` added to its environment); yields the web app's URL and its log file."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)")
    port = _free_port()
    web = f"http://127.0.0.1:{port}"
    secrets_file = folder / "secrets.toml"
    secrets_file.write_text(
        "[auth]\n"
        f'redirect_uri = "{web}/oauth2callback"\n'
        f'cookie_secret = "{secrets.token_hex(32)}"\n'
        'client_id = "cbs-lab"\n'
        'client_secret = "cbs-lab-secret"\n'
        f'server_metadata_url = "{provider}/.well-known/openid-configuration"\n')
    full_env = {**os.environ, "CBS_HOME": str(folder / "home"), "CBS_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
                "CBS_ARTIFACT_ROOT": str(folder / "artifacts"), "CBS_WEB_SECRETS": str(secrets_file),
                "CBS_ADMINS": ADMIN, "CBS_TRIAL_QUEUE": "cpu", "PYTHONUNBUFFERED": "1"}
    for key in ("CBS_BROKER_URL", "CBS_LEDGER_URL", "CBS_OPTUNA_STORAGE", "MLFLOW_TRACKING_URI"):
        full_env.pop(key, None)
    full_env.update(env or {})
    log = open(folder / "web.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "cbs"), "web", "--port", str(port)], env=full_env,
                            cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_http(f"{web}/_stcore/health", 60)
        yield web, folder / "web.log"
    finally:
        stop_group(proc)


@pytest.fixture
def signed_in_lab(tmp_path, provider):
    """``cbs web`` with ``[auth]`` pointing at the provider; yields the web app's URL and its log."""
    with web_with_sign_in(tmp_path, provider) as lab:
        yield lab


def text(driver) -> str:
    """What the page shows (its body's text; the page source has markup between words)."""
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def sign_in(driver, web: str, user: str) -> None:
    """From a fresh session: the app's sign-in page, the provider's form, back to the app."""
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(web)
    _wait(driver, lambda d: "Sign in to see and launch studies" in text(d), 60, "the sign-in page")
    assert "Launch a study" not in text(driver)
    _button(driver, "Sign in").click()
    field = _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "input[name='sub']"), 30, "the provider's form")[0]
    field.send_keys(user)
    driver.find_element(By.XPATH, "//button[normalize-space(.)='Authorize']").click()
    _wait(driver, lambda d: d.current_url.startswith(web) and f"Signed in as {user}" in text(d), 60,
          f"the app, signed in as {user}")


def try_cancel(driver, web: str, study: str) -> None:
    driver.get(f"{web}/studies?study={study}")
    _button(driver, "Cancel…").click()
    _button(driver, "Cancel the study").click()


def test_owner_and_admin_may_cancel_others_may_not(signed_in_lab, browser):
    web, log = signed_in_lab
    try:
        sign_in(browser, web, ALICE)
        _wait(browser, lambda d: "Launch a study" in text(d), 60, "the Launch page")
        _button(browser, "Launch study").click()  # the demo preset
        _wait(browser, lambda d: "/studies" in d.current_url and ALICE in text(d), 90,
              "the Studies page with the study's owner")

        sign_in(browser, web, BOB)
        try_cancel(browser, web, "demo")
        _wait(browser, lambda d: f"Only the owner of this study ({ALICE}) or an admin" in text(d), 30,
              "the refusal naming the owner")
        assert "Cancelled demo" not in text(browser)

        sign_in(browser, web, ADMIN)
        try_cancel(browser, web, "demo")
        _wait(browser, lambda d: "Cancelled demo" in text(d), 30, "the admin's cancel")

        browser.delete_all_cookies()  # no session: the sign-in page and nothing else
        browser.get(f"{web}/studies?study=demo")
        _wait(browser, lambda d: "Sign in to see and launch studies" in text(d), 60, "the sign-in page")
        time.sleep(1)  # nothing else arrives later
        assert "demo" not in text(browser) and "Studies" not in text(browser) and ALICE not in text(browser)
    except Exception:
        browser.save_screenshot(str(log.parent / "failure.png"))
        print(log.read_text()[-3000:])
        raise
