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
import contextlib
import datetime as dt
import itertools
import logging
import operator
import queue
import re
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
from crcr.queue import is_redis
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
        self._getters: dict[tuple[str, tuple[str, ...]], Any] = {}

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

    def statements(self, table: Any, rows: list[dict[str, Any]], tail: str) -> list[tuple[str, list[Any]]]:
        """The INSERT statements (SQL, parameters) for ``rows`` (dicts with the same keys, in the same order)."""
        names = list(rows[0])
        params = self.params(table, rows)
        width = len(names)
        return [(self._text(table, names, len(chunk), tail), params[start * width:(start + len(chunk)) * width])
                for start in range(0, len(rows), self.CHUNK) for chunk in [rows[start:start + self.CHUNK]]]

    def params(self, table: Any, rows: list[dict[str, Any]]) -> list[Any]:
        """The rows' values, row after row, converted as the columns' own bind processors convert them."""
        names = tuple(rows[0])
        found = self._getters.get((table.name, names))
        if found is None:
            procs = [self._proc(table, n) for n in names]
            found = self._getters[(table.name, names)] = (
                operator.itemgetter(*names), [(i, p) for i, p in enumerate(procs) if p is not None])
        getter, converted = found
        if len(names) == 1:  # itemgetter of one name returns the value, not a tuple
            return [self._proc(table, names[0])(r[names[0]]) if converted else r[names[0]] for r in rows]
        if not converted:
            return [v for row in rows for v in getter(row)]
        seen: dict[tuple[int, int], Any] = {}  # (column, id(value)) -> converted: the batch shares `now`
        out: list[Any] = []
        for row in rows:
            values = list(getter(row))
            for i, proc in converted:  # only the columns whose type converts (dates, JSON)
                value = values[i]
                hit = seen.get((i, id(value)))
                if hit is None:
                    hit = seen[(i, id(value))] = (value, proc(value))  # the value kept: its id stays unique
                values[i] = hit[1]
            out += values
        return out

    MAX_PARAMS = 30_000  # one statement's bound parameters (PostgreSQL allows 65 535)

    def one_statement(self, deliveries: list[dict[str, Any]],
                      dispatches: list[dict[str, Any]]) -> tuple[str, list[Any]] | None:
        """Both INSERTs as ONE PostgreSQL statement, or None when the batch is too large for one.

        ``dispatches``: the rows of every delivery in ``deliveries``; only those whose
        delivery is inserted (not a redelivery: ON CONFLICT DO NOTHING) are inserted, in
        the order given. Returns rows ``(delivery id, None, None)`` for each inserted
        delivery and ``(delivery id, dispatch id, state)`` for each inserted dispatch.
        """
        names = list(deliveries[0])
        dnames = list(dispatches[0]) if dispatches else []
        if len(deliveries) * len(names) + len(dispatches) * len(dnames) > self.MAX_PARAMS:
            return None
        if len(deliveries) > self.CHUNK:
            return None
        ((dsql, dparams),) = self.statements(Delivery.__table__, deliveries, _DELIVERIES_TAIL)
        if not dispatches:
            return (self._numbered(f"WITH d AS ({dsql}) SELECT id, NULL::integer, NULL::varchar FROM d"), dparams)
        xparams = self.params(Dispatch.__table__, dispatches)
        key = ("one", len(dispatches), *dnames)
        values = self._sql.get(key)  # typed VALUES: in a SELECT, PostgreSQL cannot infer them from the columns
        if values is None:
            casts = ", ".join(f"{self.placeholder}::{_pg_type(Dispatch.__table__.c[n], self.dialect)}" for n in dnames)
            rows = ", ".join(f"({i}, {casts})" for i in range(len(dispatches)))
            values = self._sql[key] = (
                f"INSERT INTO dispatches ({', '.join(dnames)}) SELECT {', '.join('v.' + n for n in dnames)} "
                f"FROM (VALUES {rows}) AS v(ord, {', '.join(dnames)}) "
                f"WHERE v.delivery_id IN (SELECT id FROM d) ORDER BY v.ord {_DISPATCHES_TAIL}")
        sql = self._numbered(f"WITH d AS ({dsql}), x AS ({values}) SELECT id, NULL::integer, NULL::varchar "
                             "FROM d UNION ALL SELECT delivery_id, id, state FROM x")
        return sql, dparams + xparams

    def _numbered(self, sql: str) -> str:
        """``sql`` with PostgreSQL's own ``$1, $2...`` placeholders (for psycopg's raw cursor), cached.

        psycopg rewrites ``%s`` placeholders on every execute and caches that only for
        statements under 4 KB; a batch's statement is longer (the rewrite was 11 % of the
        API's interpreter time in a profile).
        """
        numbered = self._sql.get(("numbered", sql))
        if numbered is None:
            count = itertools.count(1)
            numbered = self._sql[("numbered", sql)] = re.sub(r"%s", lambda _: f"${next(count)}", sql)
        return numbered

    def wrap(self, sql: str, exc: Exception) -> Exception:
        """A driver error as SQLAlchemy's (IntegrityError, DataError, OperationalError...)."""
        return DBAPIError.instance(sql, None, exc, self.dialect.loaded_dbapi.Error, dialect=self.dialect)

    def insert(self, conn: Any, table: Any, rows: list[dict[str, Any]], tail: str) -> list[tuple[Any, ...]]:
        """Insert ``rows`` (dicts with the same keys, in the same order); returns the RETURNING rows."""
        out: list[tuple[Any, ...]] = []
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            for sql, params in self.statements(table, rows, tail):
                try:
                    cursor.execute(sql, params)
                    out.extend(cursor.fetchall())
                except self.dialect.loaded_dbapi.Error as exc:
                    raise self.wrap(sql, exc) from exc
        finally:
            cursor.close()
        return out

    async def insert_async(self, cursor: Any, table: Any, rows: list[dict[str, Any]],
                           tail: str) -> list[tuple[Any, ...]]:
        """``insert`` through psycopg's ``AsyncCursor`` (on the event loop)."""
        out: list[tuple[Any, ...]] = []
        for sql, params in self.statements(table, rows, tail):
            try:
                await cursor.execute(sql, params)
                out.extend(await cursor.fetchall())
            except self.dialect.loaded_dbapi.Error as exc:
                raise self.wrap(sql, exc) from exc
        return out


def _pg_type(column: Any, dialect: Any) -> str:
    """The column's PostgreSQL type without a length (a cast to varchar(n) would truncate, not refuse)."""
    name = column.type.compile(dialect=dialect).lower().split("(")[0]
    return {"timestamp with time zone": "timestamptz"}.get(name, name)


_INSERTS: dict[str, _DriverInserts] = {}


def _inserts(dialect: Any) -> _DriverInserts:
    found = _INSERTS.get(dialect.name)
    if found is None:
        found = _INSERTS[dialect.name] = _DriverInserts(dialect)
    return found


def _outcomes(planned: list[_Planned]) -> tuple[list[Stored], dict[str, int]]:
    """One ``Stored`` per planned delivery, and the index of each id's first occurrence."""
    out = [Stored(p.item.delivery_id, p.item.event, p.info, reason=p.reason) for p in planned]
    first: dict[str, int] = {}
    for i, p in enumerate(planned):  # the same id twice in one batch: the first one is stored
        if p.item.delivery_id in first:
            out[i].duplicate = True
        else:
            first[p.item.delivery_id] = i
    return out, first


def _settle_outcomes(out: list[Stored], first: dict[str, int], inserted: set[str],
                     returned: list[tuple[Any, ...]]) -> list[Stored]:
    for row_id, delivery_id, state in returned:
        if state == AWAITING:  # held for approval: never enqueued
            out[first[delivery_id]].held += 1
        else:
            out[first[delivery_id]].dispatch_ids.append(row_id)
    for delivery_id, i in first.items():
        if delivery_id not in inserted:
            out[i].duplicate = True
    for s in out:
        s.dispatch_ids.sort()
    return out


_DELIVERIES_TAIL = "ON CONFLICT (id) DO NOTHING RETURNING id"
_DISPATCHES_TAIL = "RETURNING id, delivery_id, state"


def write(runtime: Runtime, planned: list[_Planned], rejected: list[Rejected], now: dt.datetime,
          connection: Any = None) -> list[Stored]:
    """Store one batch in one transaction; returns one ``Stored`` per planned delivery, in order.

    ``connection``: a SQLAlchemy ``Connection`` the caller keeps between batches (the
    inline SQLite writer: no pool checkout and reset per batch); else one from the pool.
    """
    out, first = _outcomes(planned)
    inserts = _inserts(runtime.engine.dialect)
    with runtime.write_lock, (connection.begin() if connection is not None else runtime.engine.begin()) as tx:
        conn = connection if connection is not None else tx
        inserted: set[str] = set()
        if first:
            # ON CONFLICT DO NOTHING: a redelivery (or its twin in another relay process) is not inserted
            # in id order: two writers' transactions lock the same ids in the same order (no deadlock)
            returned = inserts.insert(conn, Delivery.__table__, [planned[i].delivery for _, i in sorted(first.items())],
                                      _DELIVERIES_TAIL)
            inserted = {r[0] for r in returned}
        rows = [r for i in first.values() if planned[i].item.delivery_id in inserted for r in planned[i].rows]
        dispatched = inserts.insert(conn, Dispatch.__table__, rows, _DISPATCHES_TAIL) if rows else []
        if rejected:
            conn.execute(insert(RejectedDelivery), [
                {"delivery_id": r.delivery_id, "event": r.event, "status_code": r.status_code, "reason": r.reason,
                 "received_at": now, "count": r.count} for r in rejected])
            top = conn.execute(select(func.max(RejectedDelivery.id))).scalar_one()
            conn.execute(delete(RejectedDelivery).where(RejectedDelivery.id <= top - REJECTED_KEEP))
    return _settle_outcomes(out, first, inserted, dispatched)


async def write_async(runtime: Runtime, conn: Any, planned: list[_Planned]) -> list[Stored]:
    """``write`` (deliveries only) on a psycopg ``AsyncConnection`` in autocommit mode.

    One statement (``_DriverInserts.one_statement``): PostgreSQL runs it as its own
    transaction and answers only after its commit, in one round trip where BEGIN,
    two INSERTs and COMMIT took four. A batch too large for one statement's
    parameters takes the two INSERTs in one explicit transaction.
    """
    import psycopg

    out, first = _outcomes(planned)
    inserts = _inserts(runtime.engine.dialect)
    error = inserts.dialect.loaded_dbapi.Error
    deliveries = [planned[i].delivery for _, i in sorted(first.items())]
    one = inserts.one_statement(deliveries, [r for i in first.values() for r in planned[i].rows])
    if one is not None:
        sql, params = one
        try:
            async with psycopg.AsyncRawCursor(conn) as cursor:  # $n placeholders: no query rewrite
                await cursor.execute(sql, params)
                returned = await cursor.fetchall()
        except error as exc:
            raise inserts.wrap(sql, exc) from exc
        inserted = {r[0] for r in returned if r[1] is None}
        return _settle_outcomes(out, first, inserted, [(r[1], r[0], r[2]) for r in returned if r[1] is not None])
    try:
        async with conn.transaction(), conn.cursor() as cursor:
            returned = await inserts.insert_async(cursor, Delivery.__table__, deliveries, _DELIVERIES_TAIL)
            inserted = {r[0] for r in returned}
            rows = [r for i in first.values() if planned[i].item.delivery_id in inserted for r in planned[i].rows]
            dispatched = await inserts.insert_async(cursor, Dispatch.__table__, rows, _DISPATCHES_TAIL) \
                if rows else []
    except error as exc:  # the COMMIT's own failure (the statements' are wrapped already)
        raise inserts.wrap("COMMIT", exc) from exc
    return _settle_outcomes(out, first, inserted, dispatched)


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
                 writers: int = 1, async_pg: bool = False) -> None:
        self.runtime = runtime
        self.inline = inline
        self.async_pg = async_pg and not inline
        self._apending: list[_Job] = []
        self._aflush_scheduled = False
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._in_flight = 0
        self._idle: list[Any] = []  # psycopg AsyncConnections of the event loop, not in use
        self._tasks: set[asyncio.Task] = set()
        self._held: Any = None  # the inline writer's connection (``_connection``)
        self._redis: Any = None  # async_pg with a Redis queue: the event loop's client
        self._to_push: list[int] = []  # dispatch ids waiting for the LPUSH in flight (``_apush``)
        self._pushing = False
        self._held_by: int | None = None
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
            while len(self._threads) < (1 if self.async_pg else self.writers):
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
        if self.async_pg and loop is not None and job.future is not None:
            self._submit_async(job, loop)
            return
        self._ensure_started()  # (rejected-request records go to a writer thread)
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
        self._drop_idle()  # async_pg: connections aclose() did not close (the loop is gone)
        held, self._held = self._held, None
        if held is not None:
            with contextlib.suppress(Exception):
                held.close()
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

    def _connection(self) -> Any:
        """Inline (SQLite, on the event loop): one connection kept for every batch; threads use the pool."""
        if not self.inline:
            return None
        if self._held_by is None:
            self._held_by = threading.get_ident()  # the event loop's thread
        elif self._held_by != threading.get_ident():  # stop() flushing from another thread
            return None
        if self._held is None or self._held.invalidated or self._held.closed:
            self._held = self.runtime.engine.connect()
        return self._held

    def _plan(self, jobs: list[_Job], allowlist: Any, unreadable: ConfigError | None,
              settle: Callable[[list[tuple[_Job, Any, BaseException | None]]], None],
              now: dt.datetime) -> list[tuple[_Job, _Planned]]:
        """Route the batch's deliveries (``allowlist`` read once for the batch); an unreadable allowlist fails them."""
        planned: list[tuple[_Job, _Planned]] = []
        for j in jobs:
            if isinstance(j.item, Incoming):
                try:
                    if unreadable is not None and j.item.event != "ping":
                        raise unreadable
                    planned.append((j, plan(self.runtime, j.item, now, allowlist)))
                except ConfigError as exc:
                    settle([(j, None, exc)])
        return planned

    def _process(self, jobs: list[_Job]) -> None:
        runtime = self.runtime
        now = runtime.clock()
        rejected = [j.item for j in jobs if isinstance(j.item, Rejected)]
        allowlist: Any = None
        unreadable: ConfigError | None = None
        if any(isinstance(j.item, Incoming) and j.item.event != "ping" for j in jobs):
            try:  # once per batch, not per delivery
                allowlist = runtime.allowlist.get()
            except ConfigError as exc:
                unreadable = exc
        planned = self._plan(jobs, allowlist, unreadable, _resolve_all, now)
        try:
            stored = write(runtime, [p for _, p in planned], rejected, now, self._connection())
            self.batches += 1
        except (IntegrityError, DataError):
            if len(planned) + len(rejected) == 1:
                raise
            # one row spoils the batch: write each alone so the others are stored
            stored = []
            for _, p in planned:
                try:
                    stored.extend(write(runtime, [p], [], now, self._connection()))
                except Exception as exc:
                    stored.append(exc)  # type: ignore[arg-type]
            if rejected:
                try:
                    write(runtime, [], rejected, now, self._connection())
                except Exception:
                    log.warning("could not record %d rejected request(s)", len(rejected), exc_info=True)
            self.batches += 1
        except Exception as exc:  # storage down: every request of the batch answers 503
            _resolve_all([(j, None, exc) for j, _ in planned])
            return
        later, _ = self._after_store(planned, stored, _resolve_all)
        self._run_hooks(later)
        _resolve_all([(j, s, None) for j, s in later])

    def _after_store(self, planned: list[tuple[_Job, _Planned]], stored: list[Any],
                     settle: Callable[[list[tuple[_Job, Any, BaseException | None]]], None],
                     enqueue: bool = True) -> tuple[list[tuple[_Job, Stored]], list[int]]:
        """Answer a stored batch and (``enqueue``) enqueue its dispatches.

        Returns the deliveries a hook must see first, and the batch's dispatch ids.
        """
        runtime = self.runtime
        # stored: from here on nothing may turn an answer into an error. Answer first (the
        # queue only wakes workers; the sweeper covers an enqueue that never happens)
        runtime.metrics.intake_batch.observe(len(planned))
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
        settle(now_settled)
        ids = [i for s in stored if isinstance(s, Stored) for i in s.dispatch_ids]
        if ids:
            self.accepted_log.add([s for s in stored if isinstance(s, Stored) and s.dispatch_ids and not s.duplicate])
        if not enqueue or not ids or runtime.tasks is None:
            pass
        elif self.inline:
            _enqueue(runtime, ids)  # one enqueue transaction and one wake-up per batch
        else:
            # on another thread: the queue's own commit must not delay the next batch's
            try:
                self._enqueuer.submit(_enqueue, runtime, ids)
            except RuntimeError:  # shut down (the app is stopping): enqueue here
                _enqueue(runtime, ids)
        return later, ids

    def _run_hooks(self, later: list[tuple[_Job, Stored]]) -> None:
        """Check-run hooks (a label, a re-run): their result is part of the answer."""
        for _, s in later:
            with log_context(delivery_id=s.delivery_id, repo=s.info.repo, pr=s.info.pr_number):
                try:
                    s.hook = self.hooks(self.runtime, s)
                except Exception:
                    log.exception("post-store step failed for %s; the delivery is stored", s.delivery_id)

    # -- PostgreSQL on the event loop (``async_pg``) ------------------------------------------

    def _submit_async(self, job: _Job, loop: asyncio.AbstractEventLoop) -> None:
        if self._aloop is not loop:  # a new event loop (tests run several): connections belong to the old one
            self._drop_idle()
            self._redis, self._to_push, self._pushing = None, [], False
            self._aloop, self._in_flight = loop, 0
        self._apending.append(job)
        if not self._aflush_scheduled:
            self._aflush_scheduled = True
            loop.call_soon(self._aflush, loop)

    def _aflush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start a batch for what this loop iteration queued, while fewer than ``writers`` are in flight.

        A batch still in flight keeps later requests queued: when it commits, the next
        batch takes everything that arrived meanwhile (group commit without threads).
        """
        self._aflush_scheduled = False
        while self._apending and self._in_flight < self.writers:
            jobs, self._apending = self._apending[:MAX_BATCH], self._apending[MAX_BATCH:]
            self._in_flight += 1
            task = loop.create_task(self._abatch(jobs, loop))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _abatch(self, jobs: list[_Job], loop: asyncio.AbstractEventLoop) -> None:
        try:
            await self._aprocess(jobs, loop)
        except BaseException as exc:  # never leave a request waiting forever
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("intake writer failed")
            _settle([(j, None, exc) for j in jobs])
            if not isinstance(exc, Exception):
                raise
        finally:
            if loop is self._aloop:
                self._in_flight -= 1
                if self._apending and not self._aflush_scheduled:
                    self._aflush_scheduled = True
                    loop.call_soon(self._aflush, loop)

    async def _aprocess(self, jobs: list[_Job], loop: asyncio.AbstractEventLoop) -> None:
        runtime = self.runtime
        now = runtime.clock()
        allowlist: Any = None
        unreadable: ConfigError | None = None
        if any(j.item.event != "ping" for j in jobs):  # type: ignore[union-attr]
            allowlist = runtime.allowlist.current()
            if allowlist is None:  # a refresh is due: a file read or a fetch, never on the loop
                try:
                    allowlist = await loop.run_in_executor(self._enqueuer, runtime.allowlist.get)
                except ConfigError as exc:
                    unreadable = exc
        planned = self._plan(jobs, allowlist, unreadable, _settle, now)
        if not planned:
            return
        batch = [p for _, p in planned]
        try:
            stored: list[Any] = await self._awrite(batch)
        except (IntegrityError, DataError):
            if len(batch) == 1:
                raise
            stored = []
            for p in batch:  # one row spoils the batch: write each alone so the others are stored
                try:
                    stored.extend(await self._awrite([p]))
                except Exception as exc:
                    stored.append(exc)
        except Exception as exc:  # storage down: every request of the batch answers 503
            _settle([(j, None, exc) for j, _ in planned])
            return
        self.batches += 1
        redis = self._aredis(runtime)
        later, ids = self._after_store(planned, stored, _settle, enqueue=redis is None)
        if ids and redis is not None:  # after the answers: one LPUSH on this loop, no thread
            await self._apush(ids, redis)
        if later:  # the hooks use the ORM (blocking): on the enqueue thread
            await loop.run_in_executor(self._enqueuer, self._run_hooks, later)
            _settle([(j, s, None) for j, s in later])

    async def _apush(self, ids: list[int], redis: Any) -> None:
        """Enqueue ``ids`` with at most one LPUSH in flight: what batches store meanwhile goes in the next one.

        A push costs ~100 us of the loop's CPU (redis-py's client machinery) whatever it
        carries; under load several batches' rows share one.
        """
        self._to_push += ids
        if self._pushing:  # the push in flight takes these next (in its loop below)
            return
        self._pushing = True
        try:
            while self._to_push:
                batch, self._to_push = self._to_push, []
                await self.runtime.tasks.enqueue_batch_async(batch, redis)
        finally:
            self._pushing = False

    def _aredis(self, runtime: Runtime) -> Any:
        """The event loop's Redis client when the queue is in Redis (else None: the enqueue thread)."""
        if runtime.tasks is None or not is_redis(runtime.huey):
            return None
        if self._redis is None:
            import redis.asyncio

            self._redis = redis.asyncio.Redis.from_url(runtime.settings.resolved_queue_url)
        return self._redis

    async def _awrite(self, batch: list[_Planned]) -> list[Stored]:
        """One transaction on an idle connection (opened when none is idle).

        A connection that sat idle and turns out broken (the server restarted) is
        replaced and the batch written again on a fresh one, as the pool's pre-ping does
        for the other paths. Should the break have come at COMMIT, the rows are stored and
        the second try answers ``duplicate``; their dispatches are then sent by the
        sweeper, which re-enqueues pending rows no task claimed.
        """
        conn, reused = await self._aconnect()
        try:
            out = await write_async(self.runtime, conn, batch)
        except Exception:
            if not (reused and conn.broken):
                self._release(conn)
                raise
            self._release(conn)
            conn, _ = await self._aconnect(fresh=True)
            try:
                out = await write_async(self.runtime, conn, batch)
            except Exception:
                self._release(conn)
                raise
        self._release(conn)
        return out

    async def _aconnect(self, fresh: bool = False) -> tuple[Any, bool]:
        if self._idle and not fresh:
            return self._idle.pop(), True
        import psycopg

        engine = self.runtime.engine
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        try:
            # autocommit: a batch is one statement, its own transaction (write_async)
            return await psycopg.AsyncConnection.connect(*cargs, **cparams, autocommit=True), False
        except psycopg.Error as exc:
            raise _inserts(engine.dialect).wrap("connect", exc) from exc

    def _release(self, conn: Any) -> None:
        import psycopg

        if not conn.closed and not conn.broken and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            self._idle.append(conn)
        else:
            _close_quietly(conn)

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            _close_quietly(conn)

    async def aclose(self) -> None:
        """Wait for the batches in flight on this loop and close the event loop's connections."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.close()
        client, self._redis = self._redis, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()


def _close_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):
        conn.pgconn.finish()  # no round trip, no loop needed


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


def _settle(items: list[tuple[_Job, Any, BaseException | None]]) -> None:
    """Settle futures from their own event loop's thread."""
    for job, result, exc in items:
        if job.future is None or job.future.done():  # a record, or the request was cancelled
            continue
        if exc is not None:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)


def _resolve_all(settled: list[tuple[_Job, Any, BaseException | None]]) -> None:
    """Settle the futures of a batch with ONE wake-up of each event loop (not one per request)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job, Any, BaseException | None]]] = {}
    for job, result, exc in settled:
        if job.future is not None and job.loop is not None:
            by_loop.setdefault(job.loop, []).append((job, result, exc))

    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, items)
        except RuntimeError:  # the loop is closed (shutdown)
            pass
