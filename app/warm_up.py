"""The web process imports the workers' stack as its server starts, in a background thread.

The first click that launches a study (or is refused at launch) used to wait for what the launch
imports and opens first: the runner with MLflow, Optuna, SQLAlchemy and Celery, and the tracking
store (created on a fresh lab). That took 6-7.7 s on a loaded two-core host, against the 1 s in
which every refusal should arrive. :func:`start` runs :func:`workers.query.api.warm_up`
in a daemon thread from the server's lifespan (``app/server.py``), so a few seconds after
``cbs web`` starts the first click finds everything imported; the log says when
(:data:`WARM_LINE`). A click before then imports the rest itself, as it did before (Python's
import lock makes the two wait for each other, never import twice).
"""

from __future__ import annotations

import gc
import sys
import threading
import time

from cbscore.errors import clipped, masked

#: How the log line that says the stack is imported begins (the live tests wait for it).
WARM_LINE = "cbs web: warm"
#: ... and the one that says a store did not answer (one line; the URL's password masked).
STOPPED_LINE = "cbs web: the warm-up stopped"


def warm() -> float:
    """Import the workers' stack and open the stores (:func:`workers.query.api.warm_up`); the
    seconds it took. A store that does not answer is said in the log, password masked, and left
    to the page that needs it (which says so too)."""
    from app import sources

    started = time.perf_counter()
    try:
        sources.warm_up()
    except Exception as exc:  # a store down at start: the pages show the outage; the log says it once
        reason = " ".join(masked(clipped(f"{type(exc).__name__}: {exc}")).split())  # one line
        print(f"{STOPPED_LINE} after {time.perf_counter() - started:.1f} s ({reason}); the first page that "
              "needs the workers' stack imports the rest", file=sys.stderr, flush=True)
        return time.perf_counter() - started
    settle()
    took = time.perf_counter() - started
    print(f"{WARM_LINE}: the workers' stack imported and the stores opened in {took:.1f} s", flush=True)
    return took


def settle() -> None:
    """Take what the imports left out of the garbage collector's walks (``gc.freeze``, after one
    collection): the stack is hundreds of thousands of objects that live as long as the process,
    and every full collection walked them all, a pause of a good part of a page's render landing on
    whichever visit crossed the collector's threshold."""
    gc.collect()
    gc.freeze()


def start() -> threading.Thread:
    """Run :func:`warm` in a daemon thread (it never holds the server's start or its exit)."""
    thread = threading.Thread(target=warm, name="cbs-warm-up", daemon=True)
    thread.start()
    return thread
