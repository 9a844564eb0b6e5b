"""``cbs worker`` and ``cbs tracking``: the command lines of the processes a lab runs.

Both replace this process (``exec``) with Celery or the MLflow server, so the worker parent never
holds torch, and a process-group kill reaches everything. Their argument parsers are in
:mod:`workers.cli`.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from cbscore import paths
from cbscore.errors import ConfigError, masked, masked_url
from workers.infra.settings import default_concurrency


def worker_argv(gpu: int | None, concurrency: int | None, loglevel: str = "INFO", *,
                gpus: tuple[int, ...] | None = None,
                devices_per_trial: int | None = None) -> tuple[list[str], dict[str, str]]:
    """The ``celery worker`` command line and the environment it needs (``concurrency`` ``None``:
    one trial per GPU group, or 1 on a CPU)."""
    from workers.trials.devices import DEVICES_ENV, GPUS_ENV, slot_count

    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1):
        raise ConfigError("--concurrency", concurrency, "must be a positive integer")
    if gpu is not None and gpu < 0:
        raise ConfigError("--gpu", gpu, "must be a GPU index (0, 1, ...)")
    if gpu is not None and gpus:
        raise ConfigError("--gpus", ",".join(map(str, gpus)), "and --gpu exclude each other: give one")
    if gpu is not None:
        gpus = (gpu,)
    host = socket.gethostname()
    # GPU indices as nvidia-smi prints them (CUDA's default order is fastest first)
    env: dict[str, str] = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if gpus:
        k = 1 if devices_per_trial is None else devices_per_trial
        slots = slot_count(gpus, k)
        if concurrency is not None and concurrency != slots:
            raise ConfigError("--concurrency", concurrency,
                              f"must be {slots} on {len(gpus)} GPU(s) at {k} per trial (one trial per GPU group)")
        concurrency = slots
        names = "-".join(map(str, gpus))
        queue, nodename = "gpu", f"gpu{names}@{host}"
        # The parent never touches CUDA; each pool child narrows this to its own group (workers.trials.devices).
        env.update(CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)), CBS_WORKER_DEVICE=f"cuda:{','.join(map(str, gpus))}",
                   CBS_TRIAL_DEVICE="cuda", **{GPUS_ENV: ",".join(map(str, gpus)), DEVICES_ENV: str(k)})
        # Every compiled shape once per host, not once per trial process (inductor's on-disk cache).
        env["TORCHINDUCTOR_CACHE_DIR"] = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(paths.subdir("inductor"))
    else:
        concurrency = 1 if concurrency is None else concurrency
        queue, nodename = "cpu", f"cpu-{os.getpid()}@{host}"
        env.update(CBS_WORKER_DEVICE="cpu", CBS_TRIAL_DEVICE="cpu", CUDA_VISIBLE_DEVICES="")
        if devices_per_trial is not None:
            slot_count((0,) * devices_per_trial, devices_per_trial)  # checks it is a positive integer
            env[DEVICES_ENV] = str(devices_per_trial)
        ranks = concurrency * (devices_per_trial or 1)
        if ranks > 1:  # every rank of every trial one share of the cores, at least one thread
            env["CBS_TORCH_THREADS"] = "1" if concurrency > 1 else str(max(1, (os.cpu_count() or 1) // ranks))
    env["CBS_WORKER_QUEUE"] = queue
    # billiard forks each trial's child from its pool-maintenance thread, so the child allocates
    # from that thread's glibc malloc arena, not the main heap; there every training step of a
    # large batch ran about a third slower (two tiny-0.1M trials at B=32 side by side: 6.5k
    # tokens/s each, 9.3k-10.3k with one arena). glibc reads this when the worker starts.
    env["MALLOC_ARENA_MAX"] = os.environ.get("MALLOC_ARENA_MAX") or "1"
    # Celery's prefork pool, safe against an idle child killed on the filesystem broker (`-P custom`
    # is how Celery's command line takes a pool class of one's own).
    env["CELERY_CUSTOM_WORKER_POOL"] = "workers.infra.pool:TaskPool"
    argv = [sys.executable, "-m", "celery", "-A", "workers.trials.celery_app", "worker", "-Q", queue, "-c", str(concurrency),
            "-P", "custom", "-n", nodename, "--loglevel", loglevel, "--without-gossip", "--without-mingle",
            "--without-heartbeat"]
    return argv, env


def run_worker(args: argparse.Namespace) -> int:
    from workers.infra.settings import WorkerSettings
    from workers.trials.devices import parse_gpus

    gpus = parse_gpus(args.gpus) if args.gpus is not None else None
    on_gpu = args.gpu is not None or gpus is not None
    concurrency = args.concurrency if args.concurrency is not None or on_gpu else default_concurrency()
    argv, env = worker_argv(args.gpu, concurrency, args.loglevel, gpus=gpus, devices_per_trial=args.devices_per_trial)
    s = WorkerSettings.from_env()  # refuse bad settings before Celery starts
    from workers.tracking import prepare_store, wait_out

    # the MLflow schema once, before children race to create it (through a database restart)
    wait_out(lambda: prepare_store(s.tracking_uri), what="cbs worker", log=lambda m: print(m, flush=True))
    os.environ.update(env)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    sys.stdout.flush()
    os.execv(argv[0], argv)
    return 0  # not reached


# ---------------------------------------------------------------------------- cbs tracking
def tracking_auth_config(env: dict | None = None) -> Path:
    """Write ``$CBS_HOME/mlflow-auth/basic_auth.ini`` for ``mlflow server --app-name basic-auth`` and
    return it: no permission for anyone by default, users kept in ``users.db`` beside it, and the
    admin is the lab's service account ``MLFLOW_TRACKING_USERNAME`` (its password is handed to
    MLflow through ``MLFLOW_AUTH_ADMIN_PASSWORD``, never written to the file). Every lab process
    authenticates with the same two variables (MLflow's client reads them)."""
    from workers.tracking import load_service_password

    env = os.environ if env is None else env
    load_service_password(env)
    user, password = env.get("MLFLOW_TRACKING_USERNAME"), env.get("MLFLOW_TRACKING_PASSWORD")
    if not user or not password:
        raise ConfigError("MLFLOW_TRACKING_USERNAME", user or None,
                          "and MLFLOW_TRACKING_PASSWORD must both be set for cbs tracking --auth: they are the "
                          "lab's service account, the MLflow admin, used by the workers, runner and web app")
    folder = paths.subdir("mlflow-auth")
    secret = folder / "flask-secret"  # the CSRF key MLflow's auth app needs, kept across restarts
    if not secret.exists():
        import secrets

        secret.touch(mode=0o600)
        secret.write_text(secrets.token_hex(32))
    path = folder / "basic_auth.ini"
    path.write_text("[mlflow]\n"
                    "default_permission = NO_PERMISSIONS\n"
                    f"database_uri = sqlite:///{folder / 'users.db'}\n"
                    f"admin_username = {user}\n"
                    "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    return path


def tracking_argv(host: str, port: int, workers: int, *, auth: bool = False) -> list[str]:
    from workers.infra.settings import MLFLOW_DIR, WorkerSettings

    s = WorkerSettings.from_env()
    if not s.local_tracking:
        raise ConfigError("CBS_TRACKING_URI", s.tracking_uri, "is a tracking server already; "
                          "cbs tracking serves a database store (sqlite:// or postgresql://)")
    artifacts = s.artifact_root or str(MLFLOW_DIR / "store" / "artifacts")
    mlflow = os.path.join(os.path.dirname(sys.executable), "mlflow")
    # The store's URL (its password with it) goes to MLflow in MLFLOW_BACKEND_STORE_URI (run_tracking),
    # never on the command line, where `ps` shows it to every user of the host.
    return [mlflow, "server", "--artifacts-destination", artifacts,
            "--host", host, "--port", str(port), "--workers", str(workers),
            *(["--app-name", "basic-auth"] if auth else [])]


def run_tracking(args: argparse.Namespace) -> int:
    from workers.infra.settings import WorkerSettings
    from workers.tracking import prepare_store, wait_out

    auth = bool(getattr(args, "auth", False)) or os.environ.get("CBS_TRACKING_AUTH") == "1"
    argv = tracking_argv(args.host, args.port, args.workers, auth=auth)
    if auth:
        os.environ["MLFLOW_AUTH_CONFIG_PATH"] = str(tracking_auth_config())
        os.environ["MLFLOW_AUTH_ADMIN_PASSWORD"] = os.environ["MLFLOW_TRACKING_PASSWORD"]
        os.environ.setdefault("MLFLOW_FLASK_SERVER_SECRET_KEY", (paths.subdir("mlflow-auth") / "flask-secret").read_text())
    uri = WorkerSettings.from_env().tracking_uri
    wait_out(lambda: prepare_store(uri), what="cbs tracking", log=lambda m: print(masked(m), flush=True))
    os.environ["MLFLOW_BACKEND_STORE_URI"] = uri
    os.environ["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    print(f"cbs tracking: MLflow UI at http://{args.host}:{args.port} (store {masked_url(uri)})", flush=True)
    os.execv(argv[0], argv)
    return 0  # not reached


# ---------------------------------------------------------------------------- cbs study
