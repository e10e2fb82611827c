"""Group commit for intake: one writer thread stores the deliveries of concurrent requests together.

Each verified webhook becomes an ``Incoming``; the request awaits its future. The writer
thread takes everything queued (up to ``MAX_BATCH``), routes each delivery, writes all
of them (deliveries, outbox rows, rejected-request records) in ONE transaction, and
only after that commit resolves each request's future: nothing is acknowledged before
it is durable, and a burst of N webhooks costs one commit (one fsync on PostgreSQL)
instead of N. The queue is then woken once per batch.

A redelivered ``X-GitHub-Delivery`` (already stored, or twice in one batch) is answered
``duplicate`` via ``INSERT ... ON CONFLICT DO NOTHING`` (safe with several relay
processes on one PostgreSQL). A batch whose data one row spoils (an integrity or data
error) is retried row by row so one bad delivery never fails the others; an
unreachable database fails the whole batch (each request answers 503).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError

from crcr.errors import ConfigError
from crcr.logs import log_context
from crcr.store.deliveries import AWAITING, Delivery, Dispatch, RejectedDelivery
from relay.events import EventInfo, describe, route
from relay.rows import delivery_row, dispatch_rows
from relay.runtime import Runtime

log = logging.getLogger("crcr.relay.intake")

MAX_BATCH = 128
REJECTED_KEEP = 1000  # rejected-request rows kept (the newest)


@dataclass
class Incoming:
    """A verified webhook waiting to be stored."""

    delivery_id: str
    event: str
    body: bytes
    payload: dict[str, Any]  # what routing reads (relay.events.routing_view), or the whole payload


@dataclass
class Rejected:
    """A refused request to record (bounded by the caller's rate limit)."""

    delivery_id: str | None
    event: str | None
    status_code: int
    reason: str
    count: int = 1


@dataclass
class Stored:
    """What happened to one ``Incoming``; the intake turns it into the HTTP answer."""

    delivery_id: str
    event: str
    info: EventInfo
    duplicate: bool = False
    dispatch_ids: list[int] = field(default_factory=list)
    reason: str | None = None
    hook: dict[str, Any] | None = None  # what a check-run hook did (a re-run), if anything
    held: int = 0  # targets stored as awaiting approval (trust gating, relay/approval.py)


@dataclass
class _Planned:
    item: Incoming
    info: EventInfo
    delivery: dict[str, Any]
    rows: list[dict[str, Any]]
    reason: str | None


@dataclass
class _Job:
    item: Incoming | Rejected
    loop: asyncio.AbstractEventLoop | None
    future: asyncio.Future | None


def plan(runtime: Runtime, item: Incoming, now: dt.datetime, allowlist: Any = None) -> _Planned:
    """Route one delivery and build its rows (raises ConfigError when the allowlist is unreadable).

    ``allowlist``: the batch's copy (read once per batch: a file allowlist is checked for
    changes on every read); read here when not given.
    """
    event, delivery_id = item.event, item.delivery_id
    # Outside the try below: without an allowlist the targets are unknown, and recording
    # the delivery as ignored would lose it. The request answers 503 (GitHub can redeliver).
    if event == "ping":
        allowlist = None
    elif allowlist is None:
        allowlist = runtime.allowlist.get()
    try:
        info = describe(event, item.payload)
        if allowlist is None:
            targets, reason, result = [], "ping", None
        else:
            result = route(info, allowlist, upstream_repo=runtime.settings.upstream_repo)
            targets, reason = result.targets, result.ignored_reason
    except Exception as exc:  # an untrusted payload shape crcr did not foresee: record, don't 5xx
        log.exception("could not read delivery %s", delivery_id)
        info = EventInfo(event=event)
        targets, reason, result = [], f"could not be processed: {type(exc).__name__}", None
    if result is not None and result.skipped and targets:
        reason = f"not sent to {', '.join(result.skipped)}: untrusted author"
    delivery = delivery_row(delivery_id, event, info, payload=item.body.decode("utf-8", "replace"),
                            payload_bytes=len(item.body), now=now, targets=targets, reason=reason)
    rows = dispatch_rows(delivery_id, event, targets, now)
    # targets held back by trust gating are stored as awaiting approval, never dropped (relay/approval.py)
    held = [allowlist.targets[r] for r in result.skipped if r in allowlist.targets] \
        if result is not None and allowlist is not None else []
    if held:
        rows += [{**r, "state": AWAITING} for r in dispatch_rows(delivery_id, event, held, now)]
        if not targets:
            delivery["status"] = "held"
    return _Planned(item, info, delivery, rows, reason)


class _DriverInserts:
    """The batch writer's two INSERTs run on the DBAPI cursor, their SQL built once per row count.

    Through SQLAlchemy Core each batch paid statement compilation lookups and a bind
    processor per value; measured in the server under wrk that write cost ~0.27 ms CPU
    per delivery where SQLite itself needs ~0.06. The values are converted here exactly
    as the column types' own bind processors convert them (fetched once), one call per
    distinct value of the batch's shared timestamp. Driver errors are re-raised as
    SQLAlchemy's (IntegrityError, DataError, OperationalError), so the batch retry and
    the 503 answers are unchanged.
    """

    CHUNK = 500  # rows per statement: bound parameters stay far below SQLite's and PostgreSQL's limits

    def __init__(self, dialect: Any) -> None:
        self.dialect = dialect
        self.placeholder = "?" if dialect.paramstyle == "qmark" else "%s"
        self._sql: dict[tuple[str, int], str] = {}
        self._procs: dict[tuple[str, str], Any] = {}

    def _proc(self, table: Any, name: str) -> Any:
        key = (table.name, name)
        if key not in self._procs:
            self._procs[key] = table.c[name].type.dialect_impl(self.dialect).bind_processor(self.dialect)
        return self._procs[key]

    def _text(self, table: Any, names: list[str], n: int, tail: str) -> str:
        key = (table.name, n)
        text = self._sql.get(key)
        if text is None:
            one = "(" + ", ".join([self.placeholder] * len(names)) + ")"
            text = self._sql[key] = f"INSERT INTO {table.name} ({', '.join(names)}) VALUES {', '.join([one] * n)} {tail}"
        return text

    def insert(self, conn: Any, table: Any, rows: list[dict[str, Any]], tail: str) -> list[tuple[Any, ...]]:
        """Insert ``rows`` (dicts with the same keys, in the same order); returns the RETURNING rows."""
        names = list(rows[0])
        procs = [self._proc(table, n) for n in names]
        seen: dict[tuple[int, int], Any] = {}  # (column, id(value)) -> converted: the batch shares `now`

        def convert(i: int, value: Any) -> Any:
            proc = procs[i]
            if proc is None:
                return value
            key = (i, id(value))
            if key not in seen:
                seen[key] = (value, proc(value))
            return seen[key][1]

        out: list[tuple[Any, ...]] = []
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            for start in range(0, len(rows), self.CHUNK):
                chunk = rows[start:start + self.CHUNK]
                params = [convert(i, row[n]) for row in chunk for i, n in enumerate(names)]
                sql = self._text(table, names, len(chunk), tail)
                try:
                    cursor.execute(sql, params)
                    out.extend(cursor.fetchall())
                except self.dialect.loaded_dbapi.Error as exc:
                    raise DBAPIError.instance(sql, None, exc, self.dialect.loaded_dbapi.Error,
                                              dialect=self.dialect) from exc
        finally:
            cursor.close()
        return out


_INSERTS: dict[str, _DriverInserts] = {}


def _inserts(dialect: Any) -> _DriverInserts:
    found = _INSERTS.get(dialect.name)
    if found is None:
        found = _INSERTS[dialect.name] = _DriverInserts(dialect)
    return found


def write(runtime: Runtime, planned: list[_Planned], rejected: list[Rejected], now: dt.datetime) -> list[Stored]:
    """Store one batch in one transaction; returns one ``Stored`` per planned delivery, in order."""
    out = [Stored(p.item.delivery_id, p.item.event, p.info, reason=p.reason) for p in planned]
    first: dict[str, int] = {}
    for i, p in enumerate(planned):  # the same id twice in one batch: the first one is stored
        if p.item.delivery_id in first:
            out[i].duplicate = True
        else:
            first[p.item.delivery_id] = i
    inserts = _inserts(runtime.engine.dialect)
    with runtime.write_lock, runtime.engine.begin() as conn:
        inserted: set[str] = set()
        if first:
            # ON CONFLICT DO NOTHING: a redelivery (or its twin in another relay process) is not inserted
            # in id order: two writers' transactions lock the same ids in the same order (no deadlock)
            returned = inserts.insert(conn, Delivery.__table__, [planned[i].delivery for _, i in sorted(first.items())],
                                      "ON CONFLICT (id) DO NOTHING RETURNING id")
            inserted = {r[0] for r in returned}
        rows = [r for i in first.values() if planned[i].item.delivery_id in inserted for r in planned[i].rows]
        if rows:
            returned = inserts.insert(conn, Dispatch.__table__, rows, "RETURNING id, delivery_id, state")
            for row_id, delivery_id, state in returned:
                if state == AWAITING:  # held for approval: never enqueued
                    out[first[delivery_id]].held += 1
                else:
                    out[first[delivery_id]].dispatch_ids.append(row_id)
        if rejected:
            conn.execute(insert(RejectedDelivery), [
                {"delivery_id": r.delivery_id, "event": r.event, "status_code": r.status_code, "reason": r.reason,
                 "received_at": now, "count": r.count} for r in rejected])
            top = conn.execute(select(func.max(RejectedDelivery.id))).scalar_one()
            conn.execute(delete(RejectedDelivery).where(RejectedDelivery.id <= top - REJECTED_KEEP))
    for delivery_id, i in first.items():
        if delivery_id not in inserted:
            out[i].duplicate = True
    for s in out:
        s.dispatch_ids.sort()
    return out


class GroupWriter:
    """The writer of one app; ``await store(item)`` returns its ``Stored``.

    ``inline=False``: ``writers`` writer threads (PostgreSQL, whose commit waits on the
    network and the server's fsync: a commit of a 23 KB delivery took 5-10 ms here).
    Each thread takes everything queued when it is free, so while one batch waits for
    its commit the next batch is already being written, and the server flushes their
    commits together; with one thread, throughput was capped at one batch per fsync.
    Each batch is still one transaction, answered only after its commit. ``inline=True`` (SQLite with a local allowlist): the batch is
    written on the event loop itself, in a callback scheduled once per loop iteration,
    collecting every request that reached the store step in that iteration. A SQLite
    commit in WAL mode with ``synchronous=NORMAL`` and no checkpoint (see
    ``relay.wal_checkpoint``) is a write to the page cache, well under a millisecond per
    delivery, and a second thread would cost more: the interpreter lock is handed back
    and forth on every socket send and HMAC, and on a loaded machine each handoff can
    wait for the OS to schedule the other thread (profiled; see BENCHMARKS.md).
    """

    def __init__(self, runtime: Runtime, hooks: Any = None, wants_hook: Any = None, *, inline: bool = False,
                 writers: int = 1) -> None:
        self.runtime = runtime
        self.inline = inline
        self.writers = max(1, writers)
        self._pending: list[_Job] = []
        self._flush_scheduled = False
        self.hooks = hooks  # callable(runtime, Stored) -> dict | None, run after the commit
        self.wants_hook = wants_hook or (lambda stored: False)  # callable(Stored) -> bool
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._enqueuer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crcr-intake-enqueue")
        self.accepted_log = AcceptedLog()
        self.busy_meter = BusyMeter()
        self.batches = 0  # how many transactions were written (tests and benchmarks read it)

    def _ensure_started(self) -> None:
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            while len(self._threads) < self.writers:
                thread = threading.Thread(target=self._run, name=f"crcr-intake-writer-{len(self._threads)}",
                                          daemon=True)
                thread.start()
                self._threads.append(thread)

    async def store(self, item: Incoming) -> Stored:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Stored] = loop.create_future()
        self._submit(_Job(item, loop, future), loop)
        return await future

    def record_rejected(self, rejected: Rejected) -> None:
        """Queue a rejected-request record; written with the next batch, never awaited."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        self._submit(_Job(rejected, None, None), loop)

    def _submit(self, job: _Job, loop: asyncio.AbstractEventLoop | None) -> None:
        if self.inline and loop is not None:
            self._pending.append(job)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                loop.call_soon(self._flush)
            return
        self._ensure_started()
        self._queue.put(job)

    def _flush(self) -> None:
        """Write what the requests of this loop iteration queued (inline mode)."""
        self._flush_scheduled = False
        while self._pending:
            jobs, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            self._process_safely(jobs)

    def _process_safely(self, jobs: list[_Job]) -> None:
        try:
            self._process(jobs)
        except BaseException as exc:  # never leave a request waiting forever
            log.exception("intake writer failed")
            _resolve_all([(j, None, exc) for j in jobs])

    def stop(self, timeout: float = 10.0) -> None:
        if self._pending:  # inline mode: records queued after the last loop iteration
            self._flush()
        with self._lock:
            threads = [t for t in self._threads if t.is_alive()]
        for _ in threads:  # one stop mark per writer thread
            self._queue.put(None)
        for thread in threads:
            thread.join(timeout)
        self._enqueuer.shutdown(wait=True)
        self.accepted_log.flush()  # what the last interval accepted

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs = [job]
            stop = False
            while len(jobs) < MAX_BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                jobs.append(more)
            self._process_safely(jobs)
            if stop:
                return

    def _process(self, jobs: list[_Job]) -> None:
        runtime = self.runtime
        now = runtime.clock()
        planned: list[tuple[_Job, _Planned]] = []
        rejected = [j.item for j in jobs if isinstance(j.item, Rejected)]
        allowlist: Any = None
        unreadable: ConfigError | None = None
        if any(isinstance(j.item, Incoming) and j.item.event != "ping" for j in jobs):
            try:  # once per batch, not per delivery
                allowlist = runtime.allowlist.get()
            except ConfigError as exc:
                unreadable = exc
        for j in jobs:
            if isinstance(j.item, Incoming):
                try:
                    if unreadable is not None and j.item.event != "ping":
                        raise unreadable
                    planned.append((j, plan(runtime, j.item, now, allowlist)))
                except ConfigError as exc:
                    _resolve(j, exc=exc)
        try:
            stored = write(runtime, [p for _, p in planned], rejected, now)
            self.batches += 1
        except (IntegrityError, DataError):
            if len(planned) + len(rejected) == 1:
                raise
            # one row spoils the batch: write each alone so the others are stored
            stored = []
            for _, p in planned:
                try:
                    stored.extend(write(runtime, [p], [], now))
                except Exception as exc:
                    stored.append(exc)  # type: ignore[arg-type]
            if rejected:
                try:
                    write(runtime, [], rejected, now)
                except Exception:
                    log.warning("could not record %d rejected request(s)", len(rejected), exc_info=True)
            self.batches += 1
        except Exception as exc:  # storage down: every request of the batch answers 503
            _resolve_all([(j, None, exc) for j, _ in planned])
            return
        # stored: from here on nothing may turn an answer into an error. Answer first (the
        # queue only wakes workers; the sweeper covers an enqueue that never happens)
        self.runtime.metrics.intake_batch.observe(len(planned))
        if self.busy_meter.add(len(planned)):
            runtime.wakeup.busy()  # a burst: the dispatch worker yields to intake for a moment
        later = []
        now_settled = []
        for (j, _), s in zip(planned, stored, strict=True):
            if isinstance(s, Stored) and not s.duplicate and self.wants_hook(s):
                later.append((j, s))
            elif isinstance(s, Stored):
                now_settled.append((j, s, None))
            else:
                now_settled.append((j, None, s))
        _resolve_all(now_settled)
        ids = [i for s in stored if isinstance(s, Stored) for i in s.dispatch_ids]
        if ids:
            self.accepted_log.add([s for s in stored if isinstance(s, Stored) and s.dispatch_ids and not s.duplicate])
        if ids and runtime.tasks is not None and self.inline:
            _enqueue(runtime, ids)  # one enqueue transaction and one wake-up per batch
        elif ids and runtime.tasks is not None:
            # on another thread: the queue's own commit must not delay the next batch's
            try:
                self._enqueuer.submit(_enqueue, runtime, ids)
            except RuntimeError:  # shut down (the app is stopping): enqueue here
                _enqueue(runtime, ids)
        for j, s in later:  # check-run hooks (a label, a re-run): their result is part of the answer
            with log_context(delivery_id=s.delivery_id, repo=s.info.repo, pr=s.info.pr_number):
                try:
                    s.hook = self.hooks(runtime, s)
                except Exception:
                    log.exception("post-store step failed for %s; the delivery is stored", s.delivery_id)
            _resolve(j, result=s)


class BusyMeter:
    """Whether intake is busy: ``threshold`` deliveries or more stored within ``window_s``.

    While it is, the dispatch worker holds back (``crcr.queue.IntakeHold``): at the
    default, 100 deliveries a second, which a normal day's webhooks never reach.
    """

    def __init__(self, threshold: int = 10, window_s: float = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold, self.window_s, self.clock = threshold, window_s, clock
        self.start, self.count = -window_s, 0

    def add(self, n: int) -> bool:
        now = self.clock()
        if now - self.start > self.window_s:
            self.start, self.count = now, 0
        self.count += n
        return self.count >= self.threshold


class AcceptedLog:
    """Dispatched deliveries logged in one INFO line at most every ``every_s`` seconds.

    A line per delivery cost 6-15 % of the event loop's time under load (formatting,
    the context filter, and a write to stderr that blocks the loop when the log pipe
    is full). The first delivery after a quiet spell is logged at once (with its id);
    under load one line sums up the interval (how many, their dispatch rows, the
    first and last ids). ``crcr deliveries list`` shows every delivery, each delivery
    has a DEBUG line, and ignored, held, duplicate and rejected deliveries keep an
    INFO line of their own.
    """

    IDS = 5  # ids named in a line; more are counted

    def __init__(self, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.clock = every_s, clock
        self.at = -every_s
        self.count = self.rows = 0
        self.ids: list[str] = []
        self.last: str | None = None
        self._lock = threading.Lock()  # several writer threads add

    def add(self, accepted: list[Stored]) -> None:
        if not accepted:
            return
        with self._lock:
            self._add(accepted)

    def _add(self, accepted: list[Stored]) -> None:
        self.count += len(accepted)
        self.rows += sum(len(s.dispatch_ids) for s in accepted)
        room = self.IDS - len(self.ids)
        if room > 0:
            self.ids += [f"{s.delivery_id} ({s.event}.{s.info.action})" for s in accepted[:room]]
        self.last = accepted[-1].delivery_id
        if self.clock() - self.at >= self.every_s:
            self._flush()

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if self.count:
            more = self.count - len(self.ids)
            tail = f" and {more} more (the last {self.last})" if more > 0 else ""
            log.info("accepted %d deliver%s, %d dispatch row(s): %s%s", self.count,
                     "y" if self.count == 1 else "ies", self.rows, ", ".join(self.ids), tail)
        self.at = self.clock()
        self.count = self.rows = 0
        self.ids, self.last = [], None


def _enqueue(runtime: Runtime, ids: list[int]) -> None:
    try:
        runtime.tasks.enqueue_batch(ids)
    except Exception:  # enqueue_batch logs and never raises; this is belt and braces
        log.exception("enqueue failed; the sweeper will send the dispatches")


def _resolve(job: _Job, *, result: Any = None, exc: BaseException | None = None) -> None:
    _resolve_all([(job, result, exc)])


def _resolve_all(settled: list[tuple[_Job, Any, BaseException | None]]) -> None:
    """Settle the futures of a batch with ONE wake-up of each event loop (not one per request)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job, Any, BaseException | None]]] = {}
    for job, result, exc in settled:
        if job.future is not None and job.loop is not None:
            by_loop.setdefault(job.loop, []).append((job, result, exc))

    def settle(items: list[tuple[_Job, Any, BaseException | None]]) -> None:
        for job, result, exc in items:
            if job.future.done():  # the request was cancelled (client went away)
                continue
            if exc is not None:
                job.future.set_exception(exc)
            else:
                job.future.set_result(result)

    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(settle, items)
        except RuntimeError:  # the loop is closed (shutdown)
            pass
