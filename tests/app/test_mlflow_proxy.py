"""MLflow's UI for signed-in users, read-only, through the web app (issue 21; :mod:`app.mlflow_proxy`).

The end-to-end tests run a real ``cbs tracking --auth`` (MLflow's basic-auth app, the lab's service
account), a real ``cbs web`` with ``[auth]`` against a real OpenID Connect provider, and chromium:
Alice signs in through the provider and sees the lab's experiment in MLflow's UI under ``/mlflow/``;
a request without her session gets no MLflow content; a write through the path is refused and
MLflow is unchanged. The unit tests pin the request policy and the Streamlit functions that read
the sign-in cookie.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import mlflow_proxy
from tests.app.test_e2e_browser import _free_port, _wait, chromium
from tests.app.test_sign_in import (
    ALICE,
    provider,  # noqa: F401  (the same OIDC provider fixture)
    sign_in,
    text,
    web_with_sign_in,
)
from tests.process_groups import stop_group

SERVICE = ("cbs-service", "a-long-service-password")
EXPERIMENT = "proxied-study"


# --------------------------------------------------------------------------- the request policy
@pytest.mark.parametrize("method, path", [
    ("GET", ""), ("GET", "static-files/static/js/main.js"), ("HEAD", ""),
    ("GET", "ajax-api/2.0/mlflow/experiments/search"), ("GET", "ajax-api/2.0/mlflow/metrics/get-history"),
    ("POST", "ajax-api/2.0/mlflow/runs/search"), ("POST", "ajax-api/2.0/mlflow/experiments/search"),
    ("POST", "ajax-api/2.0/mlflow/logged-models/search"), ("POST", "ajax-api/3.0/mlflow/traces/search"),
])
def test_reads_are_forwarded(method, path):
    assert mlflow_proxy.refusal(method, path) is None


@pytest.mark.parametrize("method, path", [
    ("POST", "ajax-api/2.0/mlflow/runs/create"), ("POST", "ajax-api/2.0/mlflow/experiments/delete"),
    ("POST", "ajax-api/2.0/mlflow/runs/set-tag"), ("POST", "ajax-api/2.0/mlflow/runs/log-batch"),
    ("POST", "api/2.0/mlflow/runs/search"),  # only the UI's own ajax-api searches
    ("POST", "ajax-api/2.0/mlflow/users/create"), ("PATCH", "api/2.0/mlflow/users/update-password"),
    ("DELETE", "api/2.0/mlflow/users/delete"), ("PUT", "ajax-api/2.0/mlflow/runs/search"),
    ("POST", "ajax-api/2.0/mlflow/runs/search/../create"), ("GET", "../etc/passwd"),
])
def test_writes_are_refused_with_a_message(method, path):
    why = mlflow_proxy.refusal(method, path)
    assert why and any(reason in why for reason in ("read-only", "not served", "accounts and secrets"))


@pytest.mark.parametrize("path", ["api/2.0/mlflow/users/list", "ajax-api/2.0/mlflow/users/get",
                                  "ajax-api/3.0/mlflow/users/permissions/list", "ajax-api/3.0/mlflow/roles/list",
                                  "ajax-api/3.0/mlflow/gateway/secrets/list", "ajax-api/2.0/mlflow/gateway-proxy"])
def test_the_service_accounts_admin_reads_are_not_shown(path):
    assert "accounts and secrets" in mlflow_proxy.refusal("GET", path)


def test_the_ui_may_read_which_account_it_runs_as():
    assert mlflow_proxy.refusal("GET", "ajax-api/2.0/mlflow/users/current") is None
    assert mlflow_proxy.refusal("GET", "ajax-api/3.0/mlflow/users/current/permissions") is None


def test_graphql_queries_pass_and_mutations_do_not():
    get_run = "query GetRun($data: MlflowGetRunInput!) { mlflowGetRun(input: $data) { run { info { runId } } } }"
    echo = 'testMutation(inputString: "x") { output }'
    query = json.dumps({"query": get_run})
    mutation = json.dumps({"query": f"mutation {{ {echo} }}"})
    mixed = json.dumps({"query": f'query A {{ test(inputString: "x") {{ output }} }} mutation B {{ {echo} }}'})
    assert mlflow_proxy.refusal("POST", "graphql", query.encode()) is None
    assert mlflow_proxy.refusal("GET", "graphql", query={"query": json.loads(query)["query"]}) is None
    for body in (mutation, mixed, "{not json", json.dumps({"query": "{"}), ""):
        assert mlflow_proxy.refusal("POST", "graphql", body.encode()) is not None
    assert mlflow_proxy.refusal("GET", "graphql", query={"query": json.loads(mutation)["query"]}) is not None


# --------------------------------------------------------------------------- the sign-in cookie
@pytest.fixture
def streamlit_secrets(tmp_path):
    """Streamlit's secrets read from a file with an ``[auth]`` section; yields its cookie secret."""
    from streamlit import config
    from streamlit.runtime.secrets import secrets_singleton

    path = tmp_path / "secrets.toml"
    path.write_text('[auth]\nredirect_uri = "http://lab.test:8501/oauth2callback"\ncookie_secret = "s3cret"\n'
                    'client_id = "x"\nclient_secret = "y"\nserver_metadata_url = "http://idp.test/.well-known"\n')
    saved = config.get_option("secrets.files")
    config.set_option("secrets.files", [str(path)])
    secrets_singleton._reset()
    try:
        yield "s3cret"
    finally:
        config.set_option("secrets.files", saved)
        secrets_singleton._reset()


def _cookie(secret: str, claims: dict) -> dict[str, str]:
    # Signed as Streamlit's /oauth2callback signs it (starlette_auth_routes._set_single_cookie).
    from streamlit.web.server.starlette.starlette_app_utils import create_signed_value

    return {"_streamlit_user": create_signed_value(secret, "_streamlit_user", json.dumps(claims)).decode()}


def test_the_sign_in_cookie_is_read_with_streamlits_own_functions(streamlit_secrets):
    """Fails when Streamlit renames or changes the private functions :func:`signed_in_user` wraps."""
    origin = "http://lab.test:8501"
    good = {"email": ALICE, "sub": "alice", "origin": origin, "is_logged_in": True, "provider": "default"}
    user = mlflow_proxy.signed_in_user(_cookie(streamlit_secrets, good), None)
    assert user is not None and user["email"] == ALICE
    assert mlflow_proxy.signed_in_user(_cookie(streamlit_secrets, good), origin)["email"] == ALICE
    assert mlflow_proxy.signed_in_user(_cookie(streamlit_secrets, good), "http://evil.test") is None
    assert mlflow_proxy.signed_in_user(_cookie("another-secret", good), None) is None
    assert mlflow_proxy.signed_in_user(_cookie(streamlit_secrets, {**good, "origin": "http://evil.test"}), None) is None
    assert mlflow_proxy.signed_in_user(_cookie(streamlit_secrets, {**good, "is_logged_in": False}), None) is None
    assert mlflow_proxy.signed_in_user({}, None) is None
    assert mlflow_proxy.signed_in_user({"_streamlit_user": "forged"}, None) is None


def test_the_pages_link_to_the_web_apps_path_only_when_it_serves_mlflow(streamlit_secrets, monkeypatch):
    monkeypatch.setenv("CBS_TRACKING_URI", "http://127.0.0.1:5000")
    monkeypatch.delenv("CBS_TRACKING_PASSWORD_FILE", raising=False)
    run = "http://127.0.0.1:5000/#/experiments/3/runs/abc"
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    assert mlflow_proxy.link(run) == run  # no service account: MLflow is not served through the web app
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", SERVICE[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SERVICE[1])
    assert mlflow_proxy.link(run) == "/mlflow/#/experiments/3/runs/abc"
    assert mlflow_proxy.link("http://127.0.0.1:5000") == "/mlflow"
    assert mlflow_proxy.link(None) is None


# --------------------------------------------------------------------------- end to end
def _wait_health(url: str, timeout_s: float) -> None:
    import httpx

    deadline = time.time() + timeout_s
    while True:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        assert time.time() < deadline, f"{url} did not answer"
        time.sleep(1)


@pytest.fixture(scope="module")
def tracking_with_auth(tmp_path_factory):
    """``cbs tracking --auth`` on 127.0.0.1 with the service account, holding experiment
    :data:`EXPERIMENT` and one run; yields ``(tracking_url, folder, experiment_id, run_id)``."""
    folder = tmp_path_factory.mktemp("mlflow-auth")
    port = _free_port()
    env = {**os.environ, "CBS_HOME": str(folder / "home"), "CBS_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
           "CBS_ARTIFACT_ROOT": str(folder / "artifacts"), "MLFLOW_TRACKING_USERNAME": SERVICE[0],
           "MLFLOW_TRACKING_PASSWORD": SERVICE[1]}
    log = open(folder / "tracking.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "cbs"), "tracking", "--auth", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_health(f"{url}/health", 150)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MLFLOW_TRACKING_USERNAME", SERVICE[0])
            mp.setenv("MLFLOW_TRACKING_PASSWORD", SERVICE[1])
            from mlflow import MlflowClient

            client = MlflowClient(tracking_uri=url)
            experiment_id = client.create_experiment(EXPERIMENT)
            run_id = client.create_run(experiment_id, run_name="proxied-run").info.run_id
        yield url, folder, experiment_id, run_id
    finally:
        stop_group(proc)


@pytest.fixture(scope="module")
def lab(tmp_path_factory, provider, tracking_with_auth):  # noqa: F811  (provider: the fixture imported above)
    """``cbs web`` with sign-in and the service account, reading MLflow at the tracking server; and
    chromium signed in as Alice through the provider. Yields ``(web_url, driver, cookies)``."""
    tracking, _, _, _ = tracking_with_auth
    folder = tmp_path_factory.mktemp("web")
    env = {"CBS_TRACKING_URI": tracking, "MLFLOW_TRACKING_USERNAME": SERVICE[0],
           "MLFLOW_TRACKING_PASSWORD": SERVICE[1]}
    with web_with_sign_in(folder, provider, env) as (web, log), chromium(folder / "chromium-profile") as driver:
        try:
            sign_in(driver, web, ALICE)
        except Exception:
            print(log.read_text()[-3000:])
            raise
        yield web, driver, {c["name"]: c["value"] for c in driver.get_cookies()}, log


def _client_state(tracking: str, experiment_id: str) -> tuple[str, list[str], dict]:
    """What MLflow holds, read with the service account: the experiment's lifecycle stage, its
    runs, and the first run's tags."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_USERNAME", SERVICE[0])
        mp.setenv("MLFLOW_TRACKING_PASSWORD", SERVICE[1])
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=tracking)
        runs = client.search_runs([experiment_id])
        return (client.get_experiment(experiment_id).lifecycle_stage, [r.info.run_id for r in runs],
                dict(runs[0].data.tags) if runs else {})


@pytest.mark.slow  # the module's MLflow auth app, web app and sign-in start once: 20-45 s on two loaded cores
@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_signed_in_user_sees_the_experiments_in_mlflows_ui_through_the_web_app(lab, tracking_with_auth):
    from selenium.webdriver.common.by import By

    web, driver, _, log = lab
    _, _, experiment_id, _ = tracking_with_auth
    driver.get(web)
    link = _wait(driver, lambda d: d.find_elements(By.XPATH, "//a[.//*[normalize-space(text())='MLflow UI']]"), 60,
                 "the sidebar's MLflow link")[0]
    assert link.get_attribute("href") == f"{web}/mlflow"  # the web app's path, not the tracking server
    driver.get(f"{web}/mlflow/#/experiments")
    _wait(driver, lambda d: EXPERIMENT in text(d), 90, "MLflow's experiment list, with the lab's experiment")
    driver.get(f"{web}/mlflow/#/experiments/{experiment_id}/runs")
    try:
        _wait(driver, lambda d: "proxied-run" in text(d), 90, "the experiment's runs (a read-only POST runs/search)")
    except Exception:
        driver.save_screenshot(str(log.parent / "failure.png"))
        print(log.read_text()[-3000:])
        raise


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_without_a_sign_in_the_path_serves_no_mlflow_content(lab, tracking_with_auth):
    import httpx

    web, _, cookies, _ = lab
    forged = {name: value[:-4] + "AAAA" for name, value in cookies.items()}
    for jar in ({}, forged):
        for method, path in (("GET", "/mlflow/"), ("GET", "/mlflow/ajax-api/2.0/mlflow/experiments/search"),
                             ("POST", "/mlflow/ajax-api/2.0/mlflow/runs/search"),
                             ("GET", "/mlflow/static-files/favicon.ico")):
            answer = httpx.request(method, web + path, cookies=jar, json={} if method == "POST" else None, timeout=30)
            assert answer.status_code == 401, (method, path, answer.status_code)
            assert EXPERIMENT not in answer.text and "mlflow-ui-container" not in answer.text
            assert "www-authenticate" not in answer.headers  # no password prompt either
    # the same requests with Alice's session do read MLflow
    answer = httpx.get(f"{web}/mlflow/ajax-api/2.0/mlflow/experiments/search?max_results=10", cookies=cookies,
                       timeout=30)
    assert answer.status_code == 200 and EXPERIMENT in answer.text


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_the_host_check_covers_the_mlflow_path(lab):
    import httpx

    web, _, cookies, _ = lab
    answer = httpx.get(f"{web}/mlflow/", cookies=cookies, headers={"Host": "rebound.example.com"}, timeout=30)
    assert answer.status_code == 403 and "mlflow-ui-container" not in answer.text


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_writes_through_the_web_app_are_refused_and_mlflow_is_unchanged(lab, tracking_with_auth):
    import httpx

    web, _, cookies, _ = lab
    tracking, _, experiment_id, run_id = tracking_with_auth
    before = _client_state(tracking, experiment_id)
    api = f"{web}/mlflow/ajax-api/2.0/mlflow"
    for path, body in (("runs/create", {"experiment_id": experiment_id}),
                       ("experiments/delete", {"experiment_id": experiment_id}),
                       ("runs/set-tag", {"run_id": run_id, "key": "owner", "value": "mallory"})):
        answer = httpx.post(f"{api}/{path}", cookies=cookies, json=body, timeout=30)
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json()["error_code"] == "PERMISSION_DENIED" and "read-only" in answer.json()["message"]
    assert httpx.post(f"{api}/runs/search", cookies=cookies, json={"experiment_ids": [experiment_id]},
                      timeout=30).json()["runs"][0]["info"]["run_id"] == run_id  # a read-only POST passes
    after = _client_state(tracking, experiment_id)
    assert after == before and after[0] == "active" and after[1] == [run_id] and "owner" not in after[2]
