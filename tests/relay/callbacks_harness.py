"""A relay app wired for callback tests: real ASGI app, real SQLite/PostgreSQL, a local
OIDC issuer, an injected clock, and helpers that plant dispatches and send callbacks."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from crcr.settings import Settings
from crcr.store.deliveries import Delivery, Dispatch
from crcr.store.jobs import CallbackLog, CheckRun, Job, ResultsUpload
from relay.app import create_app
from relay.runtime import Runtime
from tests.fakes.oidc import FakeIssuer

ALLOWLIST = """\
L1:
  - org/l1repo
L2:
  - org/l2repo
L3:
  npu:
    org/l3repo: [oncall1]
L4:
  - org/l4repo: oncall1, oncall2
"""

UPSTREAM = "pytorch/pytorch"
HEAD_SHA = "0e797b5a6acf5a2c0e797b5a6acf5a2c0e797b5a"


class Clock:
    """A settable UTC clock (the relay reads it for every timestamp)."""

    def __init__(self) -> None:
        self.now = dt.datetime(2026, 11, 30, 6, 0, 0, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


class Harness:
    def __init__(self, client: TestClient, runtime: Runtime, issuer: FakeIssuer, clock: Clock) -> None:
        self.client, self.runtime, self.issuer, self.clock = client, runtime, issuer, clock

    # -- planting upstream state ----------------------------------------------------------
    def dispatch(self, delivery_id: str, repo: str, *, pr: int | None = 7, head_sha: str = HEAD_SHA,
                 labels: list[str] | None = None, event: str = "pull_request", action: str = "opened",
                 label: str | None = None) -> None:
        """A delivery and its sent dispatch to ``repo``, as intake + worker would leave them."""
        now = self.clock()
        payload = {"action": action, "number": pr, "repository": {"full_name": UPSTREAM},
                   "pull_request": {"number": pr, "head": {"sha": head_sha}, "labels": [{"name": n} for n in labels or []]}}
        with self.runtime.sessions.begin() as s:
            if s.get(Delivery, delivery_id) is None:
                s.add(Delivery(id=delivery_id, event=event, action=action, repo=UPSTREAM, pr_number=pr,
                               head_sha=head_sha, labels=labels or [], label=label, sender="someone",
                               payload=json.dumps(payload), payload_bytes=10, received_at=now))
                s.flush()
            level = self.runtime.allowlist.get().level_of(repo) or 1
            s.add(Dispatch(delivery_id=delivery_id, target=repo, kind="github", level=level, event_type=event,
                           state="sent", attempts=1, created_at=now, updated_at=now, sent_at=now,
                           next_attempt_at=now))

    # -- calling back ---------------------------------------------------------------------
    def body(self, status: str, delivery_id: str, *, run_id: str = "100", attempt: str | None = "1",
             job: str = "build", event_type: str = "pull_request", **extra: Any) -> dict[str, Any]:
        wf: dict[str, Any] = {"schema_version": "1", "status": status, "conclusion": None, "name": "CI",
                              "url": f"https://github.com/org/repo/actions/runs/{run_id}", "run_id": run_id,
                              "job_name": job, "started_at": None}
        if attempt is not None:
            wf["run_attempt"] = attempt
        top = {k: extra.pop(k) for k in ("failed_tests", "triage_verdict", "payload") if k in extra}
        wf.update(extra)
        return {"event_type": event_type, "delivery_id": delivery_id, "workflow": wf, **top}

    def callback(self, status: str, delivery_id: str, *, repo: str = "org/l2repo", token: str | None = None,
                 **kw: Any):
        token = token or self.issuer.mint(repository=repo)
        return self.client.post("/callback", json=self.body(status, delivery_id, **kw),
                                headers={"Authorization": f"Bearer {token}"})

    # -- reading state ----------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        with self.runtime.sessions() as s:
            return list(s.scalars(select(Job).order_by(Job.id)))

    def log(self) -> list[CallbackLog]:
        with self.runtime.sessions() as s:
            return list(s.scalars(select(CallbackLog).order_by(CallbackLog.id)))

    def checks(self) -> list[CheckRun]:
        with self.runtime.sessions() as s:
            return list(s.scalars(select(CheckRun).order_by(CheckRun.id)))

    def uploads(self) -> list[ResultsUpload]:
        with self.runtime.sessions() as s:
            return list(s.scalars(select(ResultsUpload).order_by(ResultsUpload.id)))


# crcr's own behaviours on (check runs updated in place, re-run by a new dispatch,
# nightly SHAs checked upstream, trust gating): the allowlist has a crcr: section
CRCR_MODE_ALLOWLIST = ALLOWLIST + "crcr: {}\n"


def make_settings(tmp_path: Path, issuer: FakeIssuer, *, database_url: str | None = None,
                  allowlist_text: str = ALLOWLIST, **overrides: Any) -> Settings:
    allowlist = tmp_path / "allowlist.yaml"
    allowlist.write_text(allowlist_text)
    values: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "database_url": database_url,
        "allowlist": str(allowlist),
        "oidc_issuers": [issuer.url],
        "upstream_repo": UPSTREAM,
        "webhook_secret": "s3cret",
    }
    values.update(overrides)
    return Settings(**values)


@contextmanager
def harness(tmp_path: Path, *, database_url: str | None = None, allowlist_text: str = ALLOWLIST,
            **overrides: Any) -> Iterator[Harness]:
    with FakeIssuer() as issuer:
        settings = make_settings(tmp_path, issuer, database_url=database_url, allowlist_text=allowlist_text,
                                 **overrides)
        clock = Clock()
        runtime = Runtime.from_settings(settings, clock=clock)
        app = create_app(settings, runtime=runtime, start_worker=False, start_sweeper=False)
        with TestClient(app) as client:
            yield Harness(client, runtime, issuer, clock)
