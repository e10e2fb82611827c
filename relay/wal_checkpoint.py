"""SQLite WAL checkpoints off the intake path.

SQLite checkpoints the WAL into the database inside whichever COMMIT crosses
``wal_autocheckpoint`` pages, and a checkpoint fsyncs: on a busy disk that is tens of
milliseconds added to one intake transaction (with 23 KB payloads, every ~170
deliveries), which shows as p99. The API process therefore turns automatic
checkpoints off on its own connections and runs a PASSIVE checkpoint (it never blocks
writers or readers) from this thread every ``interval_s``. Durability is unchanged:
with ``synchronous=NORMAL`` a committed transaction is in the WAL either way. Other
processes (``crcr worker``, the CLI) keep SQLite's automatic checkpoints.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Engine

log = logging.getLogger("crcr.relay")


def _no_autocheckpoint(dbapi_connection: Any, _record: Any) -> None:
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA wal_autocheckpoint=0")
    cur.close()


class Checkpointer:
    """Checkpoints ``engine``'s SQLite WAL in a daemon thread (a no-op for other databases)."""

    def __init__(self, engine: Engine, interval_s: float = 1.0) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.enabled = engine.dialect.name == "sqlite"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="crcr-wal-checkpoint", daemon=True)
        if self.enabled:
            event.listen(engine, "connect", _no_autocheckpoint)

    def start(self) -> None:
        if self.enabled:
            self._thread.start()

    def checkpoint(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("PRAGMA wal_checkpoint(PASSIVE)"))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.checkpoint()
            except Exception:  # storage trouble: intake reports it; try again next period
                log.debug("WAL checkpoint failed", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        if self.enabled:
            try:
                self.checkpoint()  # leave a small WAL behind
            except Exception:
                log.debug("final WAL checkpoint failed", exc_info=True)
