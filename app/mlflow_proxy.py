"""MLflow's UI for signed-in users, read-only, under ``/mlflow/`` of the web app.

With sign-in configured (``[auth]``) and MLflow behind its basic-auth app (``cbs tracking
--auth``), a person signed in to the web app is no MLflow user, so the pages' MLflow links would
meet MLflow's own password prompt. When the web process holds the lab's service account
(``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``, or ``CBS_TRACKING_PASSWORD_FILE``),
:func:`proxy` serves MLflow's UI to signed-in users instead:

* the Streamlit sign-in cookie is checked the way Streamlit checks it (:func:`signed_in_user`);
  without it: ``401`` and no MLflow content;
* only requests that read are forwarded (:func:`refusal`): ``GET`` and ``HEAD``, the ``POST``
  endpoints MLflow's UI reads with (:data:`READ_POSTS`) and GraphQL queries, except MLflow's
  accounts and the AI gateway's secrets (:data:`ADMIN_READS`); anything else gets ``403`` with a
  message, and MLflow never sees it;
* a forwarded request carries the service account's credentials and none of the browser's
  (no cookie, no ``Authorization``, no ``Origin``), and MLflow's answer is streamed back without
  its cookies or its password prompt (``WWW-Authenticate``).

MLflow's UI asks only for relative URLs (``static-files/…``, ``ajax-api/…``, ``graphql``) and
routes in the URL fragment (``#/experiments/1``), so it works under a sub-path as it is:
``/mlflow/x`` is forwarded as ``/x``, MLflow runs without ``--static-prefix``, the lab's own
clients keep their tracking URI, and no HTML is rewritten. The Host check of
:mod:`app.host_check` applies to this route as to every other.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

#: Where the web app serves MLflow's UI.
PREFIX = "/mlflow"

#: The ``POST`` endpoints that only read, which MLflow 3's UI calls (searches with a JSON body).
READ_POSTS = frozenset({
    "ajax-api/2.0/mlflow/experiments/search",
    "ajax-api/2.0/mlflow/experiments/search-datasets",
    "ajax-api/2.0/mlflow/runs/search",
    "ajax-api/2.0/mlflow/logged-models/search",
    "ajax-api/2.0/mlflow/registered-models/get-latest-versions",
    "ajax-api/3.0/mlflow/traces/search",
    "ajax-api/3.0/mlflow/traces/batchGetInfos",
    "ajax-api/3.0/mlflow/traces/metrics",
    "ajax-api/3.0/mlflow/traces/calculate-filter-correlation",
    "ajax-api/3.0/mlflow/datasets/search",
    "ajax-api/3.0/mlflow/issues/search",
    "ajax-api/3.0/mlflow/prompt-optimization/jobs/search",
})
#: Reads the service account (MLflow's admin) may make and a signed-in user may not: MLflow's
#: accounts (users, roles, permissions) and the AI gateway's secrets and proxy. What the UI shows of
#: the account it runs as (``users/current``) stays readable.
ADMIN_READS = re.compile(r"(ajax-)?api/\d\.0/mlflow/(users/(?!current(/permissions)?$)|roles/|gateway/secrets/)"
                         r"|ajax-api/2\.0/mlflow/gateway-proxy$")
#: MLflow's GraphQL endpoint: forwarded when every operation of the document is a ``query``.
GRAPHQL = "graphql"
#: The largest request body forwarded (a search is a few hundred bytes).
MAX_BODY = 1 << 20

#: Request headers passed on to MLflow (the browser's cookies and credentials never are).
FORWARDED_REQUEST = frozenset({"accept", "accept-encoding", "accept-language", "cache-control", "content-type",
                               "if-modified-since", "if-none-match", "range", "user-agent"})
#: Response headers never passed back: hop-by-hop ones, MLflow's cookies and its password prompt.
DROPPED_RESPONSE = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                              "trailer", "transfer-encoding", "upgrade", "set-cookie", "www-authenticate"})

_LOG = logging.getLogger(__name__)

NOT_SIGNED_IN = ("<!doctype html><title>CBS Lab</title><p>Sign in to CBS Lab to see MLflow here: "
                 '<a href="/">sign in</a>.</p>\n')


def service_account() -> tuple[str, str] | None:
    """The lab's MLflow service account from this process's environment, or ``None``."""
    from workers.query.api import load_service_password

    load_service_password()
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    return (user, password) if user and password else None


def enabled() -> bool:
    """Whether the web app serves MLflow's UI under :data:`PREFIX`: sign-in is configured and this
    process holds the service account (as it must when MLflow runs ``--auth``)."""
    from app.auth import enabled as sign_in_enabled

    return sign_in_enabled() and service_account() is not None


def signed_in_user(cookies: Mapping[str, str], origin: str | None) -> dict[str, Any] | None:
    """The claims (``email``, ``sub``, …) of the Streamlit sign-in cookie ``_streamlit_user`` when
    it is valid for this app, else ``None``.

    Streamlit 1.67 has no public function for this. Its WebSocket handler
    (``streamlit/web/server/starlette/starlette_websocket.py``) reads the cookie with the two
    private functions below: the itsdangerous signature with the ``[auth]`` cookie secret and its
    maximum age, the cookie's chunks, and the origin the cookie was issued for. They are used here
    and nowhere else; ``tests/app/test_mlflow_proxy.py`` fails if Streamlit changes them.
    ``origin`` is the request's ``Origin`` header; a browser sends none on a plain navigation, and
    then the origin of ``redirect_uri`` stands in (the cookie is scoped to that site anyway).
    A cookie whose session signed out (:mod:`app.signed_out`) is refused.
    """
    from streamlit.auth_util import get_origin_from_redirect_uri
    from streamlit.web.server.starlette.starlette_server_config import USER_COOKIE_NAME
    from streamlit.web.server.starlette.starlette_websocket import (
        _get_signed_cookie_with_chunks,
        _parse_decoded_user_cookie,
    )

    expected = get_origin_from_redirect_uri()
    if not expected:
        return None
    raw = _get_signed_cookie_with_chunks(dict(cookies), USER_COOKIE_NAME)
    if not raw:
        return None
    user = _parse_decoded_user_cookie(raw, origin or expected)
    if not user.get("is_logged_in"):
        return None
    from app.signed_out import revoked

    return None if revoked(cookies) else user  # a cookie that signed out signs no one in


def _graphql_reads(document: str | None) -> bool:
    """Whether a GraphQL document holds only ``query`` operations (no ``mutation``, no
    ``subscription``)."""
    from graphql import GraphQLError, OperationDefinitionNode, OperationType, parse

    try:
        operations = [d for d in parse(document).definitions if isinstance(d, OperationDefinitionNode)]
    except (GraphQLError, TypeError):
        return False
    return bool(operations) and all(op.operation is OperationType.QUERY for op in operations)


def _graphql_document(method: str, body: bytes, query: Mapping[str, str]) -> str | None:
    """The GraphQL document of a request: the ``query`` parameter of a GET, the ``query`` member
    of a POST's JSON body."""
    if method in ("GET", "HEAD"):
        return query.get("query")
    try:
        payload = json.loads(body or b"null")
    except ValueError:
        return None
    return payload.get("query") if isinstance(payload, dict) else None


def refusal(method: str, path: str, body: bytes = b"", query: Mapping[str, str] | None = None) -> str | None:
    """Why a request for MLflow's ``path`` (decoded, after :data:`PREFIX` and its ``/``) is refused,
    or ``None`` when it only reads and may be forwarded."""
    if any(s in (".", "..") for s in path.split("/")) or "\\" in path:
        return f"The path {path!r} is not served here."
    if path == GRAPHQL and method in ("GET", "HEAD", "POST"):
        if _graphql_reads(_graphql_document(method, body, query or {})):
            return None
        return ("MLflow is read-only through CBS Lab: only GraphQL queries are forwarded, and this request "
                "holds no query or a mutation.")
    if ADMIN_READS.match(path):
        return f"MLflow's accounts and secrets are not shown through CBS Lab (/{path})."
    if method in ("GET", "HEAD") or (method == "POST" and path in READ_POSTS):
        return None
    return (f"MLflow is read-only through CBS Lab: {method} /{path} may change it. Runs, experiments and "
            "tags are written by the lab's workers and runner (the service account) only.")


def _refused(message: str):
    from starlette.responses import JSONResponse

    # MLflow's own error shape, so that its UI shows the message.
    return JSONResponse({"error_code": "PERMISSION_DENIED", "message": message}, status_code=403)


@functools.cache
def _client():
    """One HTTP client per web process (a pool of connections to the tracking server)."""
    import httpx

    # connect/pool: a tracking server that does not answer is reported within seconds; read: a
    # search over a large study may take a while, and an artifact streams for as long as it sends.
    return httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0, pool=10.0), follow_redirects=False)


async def proxy(request):
    """The route: check the sign-in, then forward a request that reads, streaming the answer."""
    import httpx
    from starlette.background import BackgroundTask
    from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse

    if not enabled():
        return PlainTextResponse("404: MLflow is not served through the web app here.\n", status_code=404)
    if signed_in_user(request.cookies, request.headers.get("origin")) is None:
        return Response(NOT_SIGNED_IN, status_code=401, media_type="text/html")
    path = request.path_params.get("path", "")
    if request.url.path == PREFIX:  # MLflow's relative URLs need the trailing slash
        return RedirectResponse(f"{PREFIX}/", status_code=307)
    body = b""
    if request.method not in ("GET", "HEAD"):
        if int(request.headers.get("content-length") or 0) > MAX_BODY:
            return _refused(f"A request body over {MAX_BODY} bytes is not forwarded to MLflow.")
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return _refused(f"A request body over {MAX_BODY} bytes is not forwarded to MLflow.")
    why = refusal(request.method, path, body, request.query_params)
    if why:
        _LOG.warning("MLflow through the web app: refused %s /%s", request.method, path)
        return _refused(why)

    from workers.query.api import tracking_ui_base

    user, password = service_account()
    headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_REQUEST}
    headers["authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    client = _client()
    # The path as the browser encoded it (an artifact's name may hold %2F), the query as it came.
    raw = request.scope.get("raw_path", b"").decode("latin-1")
    raw = raw[len(PREFIX) + 1:] if raw.startswith(PREFIX + "/") else urllib.parse.quote(path)
    url = f"{tracking_ui_base()}/{raw}" + (f"?{request.url.query}" if request.url.query else "")
    upstream = client.build_request(request.method, url, headers=headers, content=body or None)
    try:
        answer = await client.send(upstream, stream=True)
    except httpx.HTTPError as exc:
        return PlainTextResponse(f"502: the MLflow tracking server did not answer ({type(exc).__name__}).\n",
                                 status_code=502)
    kept = {k: v for k, v in answer.headers.items() if k.lower() not in DROPPED_RESPONSE}
    return StreamingResponse(answer.aiter_raw(), status_code=answer.status_code, headers=kept,
                             background=BackgroundTask(answer.aclose))


def routes() -> list:
    """The web app's routes for MLflow's UI (``app/server.py`` passes them to ``st.App``)."""
    from starlette.routing import Route

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    return [Route(PREFIX, proxy, methods=methods), Route(PREFIX + "/{path:path}", proxy, methods=methods)]


def link(url: str | None) -> str | None:
    """An MLflow UI link (``http://tracking:5000/#/experiments/1``) as the pages show it: on the web
    app's own :data:`PREFIX` when MLflow is served here (``/mlflow/#/experiments/1``), else as it is."""
    from workers.query.api import tracking_ui_base

    base = tracking_ui_base()
    if url and url.startswith(base) and enabled():
        return PREFIX + url[len(base):]
    return url
