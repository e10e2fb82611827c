"""A relay wired for PR-command tests: the real app on SQLite/PostgreSQL, the fake GitHub
(driven by PyGithub), a local OIDC issuer for callbacks, and an immediate queue so a
queued command or dispatch has run by the time the webhook is answered.

Payloads are real GitHub webhooks from ``tests/fixtures/webhooks`` with their bodies
varied per case: PyTorch test-infra's PR comment (an ``issue_comment`` on a PR),
octokit's ``issue_comment`` (on an issue: no ``pull_request`` key) and octokit's
``pull_request`` opened.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import itertools
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from crcr.queue import make_huey
from crcr.store.commands import Command, PrComment
from crcr.store.deliveries import Dispatch
from relay.app import create_app
from relay.runtime import Runtime
from tests.conftest import WEBHOOKS
from tests.fakes.github import FakeGitHub
from tests.fakes.oidc import FakeIssuer
from tests.relay.callbacks_harness import UPSTREAM, Clock, Harness, make_settings

ALLOWLIST = """\
L1:
  - org/l1
L2:
  - org/l2
L3:
  npu:
    org/l3: [npu-oncall]
L4:
  - org/l4: oncall1, oncall2
crcr:
  trust:
    trusted_users: [friend]
  targets:
    org/l1:
      events: [push]
    org/l4:
      untrusted: true
"""
PLAIN_ALLOWLIST = ALLOWLIST.split("crcr:")[0]  # CRCR's own format: no crcr: key

PR_OPENED = json.loads((WEBHOOKS / "octokit-webhooks/pull_request/opened.payload.json").read_text())
PR_COMMENT = json.loads((WEBHOOKS / "pytorch-test-infra/pull_request_comment.json").read_text())["payload"]
ISSUE_COMMENT = json.loads((WEBHOOKS / "octokit-webhooks/issue_comment/created.payload.json").read_text())
SHA_A = "a" * 40
SHA_B = "b" * 40
_ids = itertools.count(3_000_000_000)  # real comment ids are past 32 bits


def pr_event(action: str = "opened", *, number: int = 7, sha: str = SHA_A, association: str = "NONE",
             labels: list[str] | None = None, label: str | None = None, sender: str = "author") -> dict[str, Any]:
    p = copy.deepcopy(PR_OPENED)
    p["action"], p["number"] = action, number
    pr = p["pull_request"]
    pr["number"], pr["author_association"] = number, association
    pr["head"]["sha"] = sha
    pr["labels"] = [{"name": n} for n in (labels or [])]
    p["repository"]["full_name"] = UPSTREAM
    p["sender"]["login"] = sender
    if label is not None:
        p["label"] = {"name": label, "color": "ededed"}
    return p


def comment_event(body: str, *, login: str = "maint", number: int = 7, comment_id: int | None = None,
                  action: str = "created", on_pr: bool = True, bot: bool = False) -> dict[str, Any]:
    p = copy.deepcopy(PR_COMMENT if on_pr else ISSUE_COMMENT)
    p["action"] = action
    p["issue"]["number"] = number
    p["comment"]["id"] = comment_id if comment_id is not None else next(_ids)
    p["comment"]["body"] = body
    p["comment"]["user"]["login"] = login
    p["comment"]["user"]["type"] = "Bot" if bot else "User"
    p["sender"]["login"] = login
    p["repository"]["full_name"] = UPSTREAM
    return p


class CommandHarness(Harness):
    gh: FakeGitHub

    def webhook(self, event: str, payload: dict[str, Any], *, delivery: str | None = None):
        body = json.dumps(payload).encode()
        sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
        r = self.client.post("/webhook", content=body, headers={
            "X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": sig, "Content-Type": "application/json"})
        assert r.status_code in (200, 202), r.text
        return r

    def comment(self, body: str, **kw: Any) -> dict[str, Any]:
        payload = comment_event(body, **kw)
        self.webhook("issue_comment", payload)
        return payload

    def rows(self, state: str | None = None) -> list[Dispatch]:
        with self.runtime.sessions() as s:
            q = select(Dispatch).order_by(Dispatch.id)
            if state:
                q = q.where(Dispatch.state == state)
            return list(s.scalars(q))

    def commands(self) -> list[Command]:
        with self.runtime.sessions() as s:
            return list(s.scalars(select(Command).order_by(Command.id)))

    def pr_comments(self) -> list[PrComment]:
        with self.runtime.sessions() as s:
            return list(s.scalars(select(PrComment).order_by(PrComment.id)))

    def sent_to(self) -> list[str]:
        """Downstream repos that got a repository_dispatch, in order."""
        return [r.path.split("/")[2] + "/" + r.path.split("/")[3] for r in self.gh.dispatches() if r.status == 204]

    def replies(self, number: int = 7, kind: str = "reply") -> list[dict[str, Any]]:
        """crcr's comments of one kind on the PR (reply: answers to commands; oncall: pings)."""
        return [c for c in self.gh.comments_on(UPSTREAM, number) if c["body"].startswith(f"<!-- crcr:{kind} -->")]


@contextmanager
def command_relay(tmp_path: Path, gh: FakeGitHub, *, allowlist: str = ALLOWLIST,
                  database_url: str | None = None) -> Iterator[CommandHarness]:
    with FakeIssuer() as issuer:
        settings = make_settings(tmp_path, issuer, database_url=database_url, github_api_url=gh.url,
                                 github_app_id=gh.app_id, github_private_key=gh.private_key_pem)
        (tmp_path / "allowlist.yaml").write_text(allowlist)
        clock = Clock()
        runtime = Runtime.from_settings(settings, clock=clock,
                                        huey=make_huey(settings.resolved_queue_url, immediate=True))
        app = create_app(settings, runtime=runtime, start_worker=False, start_sweeper=False)
        with TestClient(app) as client:
            h = CommandHarness(client, runtime, issuer, clock)
            h.gh = gh
            yield h
