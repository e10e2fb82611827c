"""Dispatch attempts against the fake GitHub through the real PyGithub client."""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest
from fastapi.testclient import TestClient

from relay import dispatch
from relay.app import create_app
from relay.runtime import Runtime
from relay.worker import sweep_once
from tests.relay.harness import delivery, make_settings, post_webhook, pr_payload, rows

ONE_TARGET = "L1:\n  - org/one\n"


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


@pytest.fixture
def setup(tmp_path, fake_github):
    """A relay without a consumer: the test makes each attempt itself, on a settable clock."""
    clock = Clock()

    def build(allowlist: str = ONE_TARGET, **extra):
        extra = {"dispatch_backoff_base_s": 5.0, "dispatch_backoff_max_s": 60.0, **extra}
        settings = make_settings(tmp_path, allowlist=allowlist, github_url=fake_github.url,
                                 app_id=fake_github.app_id, key=fake_github.private_key_pem, **extra)
        runtime = Runtime.from_settings(settings, clock=clock)
        client = TestClient(create_app(settings, runtime=runtime, start_worker=False, start_sweeper=False))
        client.__enter__()
        built.append(client)
        return client, runtime

    built: list[TestClient] = []
    yield build, clock, fake_github
    for c in built:
        c.__exit__(None, None, None)


def _row(runtime, delivery_id):
    (r,) = rows(runtime, delivery_id)
    return r


def test_dispatch_sends_crcrs_client_payload(setup):
    build, _, gh = setup
    client, runtime = build()
    payload = pr_payload()
    post_webhook(client, "pull_request", payload, delivery="d1")
    row = _row(runtime, "d1")
    assert dispatch.attempt(runtime, row.id).state == "sent"
    (call,) = gh.dispatches("org/one")
    assert call.body == {"event_type": "pull_request",
                         "client_payload": {"event_type": "pull_request", "delivery_id": "d1", "payload": payload}}
    assert call.headers["authorization"].startswith("token ghs_")
    row = _row(runtime, "d1")
    assert (row.state, row.attempts, row.last_status, row.trimmed) == ("sent", 1, 204, None)
    # a second task for the same row (e.g. from the sweeper) sends nothing
    assert dispatch.attempt(runtime, row.id) is None
    assert len(gh.dispatches()) == 1


def test_a_502_is_one_request_per_attempt_then_backoff_then_sent(setup):
    build, clock, gh = setup
    client, runtime = build()
    gh.add_fault("POST", r"/dispatches$", status=502, times=2)
    post_webhook(client, "pull_request", pr_payload(), delivery="d2")
    rid = _row(runtime, "d2").id
    out = dispatch.attempt(runtime, rid)
    # PyGithub's hidden retries are off: the fake saw exactly one POST for this attempt
    assert out.state == "retrying" and len(gh.dispatches()) == 1
    assert dispatch.attempt(runtime, rid) is None  # not due yet
    clock.advance(out.delay_s)
    assert dispatch.attempt(runtime, rid).state == "retrying" and len(gh.dispatches()) == 2
    clock.advance(10)
    assert dispatch.attempt(runtime, rid).state == "sent" and len(gh.dispatches()) == 3
    row = _row(runtime, "d2")
    assert row.attempts == 3 and row.last_error is None


def test_secondary_rate_limit_waits_at_least_retry_after(setup):
    build, clock, gh = setup
    client, runtime = build()
    gh.add_fault("POST", r"/dispatches$", status=403, retry_after=30, secondary=True)
    post_webhook(client, "pull_request", pr_payload(), delivery="d3")
    row = _row(runtime, "d3")
    out = dispatch.attempt(runtime, row.id)
    assert out.state == "retrying" and out.delay_s >= 30
    after = _row(runtime, "d3")
    assert "rate limit" in after.last_error and after.last_status == 403
    clock.advance(28)  # (a retry task may fire up to 1 s early; the claim allows that)
    assert dispatch.attempt(runtime, row.id) is None
    clock.advance(out.delay_s - 28)
    assert dispatch.attempt(runtime, row.id).state == "sent"


def test_dead_after_max_attempts_and_redeliver_brings_it_back(setup):
    build, clock, gh = setup
    client, runtime = build(dispatch_max_attempts=3)
    gh.add_fault("POST", r"/dispatches$", drop=True, times=3)
    post_webhook(client, "pull_request", pr_payload(), delivery="d4")
    rid = _row(runtime, "d4").id
    states = []
    for _ in range(3):
        states.append(dispatch.attempt(runtime, rid).state)
        clock.advance(60)
    assert states == ["retrying", "retrying", "dead"]
    row = _row(runtime, "d4")
    assert row.state == "dead" and "connection" in row.last_error
    assert dispatch.redeliver(runtime, [rid]) == [rid]
    assert dispatch.attempt(runtime, rid).state == "sent"
    assert len(gh.dispatches()) == 4


def test_app_not_installed_is_dead_at_once_with_a_clear_error(setup):
    build, _, gh = setup
    gh.set_installation("org/one", None)
    client, runtime = build()
    post_webhook(client, "pull_request", pr_payload(), delivery="d5")
    out = dispatch.attempt(runtime, _row(runtime, "d5").id)
    assert out.state == "dead" and "not installed" in out.error


def test_installation_token_is_minted_once_and_reused(setup):
    build, _, gh = setup
    client, runtime = build("L1:\n  - org/a\n  - org/b\n  - org/c\n")
    for i in range(5):
        post_webhook(client, "pull_request", pr_payload(number=i), delivery=f"t{i}")
    for r in rows(runtime):
        assert dispatch.attempt(runtime, r.id).state == "sent"
    assert len(gh.dispatches()) == 15
    assert len(gh.token_mints()) == 1  # one installation, one token for all 15


def test_token_near_expiry_is_refreshed(setup):
    build, _, gh = setup
    gh.token_ttl_s = 200  # shorter than the refresh margin: every use needs a fresh token
    client, runtime = build()
    for i in range(2):
        post_webhook(client, "pull_request", pr_payload(number=i), delivery=f"e{i}")
        assert dispatch.attempt(runtime, _row(runtime, f"e{i}").id).state == "sent"
    assert len(gh.token_mints()) == 2


def test_oversized_payload_is_trimmed_deterministically_and_recorded(setup):
    build, _, gh = setup
    client, runtime = build()
    payload = pr_payload()
    payload["pull_request"]["body"] = "x" * 70_000
    payload["commits"] = [{"message": "m" * 2000} for _ in range(5)]
    post_webhook(client, "pull_request", payload, delivery="big")
    assert dispatch.attempt(runtime, _row(runtime, "big").id).state == "sent"
    (call,) = gh.dispatches()
    cp = call.body["client_payload"]
    assert cp["crcr_trimmed"] == ["/payload/pull_request/body"]
    assert cp["payload"]["pull_request"]["body"] is None
    assert cp["payload"]["pull_request"]["head"]["sha"] == "a" * 40
    assert len(json.dumps(cp).encode()) < 64 * 1024
    assert _row(runtime, "big").trimmed == ["/payload/pull_request/body"]


def test_sweeper_requeues_a_row_whose_worker_died(setup):
    build, clock, gh = setup
    client, runtime = build(sweeper_stale_after_s=60)
    post_webhook(client, "pull_request", pr_payload(), delivery="sw")
    rid = _row(runtime, "sw").id
    # a worker claimed it and was SIGKILLed: the claim lease runs out, nothing else happens
    assert dispatch.claim(runtime, rid, dt.timedelta(seconds=30))
    assert dispatch.attempt(runtime, rid) is None
    clock.advance(61)
    queued = runtime.huey.pending_count()  # the intake's task, still queued (no consumer here)
    assert sweep_once(runtime) == 1 and runtime.huey.pending_count() == queued + 1
    assert sweep_once(runtime) == 0  # freshly re-enqueued: the next sweep waits a full period
    assert dispatch.attempt(runtime, rid).state == "sent"


def test_pruned_payload_cannot_be_sent_and_says_why(setup):
    build, _, _ = setup
    client, runtime = build()
    post_webhook(client, "pull_request", pr_payload(), delivery="pr")
    from sqlalchemy import update

    from crcr.store.deliveries import Delivery

    with runtime.sessions.begin() as s:
        s.execute(update(Delivery).values(payload=None))
    out = dispatch.attempt(runtime, _row(runtime, "pr").id)
    assert out.state == "dead" and "pruned" in out.error
    assert delivery(runtime, "pr").payload is None


def test_backoff_grows_is_capped_and_jittered():
    rng = random.Random(1)
    delays = [dispatch.backoff_delay(a, base_s=2, max_s=60, rng=rng) for a in range(1, 9)]
    assert all(1 <= d <= 2 for d in delays[:1]) and all(30 <= d <= 60 for d in delays[5:])
    assert dispatch.backoff_delay(1, base_s=2, max_s=60, retry_after_s=120, rng=rng) == 120


def test_sweeper_recovers_a_task_lost_from_the_queue_but_not_one_still_queued(setup):
    build, clock, _ = setup
    client, runtime = build(sweeper_stale_after_s=60)
    post_webhook(client, "pull_request", pr_payload(), delivery="lost")
    rid = _row(runtime, "lost").id
    clock.advance(61)
    assert sweep_once(runtime) == 0  # its task is still in the queue: waiting its turn, not lost
    runtime.huey.flush()  # the task is gone (a worker took it and died before claiming)
    assert sweep_once(runtime) == 1
    (task,) = [runtime.huey.deserialize_task(d) for d in runtime.huey.storage.enqueued_items()]
    assert task.args == (rid,)


def test_non_ascii_payload_is_measured_as_sent_not_as_received(setup):
    """14,000 "é" are 28 KB of UTF-8 in the webhook but 84 KB once JSON-escaped for GitHub."""
    build, _, gh = setup
    client, runtime = build()
    payload = pr_payload()
    payload["pull_request"]["body"] = "é" * 14_000
    body = json.dumps(payload, ensure_ascii=False).encode()  # as GitHub sends it: raw UTF-8
    assert len(body) < 64 * 1024
    post_webhook(client, "pull_request", None, body=body, delivery="utf8")
    assert dispatch.attempt(runtime, _row(runtime, "utf8").id).state == "sent"
    (call,) = gh.dispatches()
    assert call.body["client_payload"]["crcr_trimmed"] == ["/payload/pull_request/body"]


THREE_TARGETS = "L1:\n  - org/one\n  - org/two\n  - org/three\n"


def test_a_deliverys_rows_are_claimed_and_sent_by_one_task_and_only_the_failed_row_retries(setup):
    build, clock, gh = setup
    client, runtime = build(THREE_TARGETS)
    gh.add_fault("POST", r"^/repos/org/two/dispatches$", status=502, times=1)
    post_webhook(client, "pull_request", pr_payload(), delivery="fan")
    ids = sorted(r.id for r in rows(runtime, "fan"))
    assert len(ids) == 3
    # the intake enqueued ONE task carrying the delivery's three rows
    (task,) = [runtime.huey.deserialize_task(d) for d in runtime.huey.storage.enqueued_items()]
    assert task.name == "crcr.dispatch.send_many" and sorted(task.args[0]) == ids
    result = runtime.huey.execute(runtime.huey.dequeue())
    by_target = {r.target: r for r in rows(runtime, "fan")}
    assert result == {r.id: r.state for r in by_target.values()}
    assert {t: (r.state, r.attempts, r.last_status, r.claimed_until) for t, r in by_target.items()} == {
        "org/one": ("sent", 1, 204, None), "org/three": ("sent", 1, 204, None),
        "org/two": ("retrying", 1, 502, None)}
    assert "502" in by_target["org/two"].last_error
    assert sorted(c.path for c in gh.dispatches()) == [f"/repos/org/{t}/dispatches" for t in ("one", "three", "two")]
    # the retry goes back through the per-row path: one scheduled per-row task, for the failed row only
    (retry,) = runtime.huey.pending()
    assert retry.name == "crcr.dispatch.send" and retry.args == (by_target["org/two"].id,) and retry.eta
    # the same batch again sends nothing: two rows are done and one is not due yet
    assert runtime.tasks.send_many.call_local(ids) == {}
    clock.advance(6)
    assert dispatch.attempt(runtime, by_target["org/two"].id).state == "sent"
    assert len(gh.dispatches("org/two")) == 2 and len(gh.dispatches()) == 4


def test_a_batch_skips_rows_held_by_a_live_worker_and_sends_the_rest(setup):
    build, _, gh = setup
    client, runtime = build(THREE_TARGETS)
    post_webhook(client, "pull_request", pr_payload(), delivery="held")
    ids = sorted(r.id for r in rows(runtime, "held"))
    assert dispatch.claim(runtime, ids[0], dt.timedelta(seconds=30))  # another worker is sending it
    claimed, until = dispatch.claim_many(runtime, ids, dt.timedelta(seconds=30))
    assert claimed == ids[1:]
    # a late send renews only a claim it still holds
    assert dispatch._extend_claim(runtime, ids[1], until, dt.timedelta(seconds=30))
    assert not dispatch._extend_claim(runtime, ids[2], until - dt.timedelta(seconds=1), dt.timedelta(seconds=30))
    assert dispatch.claim_many(runtime, ids, dt.timedelta(seconds=30))[0] == []  # all held now
    assert len(gh.dispatches()) == 0


def test_one_batch_task_sends_every_row_it_claims_and_leaves_held_rows(setup):
    build, _, gh = setup
    client, runtime = build(THREE_TARGETS)
    post_webhook(client, "pull_request", pr_payload(), delivery="part")
    ids = sorted(r.id for r in rows(runtime, "part"))
    assert dispatch.claim(runtime, ids[0], dt.timedelta(seconds=30))
    out = runtime.tasks.send_many.call_local(ids)
    assert out == {ids[1]: "sent", ids[2]: "sent"}
    states = {r.id: (r.state, r.attempts) for r in rows(runtime, "part")}
    assert states[ids[0]] == ("pending", 0) and len(gh.dispatches()) == 2
