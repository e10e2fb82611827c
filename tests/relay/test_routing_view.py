"""Intake reads only the fields routing needs (``relay.events.routing_view``), with the same result.

The view must never change what a delivery becomes: for every real payload and every
odd shape below, ``describe`` on the view equals ``describe`` on the whole parsed
payload, and a body the view cannot read exactly is left to the full parser (which
answers as it always did: 400 for what is not a JSON object).
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from relay.app import create_app
from relay.events import describe, routing_view
from tests.conftest import WEBHOOKS
from tests.relay.harness import delivery, make_settings, post_webhook, pr_payload

EVENTS = {
    "pull_request": "pull_request",
    "push": "push",
    "check_run": "check_run",
    "issue_comment": "issue_comment",
    "ping": "ping",
    "installation": "installation",
    "workflow_run": "workflow_run",
    "repository_dispatch": "repository_dispatch",
}


def _real_payloads() -> list[tuple[str, str, bytes]]:
    out = []
    for path in sorted(WEBHOOKS.rglob("*.json")):
        data = json.loads(path.read_text())
        if "payload" in data and "name" in data:  # pytorch/test-infra's {name, id, payload} wrapper
            data = data["payload"]
        name = path.parent.name if path.parent.name in EVENTS else path.stem.split(".")[0]
        event = {"pull_request_comment": "issue_comment"}.get(name, name)
        for ev in sorted({event, "pull_request", "push", "issue_comment", "check_run"}):  # sorted: xdist workers must collect the same ids
            out.append((str(path.relative_to(WEBHOOKS)), ev, json.dumps(data).encode()))
    return out


@pytest.mark.parametrize(("name", "event", "body"), _real_payloads())
def test_view_describes_every_real_payload_as_the_full_parse(name: str, event: str, body: bytes) -> None:
    view = routing_view(body)
    assert view is not None, name
    assert describe(event, view) == describe(event, json.loads(body))


ODD = [
    b'{"action":"opened","action":"closed","repository":{"full_name":"a/b"}}',  # a repeated key: the last wins
    b'{"repository":{"full_name":"x"},"repository":{"name":"y"}}',
    b'{"repository":null,"repository":{"full_name":"a/b"}}',
    b'{"pull_request":{"number":1,"head":{"sha":"s","ref":"r"},"labels":[{"name":"x"},3,{"name":4}]},"number":2}',
    b'{"pull_request":{"number":true,"labels":"x","author_association":7}}',
    b'{"pull_request":{"number":123456789012345678901234567890}}',  # over 64 bits
    b'{"pull_request":{"number":1.0}}',
    b'{"issue":{"number":3,"pull_request":null}}',
    b'{"issue":{"number":3}}',
    b'{"check_run":{"head_sha":"abc"}}',
    b'{"after":"abc","ref":"refs/heads/main","commits":[{"added":["a"],"modified":[1,"b"]},7]}',
    b'{"action":"opened","x":NaN,"y":Infinity}',  # json reads NaN too (orjson does not)
    b'{"action":NaN,"number":-Infinity}',
    b'{"action":"\\u00e9\\ud83d\\ude00"}',
    b"{}",
]


@pytest.mark.parametrize("body", ODD)
@pytest.mark.parametrize("event", ["pull_request", "push", "issue_comment", "check_run", "ping"])
def test_view_describes_odd_shapes_as_the_full_parse(event: str, body: bytes) -> None:
    view = routing_view(body)
    assert view is not None
    assert describe(event, view) == describe(event, json.loads(body))


@pytest.mark.parametrize(
    "body",
    [
        b'{"repository":"a/b"}',  # a read field of the wrong shape: parsed whole
        b'{"repository":{"full_name":"x"},"repository":null}',
        b'{"pull_request":{"head":[]}}',
        b'{"action":"\\ud800"}',  # a lone surrogate: json reads it, the view does not
        b'\xef\xbb\xbf{"action":"a"}',  # a byte-order mark
        b'{"action":"a","x":' + b"[" * 300 + b"]" * 300 + b"}",
        b"[1]",
        b'"x"',
        b'{"action":"a"',
        b'{"action":"a","x":"\xff"}',
        b'{"a":1} x',
        b"",
    ],
)
def test_view_leaves_what_it_cannot_read_exactly_to_the_full_parser(body: bytes) -> None:
    assert routing_view(body) is None


def test_webhook_answers_as_before_for_bodies_the_view_refuses(tmp_path) -> None:
    """A lone surrogate (json.loads reads it) is still stored and dispatched; an array is still a 400."""
    settings = make_settings(tmp_path)
    app = create_app(settings, start_worker=False, start_sweeper=False)
    with TestClient(app) as client:
        body = json.dumps(pr_payload()).encode().replace(b'"body": "text"', b'"body": "\\ud800"')
        assert b"\\ud800" in body and routing_view(body) is None
        r = post_webhook(client, "pull_request", None, body=body, delivery="surrogate-1")
        assert r.status_code == 202, r.text
        stored = delivery(app.state.runtime, "surrogate-1")
        assert (stored.pr_number, stored.head_sha) == (7, "a" * 40)
        r = post_webhook(client, "pull_request", None, body=b"[1]", delivery="array-1")
        assert r.status_code == 400
        assert r.json()["error"] == "body is not a JSON object"
