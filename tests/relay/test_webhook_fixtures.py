"""Every stored real webhook payload, signed, through the real ASGI app; effect asserted.

PyTorch's fixtures are wrapped as ``{name, id, payload}``; octokit's examples name
other repositories, so each test sets the upstream repo to the payload's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from crcr.queue import make_huey
from relay.app import create_app
from relay.runtime import Runtime
from tests.conftest import WEBHOOKS
from tests.relay.harness import delivery, make_settings, post_webhook, rows

ALLOW = "L1:\n  - org/a\nL4:\n  - org/b\ncrcr:\n  targets:\n    org/b:\n      untrusted: true\n"

# file -> (event, status, targets dispatched to, what the stored delivery says)
EXPECTED = {
    "octokit-webhooks/pull_request/opened.payload.json": ("pull_request", 202, ["org/a", "org/b"], "accepted"),
    "octokit-webhooks/pull_request/closed.payload.json": ("pull_request", 202, ["org/a", "org/b"], "accepted"),
    "octokit-webhooks/pull_request/synchronize.payload.json": ("pull_request", 202, ["org/a", "org/b"], "accepted"),
    "octokit-webhooks/push/with-new-branch.payload.json": ("push", 202, ["org/a", "org/b"], "accepted"),
    # author_association NONE: only the target that opts in to untrusted code
    "pytorch-test-infra/pull_request.opened.json": ("pull_request", 202, ["org/b"], "accepted"),
    "octokit-webhooks/ping/with-app_id.payload.json": ("ping", 200, [], "ping"),
    "octokit-webhooks/check_run/completed.payload.json": ("check_run", 200, [], "not dispatched"),
    "octokit-webhooks/check_run/rerequested.payload.json": ("check_run", 200, [], "not dispatched"),
    "octokit-webhooks/installation/created.payload.json": ("installation", 200, [], "not dispatched"),
    "octokit-webhooks/issue_comment/created.payload.json": ("issue_comment", 200, [], "not dispatched"),
    "pytorch-test-infra/pull_request_comment.json": ("issue_comment", 200, [], "not dispatched"),
    "octokit-webhooks/repository_dispatch/payload.json": ("repository_dispatch", 200, [], "not dispatched"),
    "octokit-webhooks/workflow_run/completed.with-pull-requests.payload.json": ("workflow_run", 200, [], "not dispatched"),
    "pytorch-test-infra/workflow_run.completed.json": ("workflow_run", 200, [], "not dispatched"),
}


def _load(rel: str) -> tuple[str | None, str | None, dict]:
    data = json.loads((WEBHOOKS / rel).read_text())
    if rel.startswith("pytorch-test-infra/"):
        return data["name"], data["id"], data["payload"]
    return None, None, data


def test_every_stored_fixture_is_covered():
    found = {str(p.relative_to(WEBHOOKS)) for p in Path(WEBHOOKS).rglob("*.json")}
    assert found == set(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_fixture_through_the_app(rel, tmp_path, fake_github):
    event, status, targets, outcome = EXPECTED[rel]
    name, delivery_id, payload = _load(rel)
    event = name or event
    delivery_id = delivery_id or f"fx-{Path(rel).stem}"
    upstream = (payload.get("repository") or {}).get("full_name") or "pytorch/pytorch"
    settings = make_settings(tmp_path, allowlist=ALLOW, upstream_repo=upstream, github_url=fake_github.url,
                             app_id=fake_github.app_id, key=fake_github.private_key_pem)
    # an immediate queue: the dispatch task runs inside the request, so its effect is visible at once
    runtime = Runtime.from_settings(settings, huey=make_huey(settings.resolved_queue_url, immediate=True))
    with TestClient(create_app(settings, runtime=runtime, start_worker=False, start_sweeper=False)) as client:
        r = post_webhook(client, event, payload, delivery=delivery_id)
        assert r.status_code == status, r.text
        stored = delivery(runtime, delivery_id)
        assert stored.event == event and stored.repo == (payload.get("repository") or {}).get("full_name")
        assert json.loads(stored.payload) == payload
        if outcome == "accepted":
            assert stored.status == "accepted"
        else:
            assert stored.status == "ignored" and outcome in stored.ignored_reason
        assert [x.target for x in rows(runtime, delivery_id) if x.state == "sent"] == targets
        sent = fake_github.dispatches()
        assert sorted(c.path.split("/")[3] for c in sent) == [t.split("/")[1] for t in targets]
        for call in sent:
            assert call.body["event_type"] == event
            assert call.body["client_payload"] == {"event_type": event, "delivery_id": delivery_id,
                                                   "payload": payload}
        if event == "pull_request":
            assert stored.pr_number == payload["pull_request"]["number"]
            assert stored.head_sha == payload["pull_request"]["head"]["sha"]
        if event == "push":
            assert stored.head_sha == payload["after"] and stored.ref == payload["ref"]
