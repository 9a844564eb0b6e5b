"""Workers as SLURM jobs: the batch script of a job array of ``cbs worker`` processes, and the
``sbatch``/``squeue``/``scancel`` calls of ``cbs slurm`` (docs/operating.md, "SLURM").

Each array task is one worker with one trial at a time (``cbs worker --concurrency 1``) on the
GPU that SLURM gave it (``--gres=gpu:1``; ``gpus=0`` asks for none and runs a CPU worker). The
worker runs in the background of the batch shell, which traps the signal that SLURM sends before
the time limit (``--signal=B:USR1@S``: to the batch shell only) and a preemption's or ``scancel``'s
SIGTERM, and turns either into SIGTERM to the worker: Celery's warm shutdown, whose hook
(:mod:`workers.trials.celery_app`) stops the running trial at a checkpoint and puts the same
attempt back in the queue. The shell then waits for the worker and exits with its status. A
``--requeue`` task that SLURM preempted (its ``PreemptTime`` set) asks ``scontrol requeue`` for itself
before it exits: where SLURM signals at the preemption (``preempt_send_user_signal``) the worker is
gone within the grace time, and a job that ends by itself then ends ``COMPLETED``, not requeued.

The script carries the lab's settings (``CBS_*`` and ``MLFLOW_TRACKING_*`` of the submitting
environment, ``CBS_HOME`` and the tracking URI resolved), except values that hold a secret (a URL
with a password, a ``*PASSWORD*``/``*TOKEN*``/``*SECRET*`` variable): those are not written, and
the script requires them from the environment that ``sbatch`` exports (its default, ``ALL``).
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from cbscore import paths
from cbscore.errors import CbsError, ConfigError, masked

#: squeue's states of a job that holds or will hold a worker.
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                         "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "SUSPENDED"})
#: Options this module writes itself; an extra ``sbatch`` option may not set them again.
OWN_OPTIONS = ("--job-name", "--array", "--gres", "--gpus", "--partition", "--account", "--time", "--cpus-per-task",
               "--mem", "--signal", "--requeue", "--no-requeue", "--output", "--error", "--open-mode", "--ntasks",
               "--nodes", "--export")
_TIME = re.compile(r"^(?:(?P<d>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
                   r"|(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)|(?P<mm>\d+):(?P<ss>\d+)|(?P<minutes>\d+))$")
_NAME = re.compile(r"^[A-Za-z0-9_.,+-]+$")
_MEM = re.compile(r"^\d+[KMGT]?$")
# sbatch reads its #SBATCH lines itself (bash skips them as comments): an option is one word
_OPTION = re.compile(r"^--[a-z][a-z0-9-]*(=[^\s'\"\\#]+)?$")
_SECRET_NAME = re.compile(r"PASSWORD|TOKEN|SECRET", re.IGNORECASE)
#: How SLURM's clients say that the controller is away (a restart, a failover, a network cut).
_UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Slurm backup controller in standby mode")


class SlurmUnreachable(CbsError):
    """SLURM's controller did not answer: a transient outage that ``cbs slurm keep`` waits out."""


def time_limit_s(value: str) -> int:
    """SLURM's time limit (``MINUTES``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``) in seconds."""
    m = _TIME.match(value)
    if not m:
        raise ConfigError("--time", value, "must be a SLURM time limit: MINUTES, MM:SS, HH:MM:SS or D-HH:MM:SS")
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if "minutes" in g:
        seconds = g["minutes"] * 60
    elif "mm" in g:
        seconds = g["mm"] * 60 + g["ss"]
    elif "h" in g:
        seconds = g["h"] * 3600 + g["m"] * 60 + g["s"]
    else:
        seconds = g["d"] * 86400 + g["dh"] * 3600 + g.get("dm", 0) * 60 + g.get("ds", 0)
    if seconds <= 0:
        raise ConfigError("--time", value, "must be a positive time limit")
    return seconds


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlurmJob:
    """What ``cbs slurm submit`` asks SLURM for: a job array of ``count`` workers."""

    count: int
    """Array tasks, one worker each (``--array=0-(count-1)``)."""
    gpus: int = 1
    """GPUs per worker (``--gres=gpu:K``); 0: a CPU worker and no GPU asked for."""
    time: str = "4:00:00"
    """Wall-time limit of each task, in SLURM's format (``--time``)."""
    signal_before_s: int = 300
    """Seconds before the time limit at which SLURM signals the batch shell (``--signal=B:SIG@S``):
    time for the trial to reach its next step and write a checkpoint."""
    signal: str = "USR1"
    """The signal SLURM sends then (USR1 or TERM); either becomes the worker's warm shutdown."""
    partition: str | None = None
    """``--partition`` (default: the cluster's default partition)."""
    account: str | None = None
    """``--account`` to charge (default: the user's default account)."""
    cpus_per_task: int = 4
    """CPU cores of each task (``--cpus-per-task``): data loading, the worker's parent."""
    mem: str | None = None
    """Memory of each task (``--mem``, e.g. ``32G``; default: the partition's)."""
    requeue: bool = False
    """``--requeue``: a preempted or failed-node task goes back to SLURM's queue (preemptible partitions)."""
    job_name: str = "cbs-worker"
    """The jobs' name, which ``cbs slurm status``/``cancel``/``keep`` find them by."""
    extra: tuple[str, ...] = ()
    """More ``sbatch`` options, each ``--name`` or ``--name=value`` (e.g. ``--qos=high``)."""

    def __post_init__(self) -> None:
        for name, flag in (("count", "--count"), ("gpus", "--gpus"), ("cpus_per_task", "--cpus-per-task"),
                           ("signal_before_s", "--signal-before")):
            value = getattr(self, name)
            least = 0 if name == "gpus" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(flag, value, f"must be {'a non-negative' if least == 0 else 'a positive'} integer")
        if self.signal not in ("USR1", "TERM"):
            raise ConfigError("--signal", self.signal, "must be USR1 or TERM")
        limit = time_limit_s(self.time)
        if self.signal_before_s >= limit:
            raise ConfigError("--signal-before", self.signal_before_s,
                              f"must be shorter than the time limit --time={self.time} ({limit} s)")
        if self.signal_before_s > 65535:  # SLURM's bound on the signal's lead time
            raise ConfigError("--signal-before", self.signal_before_s, "must be at most 65535 s")
        for name in ("partition", "account", "job_name"):
            value = getattr(self, name)
            if value is not None and not _NAME.match(value):
                raise ConfigError(f"--{name.replace('_', '-')}", value,
                                  "must be a SLURM name (letters, digits and _.,+-)")
        if self.mem is not None and not _MEM.match(self.mem):
            raise ConfigError("--mem", self.mem, "must be SLURM's memory size: an integer with K, M, G or T")
        for option in self.extra:
            if not _OPTION.match(option):
                raise ConfigError("--sbatch-option", option, "must be one sbatch option, --name or --name=value, "
                                  "without spaces, quotes, backslashes or #")
            if option.split("=", 1)[0] in OWN_OPTIONS:
                raise ConfigError("--sbatch-option", option, f"sets {option.split('=', 1)[0]}, which cbs slurm writes "
                                  "itself: use its own option")


def lab_environment(env: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The settings a worker job needs: ``(written, required)``. ``written`` are exported by the
    script (``CBS_HOME`` and ``CBS_TRACKING_URI`` resolved, every other ``CBS_*`` and
    ``MLFLOW_TRACKING_*`` as set); ``required`` are the names that hold a secret, which the script
    takes from the environment ``sbatch`` exports instead of writing them down."""
    from workers.infra.settings import WorkerSettings

    env = dict(os.environ if env is None else env)
    chosen = {k: v for k, v in env.items() if k.startswith(("CBS_", "MLFLOW_TRACKING_")) and v != ""}
    chosen["CBS_HOME"] = str(paths.cbs_home())
    if "MLFLOW_TRACKING_URI" not in chosen:
        chosen["CBS_TRACKING_URI"] = WorkerSettings.from_env(env).tracking_uri
    written, required = {}, []
    for name in sorted(chosen):
        value = chosen[name]
        if _SECRET_NAME.search(name) or masked(value) != value:
            required.append(name)
        else:
            written[name] = value
    return written, required


def single_host_notes(env: dict[str, str] | None = None) -> list[str]:
    """What of the lab's settings only the submitting host can serve: the filesystem broker and
    SQLite stores work for jobs on this node, or on nodes that share ``$CBS_HOME``'s filesystem
    with working locks; SQLite on NFS/Lustre does not (docs/operating.md, "SLURM")."""
    from workers.infra.settings import WorkerSettings

    s = WorkerSettings.from_env(dict(os.environ if env is None else env))
    notes = []
    if s.embedded_broker:
        notes.append("the broker is the filesystem folder $CBS_HOME/broker: set CBS_BROKER_URL=redis://... "
                     "(or amqp://...) for workers on other nodes")
    stores = [name for name, url in (("CBS_TRACKING_URI", s.tracking_uri), ("CBS_OPTUNA_STORAGE", s.optuna_storage),
                                     ("CBS_LEDGER_URL", s.ledger_url)) if url.startswith("sqlite")]
    if stores:
        notes.append(f"{', '.join(stores)} {'is' if len(stores) == 1 else 'are'} SQLite: on a cluster use PostgreSQL "
                     "(or `cbs tracking` for MLflow), since SQLite on a shared filesystem is not safe")
    return notes


def _fields(line: str) -> dict[str, str]:
    """``scontrol --oneliner``'s ``Key=Value`` words as a dict."""
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


def preemption_notes(job: SlurmJob) -> list[str]:
    """What the cluster's preemption means for ``job`` (its partition's ``PreemptMode``, SLURM's
    ``KillWait`` and ``preempt_send_user_signal``), from ``scontrol``; none where SLURM cannot be asked."""
    try:
        lines = _run(["scontrol", "show", "partition", "--oneliner"], timeout_s=10).splitlines()
        config = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", _run(["scontrol", "show", "config"], timeout_s=10),
                                 re.MULTILINE))
    except CbsError:
        return []
    partitions = [_fields(line) for line in lines]
    part = next((p for p in partitions if p.get("PartitionName") == job.partition
                 or (job.partition is None and p.get("Default") == "YES")), None)
    if part is None:
        return []
    name, mode = part["PartitionName"], part.get("PreemptMode", "OFF")
    how = mode.split(",")[0]
    notes = []
    if how == "REQUEUE" and not job.requeue:
        notes.append(f"partition {name} preempts by requeueing (PreemptMode={mode}): pass --requeue, or a "
                     "preempted task ends and only `cbs slurm keep` replaces it")
    if how == "CANCEL" and job.requeue:
        notes.append(f"partition {name} cancels preempted jobs (PreemptMode={mode}): --requeue brings none back")
    if how == "SUSPEND":
        notes.append(f"partition {name} suspends preempted jobs (PreemptMode={mode}): a stopped worker cannot "
                     "give its trial back, whose lease goes stale as a lost worker's does")
    if how in ("REQUEUE", "CANCEL"):
        kill_wait = int(re.match(r"\d*", config.get("KillWait", "")).group() or 30)
        signal_now = "preempt_send_user_signal" in config.get("SlurmctldParameters", "")
        grace = part.get("GraceTime", "0")
        notes.append(f"partition {name} is preemptible: a preempted worker gets "
                     + (f"--signal={job.signal} at the preemption and GraceTime={grace} s to stop"
                        if signal_now else f"SIGTERM at the end of GraceTime={grace} s and KillWait={kill_wait} s "
                                           "to stop (its trial checkpoints then)"))
        if not signal_now and kill_wait < 30:
            notes.append(f"KillWait={kill_wait} s is short: a trial that cannot reach its next step and write a "
                         "checkpoint in that time is killed and resumes from its last periodic checkpoint")
    return notes


def slurm_dir() -> Path:
    """``$CBS_HOME/slurm``: the scripts submitted and the jobs' logs (``logs/``)."""
    folder = paths.subdir("slurm")
    (folder / "logs").mkdir(exist_ok=True)
    return folder


def job_script(job: SlurmJob, env: dict[str, str] | None = None, *, cbs: str | None = None) -> str:
    """The ``sbatch`` script of ``job``: a user can read it, change it and submit it as it is."""
    written, required = lab_environment(env)
    cbs = cbs or str(Path(sys.executable).parent / "cbs")
    logs = slurm_dir() / "logs"
    lines = ["#!/bin/bash",
             f"# CBS Lab: {job.count} worker(s) as a SLURM job array, written by `cbs slurm submit`.",
             f"#SBATCH --job-name={job.job_name}",
             f"#SBATCH --array=0-{job.count - 1}",
             "#SBATCH --ntasks=1",
             f"#SBATCH --cpus-per-task={job.cpus_per_task}",
             f"#SBATCH --time={job.time}"]
    lines += [f"#SBATCH --gres=gpu:{job.gpus}"] if job.gpus else []
    lines += [f"#SBATCH --partition={job.partition}"] if job.partition else []
    lines += [f"#SBATCH --account={job.account}"] if job.account else []
    lines += [f"#SBATCH --mem={job.mem}"] if job.mem else []
    lines += [f"#SBATCH --signal=B:{job.signal}@{job.signal_before_s}",
              "#SBATCH --requeue" if job.requeue else "#SBATCH --no-requeue",
              f"#SBATCH --output={logs}/%x-%A_%a.out",
              "#SBATCH --open-mode=append"]  # a requeued task's log keeps the lines of its preempted run
    lines += [f"#SBATCH {option}" for option in job.extra]
    lines += ["", "# The lab's settings (the broker, tracking, ledger and shared folders of the lab that submitted)."]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in written.items()]
    if required:
        lines += ["# Secrets are not written here: sbatch exports them from the submitting shell (--export=ALL)."]
        lines += [f': "${{{name}:?{name} must be set in the environment of sbatch}}"' for name in required]
    if job.gpus:
        flag = "--gpu" if job.gpus == 1 else "--gpus"
        per_trial = [] if job.gpus == 1 else [f"--devices-per-trial {job.gpus}"]
        command = " ".join([shlex.quote(cbs), "worker", flag, '"$CUDA_VISIBLE_DEVICES"', *per_trial, "--concurrency 1"])
        lines += ["", ': "${CUDA_VISIBLE_DEVICES:?SLURM set no CUDA_VISIBLE_DEVICES: was the GPU (--gres) granted?}"']
    else:
        command = f"{shlex.quote(cbs)} worker --concurrency 1"
    lines += [
        "",
        "# SLURM signals this shell before the time limit (--signal=B:...), and a preemption or scancel",
        "# sends SIGTERM: either becomes SIGTERM to the worker, Celery's warm shutdown. The running trial",
        "# stops at a checkpoint and the same attempt goes back to the queue; the next worker resumes it.",
        "worker=",
        "warm_shutdown() {",
        '    echo "cbs slurm: SIG$1 received in job ${SLURM_JOB_ID:-?}: warm shutdown of worker pid $worker" \\',
        '         "(the running trial checkpoints and goes back to the queue)"',
        '    [ -n "$worker" ] && kill -TERM "$worker" 2>/dev/null',
        "}",
        "trap 'warm_shutdown USR1' USR1",
        "trap 'warm_shutdown TERM' TERM",
        f"{command} &",
        "worker=$!",
        'echo "cbs slurm: worker pid $worker started in job ${SLURM_JOB_ID:-?} on $(hostname)" \\',
        '     "(restart ${SLURM_RESTART_COUNT:-0})"',
        "# `wait` returns when a trapped signal arrives: wait again until the worker has exited",
        'while :; do wait "$worker"; status=$?; kill -0 "$worker" 2>/dev/null || break; done',
        'echo "cbs slurm: worker pid $worker exited with status $status"']
    if job.requeue:
        lines += [
            "# Preempted (SLURM set the job's PreemptTime) and still running: back in SLURM's queue now, to start",
            "# again when the preemptor is done. A task that ends by itself within the partition's GraceTime (as a",
            "# cluster with SlurmctldParameters=preempt_send_user_signal lets it: the --signal comes at the",
            "# preemption) would otherwise end COMPLETED, and SLURM would requeue nothing. A job that SLURM is",
            "# requeueing or cancelling already (its state no longer RUNNING) is left to SLURM.",
            'job=$(scontrol show job "${SLURM_JOB_ID:-}" 2>/dev/null)',
            'preempted=$(grep -o "PreemptTime=[^ ]*" <<< "$job")',
            'case "$job" in *JobState=RUNNING*) ;; *) preempted= ;; esac',
            'case "$preempted" in',
            '    ""|PreemptTime=None) ;;',
            '    *) echo "cbs slurm: job $SLURM_JOB_ID was preempted ($preempted): requeued, to start again"',
            '       scontrol requeue "$SLURM_JOB_ID";;  # SLURM then ends this run of the job (SIGTERM to this shell)',
            "esac"]
    lines += ['exit "$status"', ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- SLURM's commands
def _run(argv: list[str], timeout_s: float = 60) -> str:
    """``argv``'s standard output; a missing command, a failure or no answer within ``timeout_s`` is a
    :class:`CbsError` with SLURM's words."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise CbsError(f"{argv[0]} is not installed here: cbs slurm runs on a SLURM login node "
                       "(or set SLURM_CONF for a cluster this host can reach)") from None
    except subprocess.TimeoutExpired:
        raise SlurmUnreachable(f"{argv[0]} did not answer within {timeout_s:g} s") from None
    if done.returncode != 0:
        message = f"{argv[0]} failed (exit {done.returncode}): {masked(done.stderr.strip())}"
        raise (SlurmUnreachable if any(m in done.stderr for m in _UNREACHABLE) else CbsError)(message)
    return done.stdout


def save_script(script: str) -> Path:
    """Write the script under ``$CBS_HOME/slurm/`` (a new file per submission) and return it."""
    from workers.infra.atomic_files import write_text

    path = slurm_dir() / f"workers-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.sbatch"
    write_text(path, script)
    path.chmod(0o700)
    return path


def submit(job: SlurmJob, env: dict[str, str] | None = None) -> tuple[str, Path]:
    """Save ``job``'s script and ``sbatch`` it: ``(array job id, script path)``."""
    path = save_script(job_script(job, env))
    out = _run(["sbatch", "--parsable", str(path)]).strip()
    job_id = out.split(";")[0]  # "ID" or "ID;cluster"
    if not job_id.isdigit():
        raise CbsError(f"sbatch answered no job id: {out!r}")
    with open(slurm_dir() / "submitted.log", "a") as log:
        log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {job_id} {job.count} {path}\n")
    return job_id, path


@dataclasses.dataclass(frozen=True)
class SlurmTask:
    """One worker job as ``squeue`` shows it."""

    job_id: str
    """``ARRAYID_TASK`` (``squeue --array``: one line per task; a folded ``ARRAYID_[0-3]`` counts each)."""
    state: str
    elapsed: str
    time_limit: str
    reason: str
    tasks: int
    """Array tasks this row stands for (a folded pending range counts each)."""


def _range_size(job_id: str) -> int:
    """Tasks in squeue's ``123_[0-3,5%2]``; 1 for ``123_4``."""
    m = re.search(r"_\[([^\]%]+)", job_id)
    if not m:
        return 1
    n = 0
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return n


def worker_tasks(job_name: str = "cbs-worker") -> list[SlurmTask]:
    """This user's jobs named ``job_name`` that squeue still lists."""
    out = _run(["squeue", "--noheader", "--array", f"--name={job_name}", f"--user={getpass.getuser()}",
                "--format=%i|%T|%M|%l|%R"])
    tasks = []
    for line in out.splitlines():
        if line.strip():
            job_id, state, elapsed, limit, reason = line.split("|", 4)
            tasks.append(SlurmTask(job_id, state, elapsed, limit, reason, _range_size(job_id)))
    return tasks


def live_workers(job_name: str = "cbs-worker") -> int:
    """Array tasks named ``job_name`` that hold or will hold a worker (pending ones included)."""
    return sum(t.tasks for t in worker_tasks(job_name) if t.state in LIVE_STATES)


def cancel(job_name: str = "cbs-worker", job_ids: tuple[str, ...] = ()) -> None:
    """``scancel`` this user's worker jobs (or only ``job_ids``). SLURM sends SIGTERM to every
    process of a job, and to the batch shell, then SIGKILL after its ``KillWait``: the workers shut
    down warm meanwhile (their running trials checkpoint and go back to the queue)."""
    for job_id in job_ids:
        if not re.match(r"^\d+(_\d+)?$", job_id):
            raise ConfigError("--job", job_id, "must be a SLURM job id (123 or 123_4)")
    _run(["scancel", f"--user={getpass.getuser()}", *(job_ids or (f"--name={job_name}",))])


# ---------------------------------------------------------------------------- keep enough workers
def studies_needing_workers(names: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """``(busy, unfinished)``: of ``names`` (default: every study whose status is ``running``), the
    studies with trials queued, running or lost (work for a worker), and those not yet done or
    cancelled."""
    from workers.query import api

    if not names:
        names = tuple(s.name for s in api.list_studies() if s.status == "running")
    busy, unfinished = [], []
    for name in names:
        st = api.study_status(name)
        if st.status in ("done", "cancelled"):
            continue
        unfinished.append(name)
        if any(st.counts.get(k, 0) for k in ("queued", "running", "lost")):
            busy.append(name)
    return busy, unfinished


def keep(job: SlurmJob, studies: tuple[str, ...] = (), *, period_s: float = 60.0, once: bool = False,
         release: bool = True, log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep) -> int:
    """Keep ``job.count`` worker tasks queued or running while the studies have trials to run:
    each pass submits an array of the missing ones (never more than ``job.count`` in all), and the
    loop ends when every study is done or cancelled. Then, with ``release``, the tasks of
    ``job.job_name`` are cancelled too (an idle worker would otherwise hold its GPU until its time
    limit, and a requeued one start again for nothing), unless some other running study of the lab
    still has trials queued or running: those workers may be serving it. Returns the tasks it
    submitted."""
    from workers.tracking import wait_out

    submitted = 0
    while True:
        # a database outage is waited out; SLURM's controller away skips this pass (nothing is
        # submitted without a count of the live tasks, so never more than job.count)
        busy, unfinished = wait_out(lambda: studies_needing_workers(studies), what="cbs slurm keep", log=log)
        if not unfinished:
            log(f"cbs slurm keep: no study left to run ({', '.join(studies) or 'no running study'}): stopping")
            if release:
                _release_idle_workers(job.job_name, log)
            return submitted
        try:
            live = live_workers(job.job_name)
            missing = job.count - live if busy else 0
            if missing > 0:
                job_id, path = submit(dataclasses.replace(job, count=missing))
                submitted += missing
                log(f"cbs slurm keep: {live} of {job.count} worker(s) in SLURM's queue for {', '.join(busy)}: "
                    f"submitted {missing} more as job {job_id} ({path})")
            else:
                log(f"cbs slurm keep: {live} worker(s) in SLURM's queue, {job.count} wanted"
                    + ("" if busy else f"; no trial queued or running in {', '.join(unfinished)}"))
        except SlurmUnreachable as exc:
            log(f"cbs slurm keep: SLURM's controller is unreachable ({exc}); trying again in {period_s:g} s")
        if once:
            return submitted
        sleep(period_s)


def _release_idle_workers(job_name: str, log: Callable[[str], None]) -> None:
    """Cancel the worker tasks named ``job_name`` once no running study has work for them (a
    cancel is a warm shutdown: a worker that did pick up a trial gives it back at a checkpoint)."""
    from workers.tracking import wait_out

    busy, _ = wait_out(lambda: studies_needing_workers(), what="cbs slurm keep", log=log)
    if busy:
        log(f"cbs slurm keep: workers {job_name!r} left running: {', '.join(busy)} still has trials")
        return
    try:
        live = live_workers(job_name)
        if live:
            cancel(job_name)
            log(f"cbs slurm keep: cancelled {live} idle worker task(s) {job_name!r} (pass --leave-workers to keep them)")
    except SlurmUnreachable as exc:
        log(f"cbs slurm keep: SLURM's controller is unreachable ({exc}); workers {job_name!r} were not cancelled: "
            f"`cbs slurm cancel --job-name {job_name}` when it answers")

