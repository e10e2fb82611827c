"""The task queue (Huey): SqliteHuey in the data dir by default, RedisHuey for ``redis://``.

The queue only wakes workers; the database rows are the truth (a task taken by a
worker that is SIGKILLed is gone, see DEPENDENCY-NOTES.md). Tasks are registered by
name on whatever ``Huey`` instance a process builds, so producer and consumer agree
on the task key without sharing a module-level instance.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from huey import Huey, RedisHuey, SqliteHuey
from huey.consumer import Consumer

from crcr.errors import ConfigError, MissingExtraError

log = logging.getLogger("crcr.queue")


def make_huey(queue_url: str, *, name: str = "crcr", immediate: bool = False) -> Huey:
    """A Huey for ``queue_url`` (``sqlite:///path`` or ``redis://host:port/db``)."""
    if queue_url.startswith(("redis://", "rediss://", "unix://")):
        try:
            import redis  # noqa: F401
        except ImportError as exc:  # pragma: no cover - the extra is installed in CI
            raise MissingExtraError("redis", "redis", "a Redis queue") from exc
        return RedisHuey(name, url=queue_url, results=False, immediate=immediate)
    if queue_url.startswith("sqlite:///"):
        path = Path(queue_url[len("sqlite:///"):])
        if not immediate:
            path.parent.mkdir(parents=True, exist_ok=True)
        return SqliteHuey(name, filename=str(path), results=False, immediate=immediate)
    raise ConfigError(f"unsupported CRCR_QUEUE_URL {queue_url!r}",
                      hint="use redis://host:6379/0 or leave it unset for SQLite in the data dir")


class InProcessConsumer(Consumer):
    """A consumer that can run in a non-main thread (signals belong to the host process)."""

    def _set_signal_handlers(self) -> None:
        pass


class ConsumerThread:
    """Runs an ``InProcessConsumer`` in a daemon thread; ``stop()`` waits for running tasks."""

    def __init__(self, huey: Huey, *, workers: int = 4, max_delay: float = 0.5, periodic: bool = False) -> None:
        self.consumer = InProcessConsumer(huey, workers=workers, periodic=periodic, max_delay=max_delay,
                                          initial_delay=0.05, backoff=1.5, check_worker_health=True)
        self.thread = threading.Thread(target=self.consumer.run, name="crcr-consumer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        try:
            self.consumer.stop(graceful=True)
        except Exception:  # a consumer that never started has nothing to stop
            log.debug("consumer stop failed", exc_info=True)
        self.thread.join(timeout)


def queue_depth(huey: Huey) -> int:
    """Tasks waiting (raises when the queue's storage is unreachable)."""
    return int(huey.pending_count())
