"""The web app as ``cbs web`` serves it: Streamlit's own server (``st.App``) running
``streamlit_app.py``, with CBS Lab's Host check in front of every route (:mod:`app.host_check`), uploads,
metrics and media for signed-in sessions only and one session's uploads capped (:mod:`app.sign_in_guard`),
and MLflow's UI, read-only, for signed-in users under ``/mlflow/`` (:mod:`app.mlflow_proxy`). As the
server starts, a background thread imports the workers' stack (:mod:`app.warm_up`), so the first
launch is answered in milliseconds.

``streamlit run app/server.py`` finds the ``app`` below and serves it with uvicorn; every
``--server.*`` option of ``streamlit run`` still applies.
"""

from __future__ import annotations

import contextlib

import streamlit as st
from starlette.middleware import Middleware

from app import mlflow_proxy, warm_up
from app.host_check import HostCheck
from app.sign_in_guard import SignInGuard


@contextlib.asynccontextmanager
async def lifespan(_app: st.App):
    """Streamlit's runtime has started: warm the workers' stack behind the first requests."""
    warm_up.start()
    yield


app = st.App("streamlit_app.py", lifespan=lifespan, routes=mlflow_proxy.routes(),
             middleware=[Middleware(HostCheck), Middleware(SignInGuard)])
