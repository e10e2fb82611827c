"""Property-based bodies and headers on /webhook: never a 5xx; nothing stored unless signed."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from crcr.store.deliveries import Delivery
from relay.app import create_app
from relay.intake import sign
from tests.relay.harness import SECRET, make_settings

KEYS = ["action", "number", "pull_request", "repository", "full_name", "labels", "name", "label", "head", "sha",
        "ref", "after", "commits", "added", "modified", "removed", "sender", "login", "author_association",
        "issue", "check_run", "head_sha"]
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20) | \
    st.sampled_from(["pytorch/pytorch", "opened", "labeled", "ciflow/crcr/npu", "NONE", "synchronize"])
JSON = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
    st.sampled_from(KEYS) | st.text(max_size=8), kids, max_size=5), max_leaves=30)
HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=80)
EVENTS = st.sampled_from(["pull_request", "push", "ping", "check_run", "issue_comment"]) | HEADER_TEXT


def _app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    allow = "L1:\n  - org/a\nL3:\n  npu:\n    org/b: x\nL4:\n  - org/c\n"
    return create_app(make_settings(tmp, allowlist=allow), start_worker=False, start_sweeper=False)


def _count(runtime) -> int:
    with runtime.sessions() as s:
        return s.scalar(select(func.count()).select_from(Delivery))


def test_signed_arbitrary_json_never_5xx(tmp_path_factory):
    with TestClient(_app(tmp_path_factory)) as client:
        runtime = client.app.state.runtime

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(payload=JSON, event=EVENTS, delivery=st.uuids().map(str) | HEADER_TEXT)
        def check(payload, event, delivery):
            body = json.dumps(payload).encode()
            r = client.post("/webhook", content=body, headers={
                "X-GitHub-Event": event, "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": sign(SECRET.encode(), body)})
            assert r.status_code < 500, r.text
            if r.status_code in (200, 202) and r.json().get("status") in ("accepted", "ignored", "pong"):
                with runtime.sessions() as s:
                    assert s.get(Delivery, delivery) is not None

        check()


def test_unsigned_or_badly_signed_bodies_store_nothing(tmp_path_factory):
    with TestClient(_app(tmp_path_factory)) as client:
        runtime = client.app.state.runtime

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(body=st.binary(max_size=300) | JSON.map(lambda j: json.dumps(j).encode()),
               signature=st.none() | HEADER_TEXT | st.text(st.sampled_from("0123456789abcdef"), min_size=64,
                                                            max_size=64).map(lambda h: "sha256=" + h),
               event=EVENTS, extra=st.dictionaries(st.sampled_from(["Content-Type", "X-GitHub-Hook-ID",
                                                                    "Content-Encoding"]), HEADER_TEXT))
        def check(body, signature, event, extra):
            headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": "fuzz-1", **extra}
            if signature is not None:
                headers["X-Hub-Signature-256"] = signature
            r = client.post("/webhook", content=body, headers=headers)
            assert r.status_code in (400, 401), r.text
            assert _count(runtime) == 0

        check()
