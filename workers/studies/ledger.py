"""The runner's ledger: who holds which trial attempt, which workers are alive, who advances a study.

MLflow is the record of what a trial measured; the ledger is how processes on any number of hosts
agree on who runs what (DESIGN.md §3: "no trial runs twice at once; no finished trial is run
again"). Every change of hands is one compare-and-set ``UPDATE ... WHERE attempt = :a AND
state = :s`` whose row count says who won, which SQLite and PostgreSQL both make atomic.

A trial's lease moves ``creating → queued → running → done``. ``creating`` guards the MLflow run
and the task message being made (one process wins the insert); ``queued`` waits for a worker; a
task claims ``queued → running`` for its own attempt only; a lost trial goes ``running → queued``
with ``attempt + 1`` (the old attempt's task, if it ever runs, finds its attempt superseded and
exits). The holder's heartbeat thread stamps ``heartbeat_s`` and reads ``stop_reason`` (pruning,
cancel, a worker shutting down). A holder interrupted by a shutdown puts the lease back to
``queued`` with the *same* attempt (``release``). One MLflow run per trial is reused across
attempts (its ``attempt`` tag is bumped).

**What an attempt costs.** ``attempt`` is the fencing token and goes up with every loss; the cap
(``CBS_MAX_ATTEMPTS``) counts only the losses that made no durable progress (``strikes``): a lost
attempt whose holder saved no checkpoint past the furthest one before it (``checkpoint_step`` not
above ``resumed_step``). A trial that kills its own worker (out of memory, a crash at one step) dies
each time before it gets further and is failed at the cap; a kill from outside (a node taken away,
the chaos run's kills) after a checkpoint costs nothing, and each such free loss moves the furthest
checkpoint forward, so a trial cannot loop for ever. Outages, shutdowns and give-backs cost nothing
either way (``release``, ``give_back``). A ledger made before these columns gets them on first use,
its leases' earlier losses counted as strikes (``attempt - 1``).

Default location: ``sqlite:///$CBS_HOME/runner/ledger.db``, or the Optuna PostgreSQL database
when ``CBS_OPTUNA_STORAGE`` is set (tables ``cbs_trial_leases``, ``cbs_workers``, ``cbs_study_locks``,
``cbs_study_stores``, ``cbs_trial_results``, ``cbs_study_fits``).

``cbs_trial_results`` and ``cbs_study_fits`` are the pages' read model
(:mod:`workers.studies.read_model`): an ended trial's outcome, steps to target, curves and the
figures its run ended with, kept when its lease is done, so that reading a study needs no MLflow
query per ended trial; and the fits of a study's steps table the pages computed, so that a page
on another host or after a restart does not bootstrap the same table again. MLflow stays the
record; a lab whose ledger predates the tables gets them empty on first use and fills them as it
reads.

A study's token store is pinned here by the first trial that has it ready (``cbs_study_stores``:
where it was, its content digest, which host): every later attempt, on any host, trains on a store
with that digest or gives its attempt back (:mod:`workers.studies.stores`).
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

#: Stop reason of the trials of a worker that is shutting down: they stop at a checkpoint and go
#: back to the queue as the same attempt.
INTERRUPTED = "interrupted"

_META = sa.MetaData()

LEASES = sa.Table(
    "cbs_trial_leases", _META,
    sa.Column("trial_id", sa.String(255), primary_key=True),
    sa.Column("study", sa.String(64), nullable=False, index=True),
    sa.Column("run_id", sa.String(64)),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # creating | queued | running | done
    sa.Column("owner", sa.String(255)),  # "host_id():pid" of the process holding the lease
    sa.Column("worker", sa.String(255)),  # Celery node name of the worker running it
    sa.Column("queue", sa.String(16)),
    sa.Column("heartbeat_s", sa.Float),
    sa.Column("sent_s", sa.Float),  # when a task message was last sent
    sa.Column("updated_s", sa.Float, nullable=False),
    sa.Column("stop_reason", sa.String(64)),
    sa.Column("outcome", sa.String(16)),
    # the attempt cap's count (module docstring): losses that saved no checkpoint past the furthest one
    sa.Column("strikes", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_strike", sa.Integer, nullable=False, server_default="0"),  # what the last requeue added
    sa.Column("checkpoint_step", sa.Integer),  # the furthest step a holder saved a checkpoint at
    sa.Column("resumed_step", sa.Integer),  # checkpoint_step when the current attempt began
)

#: Columns added to ``cbs_trial_leases`` after it first shipped, with the value an existing row gets
#: (SQL): its earlier losses count as strikes, as they did before the count existed.
_ADDED_LEASE_COLUMNS = {"strikes": "attempt - 1", "last_strike": "0", "checkpoint_step": None, "resumed_step": None}

WORKERS = sa.Table(
    "cbs_workers", _META,
    sa.Column("nodename", sa.String(255), primary_key=True),
    sa.Column("hostname", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("device", sa.String(32), nullable=False),
    sa.Column("queue", sa.String(16), nullable=False),
    sa.Column("concurrency", sa.Integer, nullable=False),
    sa.Column("started_s", sa.Float, nullable=False),
    sa.Column("heartbeat_s", sa.Float, nullable=False),
)

LOCKS = sa.Table(
    "cbs_study_locks", _META,
    sa.Column("study", sa.String(64), primary_key=True),
    sa.Column("owner", sa.String(255)),
    sa.Column("until_s", sa.Float, nullable=False),
    sa.Column("dirty", sa.Integer, nullable=False, default=0),
)

STORES = sa.Table(
    "cbs_study_stores", _META,
    sa.Column("study", sa.String(64), primary_key=True),
    sa.Column("path", sa.String(1024), nullable=False),  # the store folder, as the pinning host saw it
    sa.Column("digest", sa.String(64), nullable=False),  # cbscore.data.store.content_digest
    sa.Column("host", sa.String(255), nullable=False),  # host_id() of the process that pinned it
    sa.Column("pinned_s", sa.Float, nullable=False),
)

RESULTS = sa.Table(
    "cbs_trial_results", _META,
    sa.Column("trial_id", sa.String(255), primary_key=True),
    sa.Column("study", sa.String(64), nullable=False, index=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    # the lease's updated_s when it was kept: a lease that moved since (a re-run) makes the row stale
    sa.Column("lease_updated_s", sa.Float, nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("steps_to_target", sa.Float),
    sa.Column("curves", sa.Text, nullable=False),  # JSON {metric: [[steps], [values]]}: eval/loss_ewa, ...
    sa.Column("run", sa.Text, nullable=False),  # JSON: the ended run's status, times, tags and latest metrics
)

FITS = sa.Table(
    "cbs_study_fits", _META,
    sa.Column("study", sa.String(64), primary_key=True),
    sa.Column("key", sa.String(64), primary_key=True),  # the table, the fit's settings and the analysis code
    sa.Column("kept_s", sa.Float, nullable=False),
    sa.Column("fit", sa.LargeBinary, nullable=False),
)


@dataclass(frozen=True, kw_only=True)
class TrialResultRow:
    """One row of ``cbs_trial_results`` (:mod:`workers.studies.read_model` writes and reads it)."""

    trial_id: str
    study: str
    run_id: str
    lease_updated_s: float
    outcome: str
    steps_to_target: float | None
    curves: str
    run: str


@dataclass(frozen=True, kw_only=True)
class StorePin:
    """One row of ``cbs_study_stores``: the token store every trial of ``study`` trains on."""

    study: str
    path: str
    """The store folder as the pinning host resolved it (another host may mount it elsewhere)."""
    digest: str
    """The store's content digest (:func:`cbscore.data.store.content_digest`)."""
    host: str
    pinned_s: float


@dataclass(frozen=True, kw_only=True)
class Lease:
    """One row of ``cbs_trial_leases``."""

    trial_id: str
    study: str
    run_id: str | None
    attempt: int
    state: str
    owner: str | None
    worker: str | None
    queue: str | None
    heartbeat_s: float | None
    sent_s: float | None
    updated_s: float
    stop_reason: str | None
    outcome: str | None
    strikes: int = 0
    """Lost attempts that made no durable progress (the attempt cap counts these)."""
    last_strike: int = 0
    """What the last requeue added to ``strikes`` (a give-back that undoes the requeue takes it back)."""
    checkpoint_step: int | None = None
    """The furthest optimizer step a holder of this trial saved a checkpoint at (None: none yet)."""
    resumed_step: int | None = None
    """``checkpoint_step`` when the current attempt began (None: it began with none)."""

    @property
    def progressed(self) -> bool:
        """Whether the current attempt saved a checkpoint past the furthest one before it."""
        return self.checkpoint_step is not None and (self.resumed_step is None
                                                     or self.checkpoint_step > self.resumed_step)

    def charged_if_lost(self) -> int:
        """The attempts the cap would count if this attempt were lost now (module docstring)."""
        return self.strikes + (0 if self.progressed else 1)

    def lost_reason(self, max_attempts: int) -> str:
        """Why a trial lost at the cap failed (its run's ``stop_reason``)."""
        charged = self.charged_if_lost()
        if charged == self.attempt:
            return f"lost its worker {self.attempt} times (CBS_MAX_ATTEMPTS={max_attempts})"
        return (f"lost its worker {self.attempt} times, {charged} of them before saving a checkpoint past "
                f"the furthest one (CBS_MAX_ATTEMPTS={max_attempts} counts those)")


@dataclass(frozen=True, kw_only=True)
class WorkerRow:
    """One row of ``cbs_workers``: a live (or recently live) Celery worker."""

    nodename: str
    hostname: str
    pid: int
    device: str
    queue: str
    concurrency: int
    started_s: float
    heartbeat_s: float


def _read_first(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def host_id() -> str:
    """Where a pid means one process: ``hostname@<pid namespace>.<boot>``.

    Containers that share a hostname have their own PID namespaces (the same pid is a different
    process in each), and a reboot reuses pids, so a pid is only judged where both match. Off
    Linux (no ``/proc``) it is the plain hostname.
    """
    try:
        ns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return socket.gethostname()
    boot = _read_first("/proc/sys/kernel/random/boot_id").replace("-", "")[:12]
    return f"{socket.gethostname()}@{ns}.{boot}"


def this_process() -> str:
    """Owner id of the calling process: ``host_id():pid``."""
    return f"{host_id()}:{os.getpid()}"


def owner_is_alive_here(owner: str | None) -> bool:
    """True when ``owner`` is a running process of this host and PID namespace (not a zombie)."""
    if not owner or ":" not in owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != host_id() or not pid.isdigit():
        return False
    return not owner_is_dead(owner)


def owner_is_dead(owner: str | None) -> bool:
    """True when ``owner`` (``host_id():pid``) is a process of this host and PID namespace that no
    longer runs.

    Owners on other hosts or in other PID namespaces (another container with the same hostname)
    are never judged here: their heartbeat decides. A zombie (killed, not yet reaped) counts as dead.
    """
    if not owner or ":" not in owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != host_id() or not pid.isdigit():
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    # Field 3 of /proc/PID/stat is the state; the command name before it is in parentheses.
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


_ENGINES: dict[tuple[int, str], sa.Engine] = {}
_ENGINES_LOCK = threading.Lock()


def engine(url: str) -> sa.Engine:
    """One engine per (process, URL), tables created on first use (engines never cross a fork)."""
    key = (os.getpid(), url)
    with _ENGINES_LOCK:
        eng = _ENGINES.get(key)
        if eng is None:
            if url.startswith("sqlite:///"):
                Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
                eng = sa.create_engine(url, connect_args={"timeout": 30}, poolclass=sa.pool.NullPool)
                with eng.begin() as conn:
                    conn.exec_driver_sql("PRAGMA journal_mode=WAL")
            else:
                eng = sa.create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=2)
            from workers.infra.schema_lock import schema_lock

            with schema_lock(url, "ledger"):
                _META.create_all(eng, checkfirst=True)
                _add_lease_columns(eng)
            _ENGINES[key] = eng
        return eng


def _add_lease_columns(eng: sa.Engine) -> None:
    """Give a ledger made before them the columns of :data:`_ADDED_LEASE_COLUMNS` (SQLite and
    PostgreSQL both add a column in place; the caller holds the schema lock)."""
    have = {c["name"] for c in sa.inspect(eng).get_columns(LEASES.name)}
    for name, value in _ADDED_LEASE_COLUMNS.items():
        if name in have:
            continue
        column = LEASES.c[name]
        kind = column.type.compile(eng.dialect)
        default = f" NOT NULL DEFAULT {column.server_default.arg}" if column.server_default is not None else ""
        with eng.begin() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {LEASES.name} ADD COLUMN {name} {kind}{default}")
            if value is not None:
                conn.exec_driver_sql(f"UPDATE {LEASES.name} SET {name} = {value}")


def _lost_values(c=LEASES.c) -> dict:
    """What a loss writes besides the attempt (module docstring): one more strike unless the lost
    attempt saved a checkpoint past the furthest before it, and the next attempt's start."""
    progressed = sa.and_(c.checkpoint_step.is_not(None),
                         sa.or_(c.resumed_step.is_(None), c.checkpoint_step > c.resumed_step))
    strike = sa.case((progressed, 0), else_=1)
    return {"strikes": c.strikes + strike, "last_strike": strike, "resumed_step": c.checkpoint_step}


class Ledger:
    """Compare-and-set operations on the leases, the worker table and the study locks."""

    def __init__(self, url: str):
        self.url = url
        self.engine = engine(url)

    # ------------------------------------------------------------------ leases
    def lease(self, trial_id: str) -> Lease | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(LEASES).where(LEASES.c.trial_id == trial_id)).mappings().first()
        return None if row is None else Lease(**row)

    def leases(self, study: str) -> dict[str, Lease]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(LEASES).where(LEASES.c.study == study)).mappings().all()
        return {r["trial_id"]: Lease(**r) for r in rows}

    def create(self, trial_id: str, study: str, queue: str, *, owner: str, now_s: float,
               stale_after_s: float) -> bool:
        """Take the right to create ``trial_id``'s run and task: True for exactly one caller.

        A ``creating`` lease left by a process that died half-way is taken over after
        ``stale_after_s``.
        """
        try:
            with self.engine.begin() as conn:
                conn.execute(LEASES.insert().values(
                    trial_id=trial_id, study=study, attempt=1, state="creating", owner=owner, queue=queue,
                    updated_s=now_s))
            return True
        except IntegrityError:
            pass
        return self._cas(
            sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.state == "creating",
                    LEASES.c.updated_s < now_s - stale_after_s),
            owner=owner, updated_s=now_s)

    def mark_queued(self, trial_id: str, *, run_id: str, owner: str, now_s: float) -> bool:
        """``creating → queued`` once the run exists and the task is about to be sent."""
        return self._cas(
            sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.state == "creating", LEASES.c.owner == owner),
            state="queued", run_id=run_id, owner=None, sent_s=now_s, updated_s=now_s)

    def claim(self, trial_id: str, attempt: int, *, owner: str, worker: str, now_s: float) -> bool:
        """``queued → running`` for ``attempt`` only: True when this task may train."""
        return self._cas(
            sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.attempt == attempt, LEASES.c.state == "queued"),
            state="running", owner=owner, worker=worker, heartbeat_s=now_s, updated_s=now_s)

    def take_over(self, trial_id: str, attempt: int, *, dead_owner: str, owner: str, worker: str,
                  now_s: float) -> bool:
        """``running (dead owner) → running (owner)`` as ``attempt + 1`` (a redelivered task)."""
        return self._cas(
            sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.attempt == attempt, LEASES.c.state == "running",
                    LEASES.c.owner == dead_owner),
            attempt=attempt + 1, owner=owner, worker=worker, heartbeat_s=now_s, updated_s=now_s, **_lost_values())

    def _lost(self, trial_id: str, attempt: int, stale_before_s: float, dead_owner: str | None):
        """A running lease of ``attempt`` whose heartbeat is older than ``stale_before_s`` or whose
        holder is ``dead_owner`` (a process known dead): re-checked inside the write itself."""
        gone = LEASES.c.heartbeat_s < stale_before_s
        if dead_owner is not None:
            gone = sa.or_(gone, LEASES.c.owner == dead_owner)
        return sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.attempt == attempt, LEASES.c.state == "running", gone)

    def requeue(self, trial_id: str, attempt: int, *, now_s: float, stale_before_s: float,
                dead_owner: str | None = None) -> bool:
        """``running → queued`` as ``attempt + 1``: the trial was lost (and still is, as written)."""
        return self._cas(self._lost(trial_id, attempt, stale_before_s, dead_owner),
                         attempt=attempt + 1, state="queued", owner=None, worker=None, sent_s=now_s, updated_s=now_s,
                         **_lost_values())

    def fail_lost(self, trial_id: str, attempt: int, *, now_s: float, stale_before_s: float,
                  dead_owner: str | None = None, outcome: str = "failed") -> bool:
        """``running → done`` (``outcome``): lost at the attempt cap, or lost after a cancel."""
        return self._cas(self._lost(trial_id, attempt, stale_before_s, dead_owner),
                         state="done", outcome=outcome, updated_s=now_s)

    def beat(self, trial_id: str, attempt: int, owner: str, now_s: float,
             checkpoint_step: int | None = None) -> tuple[bool, str | None]:
        """Stamp the heartbeat (and the furthest checkpoint the holder saved, if given); returns
        (still held by ``owner``, stop reason or None)."""
        values: dict = {"heartbeat_s": now_s}
        if checkpoint_step is not None:  # only ever forward
            c = LEASES.c
            values["checkpoint_step"] = sa.case(
                (sa.or_(c.checkpoint_step.is_(None), c.checkpoint_step < checkpoint_step), checkpoint_step),
                else_=c.checkpoint_step)
        held = self._cas(
            sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.attempt == attempt, LEASES.c.state == "running",
                    LEASES.c.owner == owner),
            **values)
        lease = self.lease(trial_id)
        return held, (lease.stop_reason if lease is not None else None)

    def finish(self, trial_id: str, attempt: int, *, owner: str | None, outcome: str, now_s: float) -> bool:
        """End the lease with ``outcome``; only the holder of ``attempt`` (or anyone, owner=None)."""
        cond = sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.attempt == attempt, LEASES.c.state != "done")
        if owner is not None:
            cond = sa.and_(cond, LEASES.c.owner == owner)
        return self._cas(cond, state="done", outcome=outcome, updated_s=now_s)

    def release(self, trial_id: str, attempt: int, *, owner: str, now_s: float) -> bool:
        """``running → queued`` with the *same* attempt: the holder stopped at a checkpoint because
        its worker is shutting down (not a loss: it does not count towards the attempt cap)."""
        return self._cas(
            sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.attempt == attempt, LEASES.c.state == "running",
                    LEASES.c.owner == owner),
            state="queued", owner=None, worker=None, stop_reason=None, sent_s=now_s, updated_s=now_s)

    def give_back(self, trial_id: str, attempt: int, *, owner: str, now_s: float) -> bool:
        """The holder of ``attempt`` gives it back without spending it (an outage, a full disk, a
        shutdown): ``release``; or, where the runner took it for lost while the holder was cut off
        from the ledger (``requeue`` made it ``attempt + 1`` and nobody has claimed that yet), that
        requeue undone, so the outage costs no attempt. False when a newer attempt runs or the
        trial ended."""
        if self.release(trial_id, attempt, owner=owner, now_s=now_s):
            return True
        c = LEASES.c
        return self._cas(sa.and_(c.trial_id == trial_id, c.attempt == attempt + 1, c.state == "queued"),
                         attempt=attempt, strikes=c.strikes - c.last_strike, last_strike=0,
                         sent_s=now_s, updated_s=now_s)

    def interrupt_worker(self, worker: str, reason: str = INTERRUPTED) -> int:
        """Ask every trial running on ``worker`` to stop at a checkpoint; returns how many."""
        with self.engine.begin() as conn:
            return conn.execute(LEASES.update().where(
                LEASES.c.worker == worker, LEASES.c.state == "running", LEASES.c.stop_reason.is_(None)
            ).values(stop_reason=reason)).rowcount

    def end_queued(self, trial_id: str, *, outcome: str, now_s: float) -> bool:
        """``queued/creating → done`` (cancel before it ran)."""
        return self._cas(sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.state.in_(("queued", "creating"))),
                         state="done", outcome=outcome, updated_s=now_s)

    def request_stop(self, trial_id: str, reason: str) -> bool:
        """Ask the holder to stop (it polls with its heartbeat); first reason wins."""
        return self._cas(sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.state != "done",
                                 LEASES.c.stop_reason.is_(None)), stop_reason=reason)

    def mark_sent(self, trial_id: str, attempt: int, now_s: float) -> bool:
        return self._cas(sa.and_(LEASES.c.trial_id == trial_id, LEASES.c.attempt == attempt,
                                 LEASES.c.state == "queued"), sent_s=now_s)

    def _cas(self, where, **values) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(LEASES.update().where(where).values(**values)).rowcount == 1

    # ------------------------------------------------------------------ workers
    def worker_beat(self, row: WorkerRow) -> None:
        values = {k: getattr(row, k) for k in WorkerRow.__dataclass_fields__}
        with self.engine.begin() as conn:
            n = conn.execute(WORKERS.update().where(WORKERS.c.nodename == row.nodename).values(**values)).rowcount
            if n == 0:
                conn.execute(WORKERS.insert().values(**values))

    def worker_gone(self, nodename: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(WORKERS.delete().where(WORKERS.c.nodename == nodename))

    def workers(self, *, now_s: float, stale_after_s: float) -> list[WorkerRow]:
        """Workers whose heartbeat is fresh (and whose process is not known dead)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(WORKERS).where(WORKERS.c.heartbeat_s >= now_s - stale_after_s)
                                .order_by(WORKERS.c.nodename)).mappings().all()
        out = [WorkerRow(**r) for r in rows]
        return [w for w in out if not owner_is_dead(f"{w.hostname}:{w.pid}")]

    def running_on(self, worker: str) -> list[Lease]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(LEASES).where(LEASES.c.worker == worker, LEASES.c.state == "running")
                                ).mappings().all()
        return [Lease(**r) for r in rows]

    # ------------------------------------------------------------------ study stores
    def store_pin(self, study: str) -> StorePin | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(STORES).where(STORES.c.study == study)).mappings().first()
        return None if row is None else StorePin(**row)

    def pin_store(self, study: str, *, path: str, digest: str, host: str, now_s: float) -> StorePin:
        """Pin ``study``'s token store unless one is pinned already; returns the pin that holds
        (this one for exactly one caller, the first one's for everyone else)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(STORES.insert().values(study=study, path=path, digest=digest, host=host,
                                                    pinned_s=now_s))
        except IntegrityError:
            pass
        return self.store_pin(study)

    # ------------------------------------------------------------------ the read model of ended trials
    def keep_result(self, row: TrialResultRow) -> None:
        """Keep (or replace) an ended trial's row of the read model (a row another process kept at
        the same moment, from the same ended run, stands)."""
        values = {k: getattr(row, k) for k in TrialResultRow.__dataclass_fields__}
        try:
            with self.engine.begin() as conn:
                conn.execute(RESULTS.delete().where(RESULTS.c.trial_id == row.trial_id))
                conn.execute(RESULTS.insert().values(**values))
        except IntegrityError:
            pass

    def results(self, study: str) -> dict[str, TrialResultRow]:
        """The read model's rows of ``study`` by trial id (stale ones included: the reader checks)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(RESULTS).where(RESULTS.c.study == study)).mappings().all()
        return {r["trial_id"]: TrialResultRow(**r) for r in rows}

    def kept_fit(self, study: str, key: str) -> bytes | None:
        """The fit kept for ``study`` under ``key`` (:func:`workers.studies.read_model.kept_fit`)."""
        with self.engine.connect() as conn:
            return conn.execute(sa.select(FITS.c.fit).where(FITS.c.study == study, FITS.c.key == key)).scalar()

    def keep_fit(self, study: str, key: str, fit: bytes, *, now_s: float, most: int) -> None:
        """Keep a fit of ``study``; only its ``most`` newest stay (one kept by another process at the
        same moment, of the same table, stands)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(FITS.delete().where(FITS.c.study == study, FITS.c.key == key))
                conn.execute(FITS.insert().values(study=study, key=key, kept_s=now_s, fit=fit))
                old = conn.execute(sa.select(FITS.c.key).where(FITS.c.study == study)
                                   .order_by(FITS.c.kept_s.desc()).offset(most)).scalars().all()
                if old:
                    conn.execute(FITS.delete().where(FITS.c.study == study, FITS.c.key.in_(old)))
        except IntegrityError:
            pass

    # ------------------------------------------------------------------ deleting a study
    def forget_study(self, study: str) -> int:
        """Delete ``study``'s leases (with their outcomes and read-model rows) and its pinned token
        store; returns the leases deleted. For deleting a study (:mod:`workers.studies.delete`), never
        for ending one: a lease is how the runner knows a trial ran. Idempotent."""
        with self.engine.begin() as conn:
            n = conn.execute(LEASES.delete().where(LEASES.c.study == study)).rowcount
            conn.execute(RESULTS.delete().where(RESULTS.c.study == study))
            conn.execute(FITS.delete().where(FITS.c.study == study))
            conn.execute(STORES.delete().where(STORES.c.study == study))
        return n

    def forget_lock(self, study: str) -> None:
        """Delete ``study``'s advance lock row (the last trace of a deleted study here)."""
        with self.engine.begin() as conn:
            conn.execute(LOCKS.delete().where(LOCKS.c.study == study))

    # ------------------------------------------------------------------ study locks
    def try_lock(self, study: str, owner: str, *, now_s: float, ttl_s: float) -> bool:
        """Hold ``study``'s advance lock for ``ttl_s`` (re-entrant for ``owner``); False if busy.

        A caller that finds it busy marks the study dirty, so the holder advances once more.
        """
        with self.engine.begin() as conn:
            n = conn.execute(LOCKS.update().where(
                LOCKS.c.study == study, sa.or_(LOCKS.c.until_s < now_s, LOCKS.c.owner == owner)
            ).values(owner=owner, until_s=now_s + ttl_s, dirty=0)).rowcount
        if n == 1:
            return True
        try:
            with self.engine.begin() as conn:
                conn.execute(LOCKS.insert().values(study=study, owner=owner, until_s=now_s + ttl_s, dirty=0))
            return True
        except IntegrityError:
            with self.engine.begin() as conn:
                conn.execute(LOCKS.update().where(LOCKS.c.study == study).values(dirty=1))
            return False

    def renew_lock(self, study: str, owner: str, *, now_s: float, ttl_s: float) -> bool:
        """Extend ``owner``'s hold on ``study``'s lock to ``now_s + ttl_s``; False if it lost it."""
        with self.engine.begin() as conn:
            return conn.execute(LOCKS.update().where(LOCKS.c.study == study, LOCKS.c.owner == owner)
                                .values(until_s=now_s + ttl_s)).rowcount == 1

    def unlock(self, study: str, owner: str) -> bool:
        """Release the lock unless another pass was asked for meanwhile.

        Returns True when released; False when the study is dirty: the caller still holds the
        lock and should advance once more (``try_lock`` again clears the flag).
        """
        with self.engine.begin() as conn:
            n = conn.execute(LOCKS.update().where(LOCKS.c.study == study, LOCKS.c.owner == owner,
                                                  LOCKS.c.dirty == 0)
                             .values(owner=None, until_s=0.0)).rowcount
        return n == 1


