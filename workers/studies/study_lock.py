"""The keeper of a study lock: renews the ledger's lock of one study while a runner pass holds it
(:mod:`workers.studies.runner`, :mod:`workers.studies.delete`)."""

from __future__ import annotations

import logging
import threading
import time

from workers.studies.ledger import Ledger

_log = logging.getLogger(__name__)


class LockKeeper:
    """Renews a study lock every ``ttl_s / 3`` while a pass runs, so a pass longer than the TTL
    (a slow MLflow, hundreds of trials to start) never lets a second runner in beside it."""

    def __init__(self, ledger: Ledger, study: str, owner: str, ttl_s: float):
        self.ledger, self.study, self.owner, self.ttl_s = ledger, study, owner, ttl_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cbs-study-lock", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.ledger.renew_lock(self.study, self.owner, now_s=time.time(), ttl_s=self.ttl_s)
            except Exception as exc:  # noqa: BLE001 - the database is briefly away: try again next period
                _log.warning(f"cbs runner: renewing the lock of {self.study} failed: {exc}")

    def __enter__(self) -> LockKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
