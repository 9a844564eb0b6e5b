"""``cbs web`` (the Streamlit app) and ``cbs up`` (everything from the Procfile, supervised).

Both listen on 127.0.0.1 unless told otherwise (DESIGN.md §3). ``cbs up`` prepares the built-in
corpus first, so the first trial does not wait on tokenization, then runs the repo's ``Procfile``
(web, worker, tracking, ...) under :class:`app.supervisor.Supervisor`: a process that crashes is
restarted, and Ctrl-C stops all of it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from cbscore.errors import ConfigError

#: The app's entry script (Streamlit's server with the Host check on every route) and the repo's Procfile.
APP_SCRIPT = Path(__file__).resolve().parent / "server.py"
REPO_ROOT = Path(__file__).resolve().parent.parent
PROCFILE = REPO_ROOT / "Procfile"

#: Port of the web app unless ``--port`` or ``CBS_WEB_PORT`` says otherwise.
DEFAULT_PORT = 8501
#: Seconds ``cbs up`` waits for the web app and the MLflow UI to answer before it says which did not.
READY_TIMEOUT_S = 120.0
#: Most trials ``cbs up`` runs at once by default (one per core up to this; tiny models on a CPU
#: train faster as separate one-thread processes than as one process with many threads).
MAX_DEFAULT_WORKERS = 4
#: Largest file the pages accept, in MB (Streamlit's ``server.maxUploadSize``; its default is 200):
#: a steps table is at most 64 MiB (``cbscore.analysis._csv.MAX_CSV_BYTES``), a spec 64 KiB.
MAX_UPLOAD_MB = 64
#: Seconds ``cbs up`` waits for its processes to stop after Ctrl-C before killing them.
STOP_GRACE_S = 20.0


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_report(subparsers)
    web = subparsers.add_parser("web", help="run the web app (Streamlit) on 127.0.0.1",
                                description="Run CBS Lab's web app: streamlit on 127.0.0.1, headless.")
    web.add_argument("--port", type=int, default=None,
                     help=f"port to listen on (default: $CBS_WEB_PORT or {DEFAULT_PORT})")
    web.add_argument("--host", default=None, help="address to listen on (default: $CBS_WEB_HOST or 127.0.0.1); "
                                                  "another than loopback needs sign-in ([auth] in secrets.toml)")
    web.add_argument("--insecure-no-auth", action="store_true",
                     help="listen on a non-loopback address without sign-in (anyone who reaches the port can "
                          "launch and cancel studies; also $CBS_INSECURE_NO_AUTH=1)")
    web.set_defaults(handler=run_web)

    up = subparsers.add_parser("up", help="run everything: tracking server, worker(s) and the web app",
                               description="Prepare the built-in corpus, then run every process of the "
                                           "Procfile, restarting any that crashes; Ctrl-C stops them all.")
    up.add_argument("--port", type=int, default=None,
                    help=f"port of the web app (default: $CBS_WEB_PORT or {DEFAULT_PORT})")
    up.add_argument("--skip-data", action="store_true", help="do not prepare the built-in corpus first")
    up.add_argument("--workers", type=int, default=None, metavar="K",
                    help=f"trials at once on this machine's CPU, one torch thread each (default: "
                         f"$CBS_WORKER_CONCURRENCY, else the number of cores up to {MAX_DEFAULT_WORKERS})")
    up.add_argument("--procfile", type=Path, default=PROCFILE, help="Procfile to run (default: the repo's)")
    up.add_argument("--insecure-no-auth", action="store_true",
                    help="let the web app listen on a non-loopback $CBS_WEB_HOST without sign-in")
    up.set_defaults(handler=run_up)


def web_port(port: int | None) -> int:
    """``port``, else ``$CBS_WEB_PORT``, else 8501; a ConfigError naming the field otherwise."""
    if port is None:
        raw = os.environ.get("CBS_WEB_PORT", "")
        field = "CBS_WEB_PORT"
        try:
            port = int(raw) if raw else DEFAULT_PORT
        except ValueError:
            raise ConfigError(field, raw, "must be a port number in 1-65535") from None
    else:
        field = "--port"
    if not 1 <= port <= 65535:
        raise ConfigError(field, port, "must be a port number in 1-65535")
    return port


def allowed_hosts(host: str) -> list[str]:
    """Host names the app answers to: loopback, the address it listens on (unless a wildcard), and
    ``CBS_WEB_ALLOWED_HOSTS`` (comma-separated; ``*.example.com`` patterns, ``*`` for any).

    Streamlit accepts any ``Host`` header unless ``server.allowedHosts`` is set, which lets a web
    page re-point its own domain at 127.0.0.1 (DNS rebinding) and drive the app from the user's
    browser. With a list, a connection whose ``Host`` is not in it is refused.
    """
    hosts = ["localhost", "127.0.0.1", "::1"]
    if host not in ("0.0.0.0", "::", "") and host not in hosts:
        hosts.append(host)
    for extra in (os.environ.get("CBS_WEB_ALLOWED_HOSTS") or "").split(","):
        if extra.strip() and extra.strip() not in hosts:
            hosts.append(extra.strip())
    return hosts


def is_loopback(host: str) -> bool:
    """Whether ``host`` only answers this machine (``localhost``, 127.0.0.0/8, ``::1``, a unix socket)."""
    import ipaddress

    if host == "localhost" or host.startswith("unix://"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, *, auth: bool, insecure: bool) -> str | None:
    """Refuse to listen on a non-loopback ``host`` without sign-in (a ConfigError naming
    ``CBS_WEB_HOST``) unless ``insecure``; then the warning to print on every start."""
    if is_loopback(host) or auth:
        return None
    if not insecure:
        raise ConfigError("CBS_WEB_HOST", host, "is not a loopback address and no sign-in is configured ([auth] in "
                          ".streamlit/secrets.toml): anyone who reaches it could launch and cancel GPU work. "
                          "Configure sign-in (docs/SECURITY.md), or pass --insecure-no-auth if a proxy in front "
                          "authenticates every request")
    return (f"cbs web: WARNING: listening on {host} without sign-in (--insecure-no-auth): anyone who reaches this "
            "port can launch, cancel and \"Launch anyway\" studies. Configure [auth] in .streamlit/secrets.toml.")


def streamlit_command(port: int, host: str = "127.0.0.1") -> list[str]:
    """The ``streamlit run`` command line of the app: headless, no usage stats, no file watcher,
    only the allowed Host names (:func:`allowed_hosts`), the secrets files of :mod:`app.auth`."""
    from app.auth import secrets_files

    hosts = [arg for h in allowed_hosts(host) for arg in ("--server.allowedHosts", h)]
    hosts += [arg for f in secrets_files() for arg in ("--secrets.files", str(f))]
    return [
        sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT),
        "--server.address", host,
        "--server.port", str(port),
        *hosts,
        "--server.headless", "true",
        "--server.fileWatcherType", "none",
        "--server.maxUploadSize", str(MAX_UPLOAD_MB),
        "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", "minimal",
        "--client.showErrorDetails", "none",
        "--theme.base", "light",
        "--theme.primaryColor", "#0072B2",
    ]


def run_web(args: argparse.Namespace) -> int:
    """Replace this process by streamlit (so the supervisor's signals reach it directly)."""
    from app.auth import auth_configured

    port = web_port(args.port)
    host = args.host or os.environ.get("CBS_WEB_HOST") or "127.0.0.1"
    insecure = bool(getattr(args, "insecure_no_auth", False)) or os.environ.get("CBS_INSECURE_NO_AUTH") == "1"
    warning = check_bind(host, auth=auth_configured(), insecure=insecure)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    os.environ["STREAMLIT_BROWSER_GATHER_USAGE_STATS"] = "false"
    cmd = streamlit_command(port, host)
    print(f"CBS Lab web app: http://{host}:{port}", flush=True)
    os.execv(cmd[0], cmd)
    return 0  # not reached


def prepare_corpus() -> str:
    """Prepare the built-in corpus (idempotent) and describe its size."""
    from cbscore.data import DataConfig, prepare

    store = prepare(DataConfig(), progress=True)
    splits = store.manifest.get("splits", {})
    sizes = ", ".join(f"{name} {int(info['tokens']):,} tokens" for name, info in splits.items())
    return f"built-in corpus ready at {store.path} ({sizes}; vocabulary {store.vocab_size:,})"


def tracking_ui_url() -> str | None:
    """The MLflow UI's URL when it answers (as the workers see it), or ``None``."""
    try:
        from workers.query import api

        return api.tracking_ui_url()
    except Exception:  # only used for the banner
        return None


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except Exception:  # not up yet
        return False


def announce_when_ready(port: int, stop: threading.Event, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Print the web app's and the MLflow UI's URLs once they answer (or say which did not)."""
    web = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    web_up = mlflow_url = None
    while not stop.wait(1.0) and time.monotonic() < deadline and not (web_up and mlflow_url):
        web_up = web_up or _answers(f"{web}/_stcore/health")
        mlflow_url = mlflow_url or tracking_ui_url()
    if stop.is_set():
        return
    print(f"cbs up: ready — web app {web if web_up else '(not answering yet)'} · "
          f"MLflow UI {mlflow_url or '(not answering yet; see the tracking log)'} · Ctrl-C stops everything",
          flush=True)


def up_workers(workers: int | None) -> int:
    """Trials at once for ``cbs up``: ``--workers``, else ``$CBS_WORKER_CONCURRENCY``, else one per
    core up to :data:`MAX_DEFAULT_WORKERS`."""
    if workers is None:
        if not os.environ.get("CBS_WORKER_CONCURRENCY"):
            return max(1, min(MAX_DEFAULT_WORKERS, os.cpu_count() or 1))
        from workers.query.api import default_concurrency

        return default_concurrency()
    if isinstance(workers, bool) or workers < 1:
        raise ConfigError("--workers", workers, "must be a positive integer")
    return workers


def run_up(args: argparse.Namespace) -> int:
    port = web_port(args.port)
    workers = up_workers(args.workers)
    procfile = Path(args.procfile).resolve()
    if not procfile.is_file():
        raise ConfigError("--procfile", str(procfile), "must be an existing Procfile")
    if not args.skip_data:
        print(f"cbs up: {prepare_corpus()}", flush=True)
    env = dict(os.environ)
    env["CBS_WEB_PORT"] = str(port)
    env["CBS_WORKER_CONCURRENCY"] = str(workers)  # read by the Procfile's `cbs worker`
    env.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if getattr(args, "insecure_no_auth", False):
        env["CBS_INSECURE_NO_AUTH"] = "1"  # read by the Procfile's `cbs web`
    from app.auth import auth_configured

    # The web app would refuse the same, restarted in a loop: say it once, before anything starts.
    check_bind(env.get("CBS_WEB_HOST") or "127.0.0.1", auth=auth_configured(),
               insecure=env.get("CBS_INSECURE_NO_AUTH") == "1")
    # The Procfile says `cbs ...`: make this interpreter's `cbs` the one the shell finds.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    from app.supervisor import Supervisor, read_procfile
    from cbscore import paths

    specs = read_procfile(procfile)
    print("cbs up: starting " + ", ".join(s.name for s in specs) + f" (the worker runs {workers} trial(s) at "
          "once; a process that crashes is restarted; Ctrl-C stops everything)", flush=True)
    print(f"cbs up: web app at http://127.0.0.1:{port}; the MLflow UI's address follows once it answers", flush=True)
    supervisor = Supervisor(specs, env=env, cwd=procfile.parent, pids_file=paths.cbs_home() / "up" / "pids.json",
                            stop_grace_s=STOP_GRACE_S)
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        stop.set()
        supervisor.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    threading.Thread(target=announce_when_ready, args=(port, stop), daemon=True).start()
    try:
        code = supervisor.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("cbs up: stopped", flush=True)
    return code


def _register_report(subparsers: argparse._SubParsersAction) -> None:
    """``cbs study report``, added to the ``study`` group that :mod:`workers.cli` registers (the
    report draws with the pages' chart builders, so it lives with them in the app layer)."""
    study = subparsers.choices.get("study")
    if study is None:  # workers.cli not registered: no study commands at all
        return
    sub = next(a for a in study._actions if isinstance(a, argparse._SubParsersAction))
    report = sub.add_parser("report", help="write a study's evidence (steps CSV, fit JSON, figures, cost) to a folder")
    report.add_argument("name")
    report.add_argument("--out", required=True, help="folder, e.g. docs/results/NAME")
    report.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace) -> int:
    """``cbs study report``: :func:`app.report.write_report`."""
    from app.report import write_report

    files = write_report(args.name, args.out, command=" ".join(["cbs", *sys.argv[1:]]))
    print(f"cbs study report: {args.name!r} → {args.out}: " + ", ".join(files))
    return 0
