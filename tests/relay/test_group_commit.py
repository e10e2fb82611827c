"""Group commit: one transaction stores a batch; duplicates (stored, or twice in one batch) are told apart."""

from __future__ import annotations

import asyncio
import time

import pytest

from crcr.store.migrate import upgrade
from relay.group_commit import GroupWriter, Incoming, plan, write
from relay.runtime import Runtime
from tests.relay.harness import delivery, make_settings, pr_payload, rows


@pytest.fixture
def runtime(tmp_path, database_url):
    rt = Runtime.from_settings(make_settings(tmp_path, database_url=database_url))
    upgrade(rt.engine)
    yield rt
    rt.close()


def _incoming(delivery_id: str, action: str = "opened", association: str = "MEMBER") -> Incoming:
    import json

    payload = pr_payload(action, association=association)
    return Incoming(delivery_id, "pull_request", json.dumps(payload).encode(), payload)


def test_one_batch_stores_all_and_flags_every_kind_of_duplicate(runtime):
    now = runtime.clock()
    (first,) = write(runtime, [plan(runtime, _incoming("old"), now)], [], now)
    assert not first.duplicate and len(first.dispatch_ids) == 3
    batch = [_incoming("a"), _incoming("old"), _incoming("b", "edited"), _incoming("a", "synchronize")]
    out = write(runtime, [plan(runtime, i, now) for i in batch], [], now)
    assert [s.duplicate for s in out] == [False, True, False, True]
    assert [len(s.dispatch_ids) for s in out] == [3, 0, 0, 0]
    assert delivery(runtime, "a").action == "opened"  # the first of the twins was stored
    assert delivery(runtime, "b").status == "ignored"
    assert sorted(d.id for d in rows(runtime, "a")) == out[0].dispatch_ids


@pytest.mark.parametrize("inline", [False, True], ids=["writer-thread", "on-the-event-loop"])
def test_concurrent_requests_are_each_answered_after_their_commit(runtime, inline):
    writer = GroupWriter(runtime, inline=inline)

    async def burst():
        ids = [f"c{i}" for i in range(40)] + ["c0", "c1"]  # two redeliveries among them
        return await asyncio.gather(*(writer.store(_incoming(i)) for i in ids))

    try:
        results = asyncio.run(burst())
    finally:
        writer.stop()
    assert sum(r.duplicate for r in results) == 2
    for r in results:
        if not r.duplicate:  # acknowledged means durable: the rows are there when the answer is
            assert delivery(runtime, r.delivery_id) is not None
            assert len(rows(runtime, r.delivery_id)) == 3
    assert 1 <= writer.batches <= 42


def test_several_writer_threads_store_twins_once_without_deadlock(runtime):
    """Four writers (crcr serve on PostgreSQL): twins in concurrent batches, in opposite orders."""
    import random

    writer = GroupWriter(runtime, writers=4)
    ids = [f"t{i:03d}" for i in range(150)]
    # every id twice, over more than two batches (at most MAX_BATCH each) that different
    # threads write at the same time: twins land in concurrent transactions
    order = ids + ids[::-1]
    random.Random(9).shuffle(order)

    async def burst():
        return await asyncio.gather(*(writer.store(_incoming(i)) for i in order), return_exceptions=True)

    try:
        results = asyncio.run(burst())
    finally:
        writer.stop()
    assert not [r for r in results if isinstance(r, BaseException)]  # no deadlock, no 503
    stored = [r for r in results if not r.duplicate]
    assert sorted(r.delivery_id for r in stored) == ids  # each stored and acknowledged exactly once
    for r in stored:
        assert len(rows(runtime, r.delivery_id)) == 3 == len(r.dispatch_ids)
    assert writer.batches >= 3


# -- PostgreSQL: batches written on the event loop through psycopg's async connections (crcr serve's mode) --


@pytest.fixture
def pg_runtime(tmp_path, postgres_url):
    """The async writer is PostgreSQL's: these tests exist only for PostgreSQL (no SQLite variant to skip)."""
    rt = Runtime.from_settings(make_settings(tmp_path, database_url=postgres_url))
    upgrade(rt.engine)
    yield rt
    rt.close()


def _run(writer: GroupWriter, ids: list[str], **incoming) -> list:
    async def burst():
        try:
            return await asyncio.gather(*(writer.store(_incoming(i, **incoming)) for i in ids), return_exceptions=True)
        finally:
            await writer.aclose()

    try:
        return asyncio.run(burst())
    finally:
        writer.stop()


@pytest.mark.parametrize("one_statement", [True, False], ids=["one-statement", "two-inserts-in-a-transaction"])
def test_async_writer_answers_each_request_after_its_commit_and_twins_once(pg_runtime, monkeypatch, one_statement):
    import random

    from relay import group_commit

    if not one_statement:  # a batch too large for one statement's parameters takes the explicit transaction
        monkeypatch.setattr(group_commit._DriverInserts, "MAX_PARAMS", 0)
    writer = GroupWriter(pg_runtime, writers=4, async_pg=True)
    ids = [f"a{i:03d}" for i in range(150)]
    order = ids + ids[::-1]  # every id twice, in concurrent batches
    random.Random(3).shuffle(order)
    results = _run(writer, order)
    assert not [r for r in results if isinstance(r, BaseException)]
    stored = [r for r in results if not r.duplicate]
    assert sorted(r.delivery_id for r in stored) == ids  # each stored and acknowledged exactly once
    for r in stored:  # acknowledged means durable: the rows are there, with the ids the answer gave
        assert sorted(d.id for d in rows(pg_runtime, r.delivery_id)) == r.dispatch_ids
        assert len(r.dispatch_ids) == 3
    assert writer.batches >= 3 and not writer._threads  # no writer thread was started


def test_async_writer_stores_held_and_ignored_deliveries_as_the_thread_writer(pg_runtime):
    writer = GroupWriter(pg_runtime, writers=2, async_pg=True)
    results = _run(writer, ["held"], association="FIRST_TIME_CONTRIBUTOR") + _run(
        GroupWriter(pg_runtime, writers=2, async_pg=True), ["ignored"], action="edited")
    held, ignored = results
    assert (held.duplicate, held.held, len(held.dispatch_ids)) == (False, 2, 1)  # org/l4 opts in to untrusted code
    assert sorted(d.state for d in rows(pg_runtime, "held")) == ["awaiting", "awaiting", "pending"]
    assert (ignored.duplicate, ignored.dispatch_ids, ignored.reason) == (False, [], "pull_request action 'edited' "
                                                                                   "is not forwarded")
    assert delivery(pg_runtime, "ignored").status == "ignored"


def test_async_writer_replaces_a_connection_the_server_closed(pg_runtime):
    """An idle connection killed by the server (a restart) costs no 503: the batch is written on a new one."""
    import sqlalchemy as sa

    writer = GroupWriter(pg_runtime, writers=1, async_pg=True)

    async def scenario():
        try:
            first = await writer.store(_incoming("before"))
            (conn,) = writer._idle
            with pg_runtime.engine.connect() as admin:
                admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": conn.info.backend_pid})
                admin.commit()
            second = await writer.store(_incoming("after"))
            return first, second
        finally:
            await writer.aclose()

    try:
        first, second = asyncio.run(scenario())
    finally:
        writer.stop()
    assert len(first.dispatch_ids) == 3 and len(second.dispatch_ids) == 3
    assert len(rows(pg_runtime, "after")) == 3


def test_async_writer_stores_the_others_when_one_row_spoils_the_batch(pg_runtime, monkeypatch):
    from relay import group_commit

    real_plan = group_commit.plan

    def spoiling_plan(runtime, item, now, allowlist=None):
        planned = real_plan(runtime, item, now, allowlist)
        if item.delivery_id == "bad":
            planned.rows[0]["target"] = "x" * 300  # over the column's 200: the whole statement fails
        return planned

    monkeypatch.setattr(group_commit, "plan", spoiling_plan)
    writer = GroupWriter(pg_runtime, writers=1, async_pg=True)
    results = _run(writer, ["ok1", "bad", "ok2"])
    ok1, bad, ok2 = results
    assert isinstance(bad, Exception)  # that request answers 503 (GitHub can redeliver it)
    assert len(ok1.dispatch_ids) == 3 and len(ok2.dispatch_ids) == 3
    assert delivery(pg_runtime, "bad") is None and rows(pg_runtime, "bad") == []


@pytest.fixture
def pg_redis_runtime(tmp_path, postgres_url, redis_url):
    from relay.worker import register_tasks

    rt = Runtime.from_settings(make_settings(tmp_path, database_url=postgres_url, queue_url=redis_url,
                                             sweeper_stale_after_s=0.01))
    upgrade(rt.engine)
    register_tasks(rt)
    yield rt
    rt.huey.storage.flush_queue()
    rt.close()


def _queued_ids(runtime) -> list[int]:
    ids = []
    for task in runtime.huey.pending():
        (arg,) = task.args
        ids += arg if isinstance(arg, list) else [arg]
    return sorted(ids)


def test_async_writer_enqueues_each_batch_in_redis_from_the_event_loop(pg_redis_runtime):
    writer = GroupWriter(pg_redis_runtime, writers=2, async_pg=True)
    results = _run(writer, [f"q{i}" for i in range(20)])
    ids = sorted(i for r in results for i in r.dispatch_ids)
    assert len(ids) == 60 and _queued_ids(pg_redis_runtime) == ids  # every stored row has its task
    assert not writer._threads


def test_async_writer_loses_nothing_when_redis_fails_mid_batch(pg_redis_runtime, monkeypatch):
    """The push fails after the commit: the deliveries are answered as stored and the sweeper sends them."""
    from relay import worker

    async def redis_down(huey, tasks, client):
        raise ConnectionError("redis went away")

    monkeypatch.setattr(worker, "enqueue_many_async", redis_down)
    writer = GroupWriter(pg_redis_runtime, writers=2, async_pg=True)
    results = _run(writer, [f"r{i}" for i in range(10)])
    assert not [r for r in results if isinstance(r, BaseException)]  # 202s: stored, nothing to redeliver
    ids = sorted(i for r in results for i in r.dispatch_ids)
    assert len(ids) == 30 and _queued_ids(pg_redis_runtime) == []
    assert sorted(d.id for r in results for d in rows(pg_redis_runtime, r.delivery_id) if d.state == "pending") == ids
    time.sleep(0.05)  # overdue by the (shortened) sweeper delay
    assert worker.sweep_once(pg_redis_runtime) == 30  # the sweeper finds them all
    assert _queued_ids(pg_redis_runtime) == ids
