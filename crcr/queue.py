"""The task queue (Huey): SqliteHuey in the data dir by default, RedisHuey for ``redis://``.

The queue only wakes workers; the database rows are the truth (a task taken by a
worker that is SIGKILLed is gone: dequeue deletes it, so only rows still pending or claimed can be recovered). Tasks are registered by
name on whatever ``Huey`` instance a process builds, so producer and consumer agree
on the task key without sharing a module-level instance.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

from huey import Huey, RedisHuey, SqliteHuey
from huey.consumer import Consumer, Worker
from huey.storage import SqliteStorage

from crcr.errors import ConfigError, MissingExtraError

log = logging.getLogger("crcr.queue")


class _SqliteQueueStorage(SqliteStorage):
    """Huey's SQLite storage with ``synchronous=NORMAL`` (WAL): no fsync per enqueue/dequeue.

    Huey offers only FULL (an fsync on every commit: tens of ms per task on a busy disk,
    which serializes a 32-target fan-out) or OFF. NORMAL survives a process crash and
    stays consistent after a power loss, possibly losing the last tasks, which is fine
    here: the queue only wakes workers and the sweeper re-enqueues from the rows.
    """

    def _create_connection(self) -> Any:
        conn = super()._create_connection()
        conn.execute("pragma synchronous=1")
        return conn


def enqueue_many(huey: Huey, tasks: list[Any]) -> None:
    """Enqueue ``tasks`` (from ``TaskWrapper.s(...)``) in one storage transaction where possible.

    A webhook fanning out to 32 targets otherwise pays 32 exclusive SQLite commits
    before its first dispatch can start. Redis (and immediate mode) go one by one.
    """
    storage = huey.storage
    if huey.immediate or not isinstance(storage, _SqliteQueueStorage):
        for task in tasks:
            huey.enqueue(task)
        return
    rows = [(storage.name, storage.to_blob(huey.serialize_task(t)), t.priority or 0) for t in tasks]
    with storage.db(commit=True) as curs:
        curs.executemany("insert into task (queue, data, priority) values (?, ?, ?)", rows)


def is_redis(huey: Huey) -> bool:
    """Whether ``huey`` queues in Redis (and is not in immediate mode)."""
    from huey.storage import RedisStorage

    return not huey.immediate and isinstance(huey.storage, RedisStorage)


async def enqueue_many_async(huey: Huey, tasks: list[Any], client: Any) -> None:
    """Enqueue ``tasks`` on a Redis queue in ONE ``LPUSH`` through ``client`` (a ``redis.asyncio.Redis``).

    What ``huey.enqueue`` stores, task after task (the first pushed is the first a
    worker pops), in one round trip on the caller's event loop instead of one blocking
    round trip per task on a thread.
    """
    if tasks:
        await client.lpush(huey.storage.queue_key, *[huey.serialize_task(t) for t in tasks])


def redis_queue_name(name: str) -> str:
    """The name handed to RedisHuey, distinct for every distinct ``CRCR_QUEUE_NAME``.

    Huey keeps only ``[A-Za-z0-9_]`` of a name in its Redis keys, so ``relay-a`` and
    ``relay.a`` would share one queue (each relay taking the other's tasks). A name
    with other characters gets a digest of the whole name appended; a plain name is
    used as it is (existing queues keep their keys).
    """
    if re.fullmatch(r"[A-Za-z0-9_]+", name):
        return name
    kept = re.sub(r"[^A-Za-z0-9_]", "", name)
    return f"{kept}_{hashlib.sha256(name.encode('utf-8')).hexdigest()[:16]}"


def make_huey(queue_url: str, *, name: str = "crcr", immediate: bool = False) -> Huey:
    """A Huey for ``queue_url`` (``sqlite:///path`` or ``redis://host:port/db``)."""
    if queue_url.startswith(("redis://", "rediss://", "unix://")):
        try:
            import redis  # noqa: F401
        except ImportError as exc:  # pragma: no cover - the extra is installed in CI
            raise MissingExtraError("redis", "redis", "a Redis queue") from exc
        return RedisHuey(redis_queue_name(name), url=queue_url, results=False, immediate=immediate)
    if queue_url.startswith("sqlite:///"):
        path = Path(queue_url[len("sqlite:///"):])
        if not immediate:
            path.parent.mkdir(parents=True, exist_ok=True)
        return SqliteHuey(name, filename=str(path), results=False, immediate=immediate,
                          storage_class=_SqliteQueueStorage)
    raise ConfigError(f"unsupported CRCR_QUEUE_URL {queue_url!r}",
                      hint="use redis://host:6379/0 or leave it unset for SQLite in the data dir")


class IntakeHold:
    """Workers yield to a busy intake: while it is busy, tasks start at most every ``every_s``.

    The API calls ``busy()`` while it is storing webhooks faster than ``relay.group_commit``'s
    threshold (hundreds a second: a burst or a redelivery flood, never a normal day's
    traffic). Sending is CPU work (and database writes) that competes with intake on a
    small machine; held back, the tasks wait in the queue (the rows are the truth) and
    are sent as soon as the burst ends. A trickle still flows (one task per ``every_s``
    across the pool), so a long burst never starves sending. When intake is not busy a
    worker never waits here.
    """

    def __init__(self, *, hold_s: float = 0.25, every_s: float = 0.5, clock: Any = time.monotonic) -> None:
        self.hold_s, self.every_s, self.clock = hold_s, every_s, clock
        self.until = 0.0  # intake is busy until then (monotonic)
        self.last_start = 0.0
        self._lock = threading.Lock()

    def busy(self) -> None:
        self.until = self.clock() + self.hold_s

    def may_start(self) -> bool:
        """Whether a worker may take a task now (and if so, counts the start)."""
        now = self.clock()
        with self._lock:
            if now >= self.until or now - self.last_start >= self.every_s:
                self.last_start = now
                return True
            return False


class Wakeup:
    """Lets a producer in the same process wake idle in-process workers at once.

    Huey's workers poll a SQLite queue with a growing sleep (up to ``max_delay``); an
    enqueue from this process notifies them instead, so a webhook's dispatches start
    within milliseconds. Tasks from other processes are still found by polling.
    ``busy()`` says intake is busy (see ``IntakeHold``).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.hold = IntakeHold()

    def busy(self) -> None:
        self.hold.busy()

    def notify(self, n: int = 1) -> None:
        with self._cond:
            self._cond.notify(n)

    def wait(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait(timeout)


def apply_wake_bytes(chunk: bytes, wakeup: Wakeup) -> None:
    """What ``crcr serve`` wrote to its worker child's stdin: ``b"w"`` wakes a worker, ``b"b"`` says intake is busy."""
    if b"b" in chunk:
        wakeup.busy()
    wakes = len(chunk) - chunk.count(b"b")
    if wakes:
        wakeup.notify(wakes)


class _WakeableWorker(Worker):
    wakeup: Wakeup

    def loop(self, now: Any = None) -> None:
        hold = self.wakeup.hold
        while not hold.may_start():  # intake is busy: leave the task in the queue for now
            if self.stop_flag.is_set():
                return
            time.sleep(0.02)
        super().loop(now)

    def sleep(self) -> None:
        if self.delay > self.max_delay:
            self.delay = self.max_delay
        if self.stop_flag.is_set():
            return
        if self.wakeup.wait(self.delay):
            self.delay = self.default_delay
        else:
            self.delay *= self.backoff


class WakeableConsumer(Consumer):
    """A consumer whose idle workers a ``Wakeup`` wakes at once (instead of their next poll)."""

    def __init__(self, huey: Huey, *, wakeup: Wakeup | None = None, **kwargs: object) -> None:
        if wakeup is not None:
            self.worker_class = type("WakeableWorker", (_WakeableWorker,), {"wakeup": wakeup})
        super().__init__(huey, **kwargs)


class InProcessConsumer(WakeableConsumer):
    """A consumer that can run in a non-main thread (signals belong to the host process)."""

    def _set_signal_handlers(self) -> None:
        pass


class ConsumerThread:
    """Runs an ``InProcessConsumer`` in a daemon thread; ``stop()`` waits for running tasks."""

    def __init__(self, huey: Huey, *, workers: int = 4, max_delay: float = 0.5, periodic: bool = False,
                 wakeup: Wakeup | None = None, shutdown_timeout_s: float = 10.0) -> None:
        # a shutdown waits this long for running tasks (a local target may run for minutes);
        # what is cut short keeps its row open and the sweeper sends it again later
        self.consumer = InProcessConsumer(huey, wakeup=wakeup, workers=workers, periodic=periodic,
                                          max_delay=max_delay, initial_delay=0.05, backoff=1.5,
                                          check_worker_health=True, shutdown_timeout=shutdown_timeout_s)
        self.thread = threading.Thread(target=self.consumer.run, name="crcr-consumer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        try:
            self.consumer.stop(graceful=True)
        except Exception:  # a consumer that never started has nothing to stop
            log.debug("consumer stop failed", exc_info=True)
        self.thread.join(timeout)


def queue_depth(huey: Huey) -> int:
    """Tasks waiting (raises when the queue's storage is unreachable)."""
    return int(huey.pending_count())
