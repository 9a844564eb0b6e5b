"""The study's token store on this host: one store for every trial of a study, on every host.

With several hosts (docs/operating.md, "Scaling out") the stores live on a filesystem every host mounts:
``CBS_STORE_DIR`` (the store root: a store is ``<CBS_STORE_DIR>/<key>``), or a spec's
``data.store_dir`` inside a shared ``CBS_STORE_ROOTS`` folder. The first trial of a study that has
its store ready (prepared by it, or found up to date) pins the store's content digest in the
ledger (:meth:`workers.studies.ledger.Ledger.pin_store`). From then on no host prepares that study's
store again: before it trains, an attempt checks that the store is at its folder on this host,
holds the pinned digest, and is one :func:`cbscore.data.prepare` reuses untouched. A host that
cannot see the store (a mount missing: an empty local folder where the shared one should be), or
whose copy differs (another digest, another version of the corpus) raises
:class:`StoreUnavailable`, naming the path and the setting to fix, instead of building a store of
its own (a resumed trial would silently change data; a second store would mean two studies in one).

That is a fault of the host, not of the trial: the attempt is given back (it costs no attempt and
does not count against ``CBS_MAX_GIVE_BACKS``), and the host's slot is held for the give-back's
wait (:func:`hold_slot`), so the trial goes to a host that can see the store instead of bouncing
on this one (:meth:`workers.trials.trial.Attempt.give_back`).
"""

from __future__ import annotations

import signal
import threading
import time

from cbscore.data import DataConfig
from cbscore.errors import DataError
from workers.studies.ledger import Ledger, StorePin, host_id

#: How a give-back for a store this host cannot use begins (the trial's note; the Studies page's banner).
NO_STORE_PREFIX = "this host cannot use the token store"

#: How a give-back for a full disk (or another resource) begins (the trial's note; the Studies page's
#: banner). Here beside the other give-back note, so the pages read it without the trial loop.
OUT_OF_ROOM_PREFIX = "out of resources on this host"


class StoreUnavailable(DataError):
    """This host cannot train on the study's pinned token store (it is missing here or differs)."""


def ready_store(ledger: Ledger, study: str, data: DataConfig) -> StorePin:
    """Make sure this host trains ``study`` on its one store; returns the pin.

    Unpinned (the study's first trial to get here): prepare the store (build it, or reuse an up to
    date one, under the store's own lock) and pin it; a pin another host won meanwhile is checked
    like any other. Pinned: check, never prepare. Raises :class:`StoreUnavailable`.
    """
    from cbscore.data import prepare
    from cbscore.data.store import content_digest

    pin = ledger.store_pin(study)
    if pin is None:
        store = prepare(data)
        pin = ledger.pin_store(study, path=str(store.path), digest=content_digest(store.path), host=host_id(),
                               now_s=time.time())
    check_pinned(pin, data)
    return pin


def check_pinned(pin: StorePin, data: DataConfig) -> None:
    """The store at this host's folder for ``data`` is the pinned one and ready as it is."""
    from cbscore.data.store import DAMAGED, content_digest, prepare_command, reuse_problem

    path = data.store_path()
    problem = reuse_problem(data)
    if problem is None:
        digest = content_digest(path)
        if digest == pin.digest:
            return
        problem = f"it holds another store, {digest}"
    # A damaged copy (cut short, or content unlike its checksums) is rebuilt where it lies: prepare
    # builds the same content, so the same digest, from the same source on one host.
    fix = f"rebuild it with `{prepare_command(data)}`" if problem.startswith(DAMAGED) else _fix(data)
    # the path and the setting to fix first: the run's given_back tag keeps 250 characters
    raise StoreUnavailable(
        f"{NO_STORE_PREFIX} at {path}: {fix} ({problem}; study {pin.study} trains on "
        f"store {pin.digest}, prepared at {pin.path} by {_host(pin.host)}; this host prepares none of its own)")


def _host(host: str) -> str:
    return "this host" if host == host_id() else f"host {host.split('@')[0]}"


def _fix(data: DataConfig) -> str:
    if data.store_dir is None:
        return "set CBS_STORE_DIR to the shared folder of the stores, or mount it there"
    return "mount the shared folder of the spec's data.store_dir there (inside CBS_STORE_DIR or CBS_STORE_ROOTS)"


def hold_slot(seconds: float) -> None:
    """Keep this worker's slot busy for ``seconds`` after giving a trial back for its store.

    With late acks and a prefetch of one, a worker whose slots are all busy takes no message, so
    the trial given back waits in the queue for a host that can see the store (the next one free)
    instead of landing on this idle host again and again. SIGTERM to this process (a warm
    shutdown of the worker's group) ends the hold at once."""
    stop = threading.Event()
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if on_main else None
    try:
        stop.wait(seconds)
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, previous)
