"""Helpers for relay core tests: settings, a signed-webhook client, waiting for rows."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from crcr.settings import Settings
from crcr.store.deliveries import Delivery, Dispatch
from relay.intake import sign
from relay.runtime import Runtime

SECRET = "It's a Secret to Everybody"
UPSTREAM = "pytorch/pytorch"

ALLOWLIST = """\
L1:
  - org/l1
L2:
  - org/l2
L3:
  npu:
    org/l3: [oncall1]
L4:
  - org/l4: oncall1, oncall2
crcr:
  targets:
    org/l1:
      events: [push]
    org/l2:
      paths: ["torch/csrc/**"]
    org/l4:
      untrusted: true
"""


def make_settings(tmp_path: Path, *, allowlist: str = ALLOWLIST, database_url: str | None = None,
                  github_url: str | None = None, app_id: str | None = None, key: str | None = None,
                  **extra: Any) -> Settings:
    allow = tmp_path / "allowlist.yaml"
    allow.write_text(allowlist)
    values: dict[str, Any] = dict(
        data_dir=tmp_path / "data", allowlist=str(allow), webhook_secret=SECRET, upstream_repo=UPSTREAM,
        database_url=database_url, queue_name=f"t{uuid.uuid4().hex[:10]}",
        dispatch_backoff_base_s=0.05, dispatch_backoff_max_s=0.2, dispatch_timeout_s=5,
    )
    if github_url:
        values.update(github_api_url=github_url, github_app_id=app_id, github_private_key=key)
    values.update(extra)
    return Settings(**values)


def pr_payload(action: str = "opened", *, number: int = 7, sha: str = "a" * 40, labels: list[str] | None = None,
               association: str = "MEMBER", repo: str = UPSTREAM, label: str | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {
        "action": action, "number": number,
        "pull_request": {"number": number, "head": {"sha": sha, "ref": "feature"}, "base": {"ref": "main"},
                         "labels": [{"name": n} for n in (labels or [])], "author_association": association,
                         "user": {"login": "author"}, "merged": False, "body": "text"},
        "repository": {"full_name": repo}, "sender": {"login": "author"},
    }
    if label is not None:
        p["label"] = {"name": label}
    return p


def push_payload(paths: list[str], *, repo: str = UPSTREAM) -> dict[str, Any]:
    return {"ref": "refs/heads/main", "before": "0" * 40, "after": "b" * 40,
            "commits": [{"id": "b" * 40, "added": [], "modified": paths, "removed": []}],
            "repository": {"full_name": repo}, "sender": {"login": "merger"}}


def post_webhook(client: TestClient, event: str, payload: Any, *, delivery: str | None = None,
                 secret: str = SECRET, body: bytes | None = None, headers: dict[str, str] | None = None):
    body = body if body is not None else json.dumps(payload).encode()
    h = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
         "X-Hub-Signature-256": sign(secret.encode(), body), "Content-Type": "application/json"}
    h.update(headers or {})
    return client.post("/webhook", content=body, headers=h)


def rows(runtime: Runtime, delivery_id: str | None = None) -> list[Dispatch]:
    with runtime.sessions() as s:
        q = select(Dispatch).order_by(Dispatch.target)
        if delivery_id:
            q = q.where(Dispatch.delivery_id == delivery_id)
        return list(s.scalars(q))


def delivery(runtime: Runtime, delivery_id: str) -> Delivery | None:
    with runtime.sessions() as s:
        return s.get(Delivery, delivery_id)


def wait_for(predicate: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll until ``predicate()`` is truthy (a deadline, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
