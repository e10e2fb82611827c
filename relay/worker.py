"""Worker tasks (registered by name on any Huey) and the sweeper.

``register_tasks(runtime)`` puts ``crcr.dispatch.send`` (one row) and
``crcr.dispatch.send_many`` (a delivery's rows, claimed together and sent
concurrently) on ``runtime.huey``; the API
process and ``crcr worker`` processes call it alike, so a task enqueued by one is run
by any. ``Sweeper`` is a thread that re-enqueues rows whose task was lost (a worker
SIGKILLed mid-attempt, a queue flushed, an enqueue that failed after commit).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from crcr.queue import enqueue_many, enqueue_many_async, queue_depth
from relay import checks, command_actions, dispatch
from relay.runtime import Runtime

log = logging.getLogger("crcr.relay.worker")

SEND_TASK = "crcr.dispatch.send"
SEND_MANY_TASK = "crcr.dispatch.send_many"  # several rows (a delivery's fan-out) in one task


class Tasks:
    """The tasks of one runtime; ``enqueue`` never raises (the sweeper is the safety net)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

        def send_dispatch(dispatch_id: int) -> str | None:
            outcome = dispatch.attempt(runtime, dispatch_id)
            if outcome is not None and outcome.state == dispatch.RETRYING and outcome.delay_s is not None:
                self.schedule(dispatch_id, outcome.delay_s)
            return outcome.state if outcome else None

        self.send = runtime.huey.task(name=SEND_TASK)(send_dispatch)

        def send_dispatches(dispatch_ids: list[int]) -> dict[int, str]:
            outcomes = dispatch.attempt_many(runtime, dispatch_ids, self.pool())
            for row_id, outcome in outcomes.items():  # failures retry row by row, as single tasks
                if outcome.state == dispatch.RETRYING and outcome.delay_s is not None:
                    self.schedule(row_id, outcome.delay_s)
            return {row_id: outcome.state for row_id, outcome in outcomes.items()}

        self.send_many = runtime.huey.task(name=SEND_MANY_TASK)(send_dispatches)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def pool(self) -> ThreadPoolExecutor:
        """The threads that send a batch's rows concurrently (``CRCR_WORKERS`` of them, shared)."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.runtime.settings.workers,
                                                thread_name_prefix="crcr-send")
            return self._pool

    def enqueue(self, ids: Iterable[int]) -> int:
        ids = list(ids)
        if not ids:
            return 0
        try:
            enqueue_many(self.runtime.huey, [self.send.s(i) for i in ids])
        except Exception:
            log.warning("could not enqueue dispatches %s; the sweeper will pick them up", ids, exc_info=True)
            return 0
        self.runtime.wakeup.notify(len(ids))
        return len(ids)

    def enqueue_batch(self, ids: Iterable[int]) -> int:
        """Enqueue rows (a delivery's fan-out) as batch tasks of up to ``CRCR_WORKERS`` rows each.

        One task claims its rows in one transaction and sends them concurrently; a
        single row goes as a plain per-row task. Never raises, like ``enqueue``.
        """
        ids = list(ids)
        if len(ids) <= 1:
            return self.enqueue(ids)
        tasks = self.batch_tasks(ids)
        try:
            enqueue_many(self.runtime.huey, tasks)
        except Exception:
            log.warning("could not enqueue dispatches %s; the sweeper will pick them up", ids, exc_info=True)
            return 0
        self.runtime.wakeup.notify(len(tasks))
        return len(ids)

    def batch_tasks(self, ids: list[int]) -> list[Any]:
        """The tasks ``enqueue_batch`` enqueues for ``ids``: one per row alone, else chunks of ``CRCR_WORKERS``."""
        if len(ids) <= 1:
            return [self.send.s(i) for i in ids]
        size = max(1, self.runtime.settings.workers)
        return [self.send_many.s(ids[i:i + size]) for i in range(0, len(ids), size)]

    async def enqueue_batch_async(self, ids: list[int], client: Any) -> int:
        """``enqueue_batch`` on a Redis queue from the event loop: one LPUSH through ``client`` (redis.asyncio).

        Never raises: a failed push is logged and the sweeper sends the rows (they are
        stored as pending; the queue only wakes workers sooner).
        """
        tasks = self.batch_tasks(ids)
        try:
            await enqueue_many_async(self.runtime.huey, tasks, client)
        except Exception:
            log.warning("could not enqueue dispatches %s; the sweeper will pick them up", ids, exc_info=True)
            return 0
        self.runtime.wakeup.notify(len(tasks))
        return len(ids)

    def schedule(self, dispatch_id: int, delay_s: float) -> None:
        try:
            self.send.schedule((dispatch_id,), delay=delay_s)
        except Exception:
            log.warning("could not schedule the retry of dispatch %s; the sweeper will", dispatch_id, exc_info=True)


def register_tasks(runtime: Runtime) -> Tasks:
    if runtime.tasks is None:
        runtime.tasks = Tasks(runtime)
        # PR comment commands and approval labels (crcr.commands.handle), on every consumer
        runtime.tasks.commands_task = command_actions.register(runtime)
    return runtime.tasks


def sweep_once(runtime: Runtime) -> int:
    """Re-enqueue open rows whose task was lost; returns how many.

    While the queue still holds tasks, a never-claimed overdue row is most likely just
    waiting its turn (re-enqueueing it under a backlog would pile up duplicate tasks),
    so only rows whose claim expired (their worker died mid-attempt) go back. Once the
    queue is empty, every overdue open row goes back: that also covers a task lost
    between dequeue and claim, and an enqueue that failed after the intake commit.
    """
    stale = dt.timedelta(seconds=runtime.settings.sweeper_stale_after_s)
    try:
        backlog = queue_depth(runtime.huey) > 0
    except Exception:  # queue unreachable: enqueueing would fail too; try next period
        log.warning("sweeper cannot read the queue depth", exc_info=True)
        return 0
    ids = dispatch.due_for_sweep(runtime, stale_after=stale, only_abandoned=backlog)
    if ids:
        dispatch.touch_for_requeue(runtime, ids)
        register_tasks(runtime).enqueue(ids)
        log.info("sweeper re-enqueued %d dispatch(es)", len(ids))
    return len(ids)


class Sweeper:
    """Runs ``sweep_once`` every ``interval_s`` in a daemon thread (enable in one process)."""

    def __init__(self, runtime: Runtime, interval_s: float | None = None) -> None:
        self.runtime = runtime
        self.interval_s = interval_s or runtime.settings.sweeper_interval_s
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="crcr-sweeper", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                sweep_once(self.runtime)
            except Exception:  # storage down: try again next period
                log.warning("sweep failed", exc_info=True)
            # check runs whose push to GitHub was lost (process died, GitHub refused)
            checks.sweep(self.runtime)
            try:  # /ci commands whose task was lost with its worker
                command_actions.sweep(self.runtime)
            except Exception:
                log.warning("command sweep failed", exc_info=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(5)
