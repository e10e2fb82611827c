"""Group commit: one transaction stores a batch; duplicates (stored, or twice in one batch) are told apart."""

from __future__ import annotations

import asyncio

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


def _incoming(delivery_id: str, action: str = "opened") -> Incoming:
    import json

    payload = pr_payload(action)
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
