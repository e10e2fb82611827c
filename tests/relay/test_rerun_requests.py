"""relay.rerun_requests: triage's rerun requests become push dispatches for that SHA."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import select

from crcr.store.deliveries import Delivery, Dispatch
from crcr.store.triage import RerunRequest, add_rerun_requests
from relay import rerun_requests
from tests.relay.callbacks_harness import UPSTREAM, harness

A, B, C = "a" * 40, "b" * 40, "c" * 40


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request):
    """None: SQLite in tmp_path; else a fresh PostgreSQL database."""
    return None if request.param == "sqlite" else request.getfixturevalue("postgres_url")


def plant_push(h, delivery_id: str, shas: list[str]) -> None:
    payload = {"ref": "refs/heads/main", "after": shas[-1], "before": "0" * 40, "repository": {"full_name": UPSTREAM},
               "commits": [{"id": s, "message": f"m {s[:4]}"} for s in shas], "head_commit": {"id": shas[-1]}}
    with h.runtime.sessions.begin() as s:
        s.add(Delivery(id=delivery_id, event="push", repo=UPSTREAM, head_sha=shas[-1], ref="refs/heads/main",
                       labels=[], payload=json.dumps(payload), payload_bytes=1, received_at=h.clock()))


def request(h, backend: str, shas: list[str], **kw) -> list[RerunRequest]:
    with h.runtime.sessions.begin() as s:
        return add_rerun_requests(s, backend, shas, "bisect", now=h.clock(), **kw)


def test_a_request_inside_a_stack_dispatches_the_push_narrowed_to_that_commit(tmp_path, db):
    with harness(tmp_path, database_url=db) as h:
        plant_push(h, "push-1", [A, B, C])
        request(h, "org/l2repo", [B])
        ids = rerun_requests.dispatch_due(h.runtime)
        assert len(ids) == 1
        with h.runtime.sessions() as s:
            row = s.get(Dispatch, ids[0])
            d = s.get(Delivery, row.delivery_id)
            req = s.scalars(select(RerunRequest)).one()
        assert (row.target, row.event_type, row.state) == ("org/l2repo", "push", "pending")
        assert d.id == "push-1/rerun/1" and d.head_sha == B and req.delivery_id == d.id and req.state == "dispatched"
        payload = json.loads(d.payload)
        assert payload["after"] == B and [c["id"] for c in payload["commits"]] == [A, B]
        assert payload["head_commit"]["id"] == B and payload["before"] == A
        # a second request for the same commit gets the next rerun number; nothing is sent twice
        h.clock.advance(600)
        request(h, "org/l2repo", [B])
        rerun_requests.dispatch_due(h.runtime)
        assert rerun_requests.dispatch_due(h.runtime) == []
        with h.runtime.sessions() as s:
            assert s.get(Delivery, "push-1/rerun/2") is not None


def test_unknown_commit_gets_a_minimal_push_and_bad_targets_fail(tmp_path, db):
    with harness(tmp_path, database_url=db) as h:
        request(h, "org/l2repo", [C])
        request(h, "org/not-allowlisted", [C])
        ids = rerun_requests.dispatch_due(h.runtime)
        assert len(ids) == 1
        with h.runtime.sessions() as s:
            d = s.get(Delivery, f"triage/{C}/rerun/1")
            assert json.loads(d.payload)["after"] == C
            failed = s.scalars(select(RerunRequest).where(RerunRequest.backend == "org/not-allowlisted")).one()
        assert failed.state == "failed" and failed.error == "not an allowlisted target"


def test_requests_are_paced(tmp_path, db):
    with harness(tmp_path, database_url=db) as h:
        rows = request(h, "org/l2repo", [A, B, C], max_open=2)
        assert len(rows) == 2  # at most two open requests per backend
        assert rows[1].not_before - rows[0].not_before == dt.timedelta(minutes=2)
        assert len(rerun_requests.dispatch_due(h.runtime)) == 1  # the second is not due yet
        h.clock.advance(121)
        assert len(rerun_requests.dispatch_due(h.runtime)) == 1
        for _ in range(3):
            h.clock.advance(600)
            request(h, "org/l2repo", [C], max_per_hour=4)
        with h.runtime.sessions() as s:
            assert len(list(s.scalars(select(RerunRequest)))) == 4  # the hourly cap held
