"""A ``History`` from the relay's database: trunk pushes, jobs, results uploads, rerun requests.

- Trunk order comes from the stored ``push`` webhooks of the upstream repository on the
  trunk ref, in the order they were received; each push lists its commits oldest first
  (a ghstack stack lands as one push with several commits, only the last dispatched).
  PR numbers come from the landed commit messages (``(#123)`` or a ``/pull/123`` link).
- Runs are the backend's jobs of push and self-scheduled (nightly/periodic) deliveries;
  their per-test outcomes come from the results uploads (the callback's
  ``failed_tests`` when no upload came), and the tested torch SHA from the upload.
- Deliveries named ``<id>/rerun/<n>`` are reruns; ``triage_rerun_requests`` rows not yet
  answered by a completed job are outstanding.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from crcr.store.deliveries import Delivery, Dispatch
from crcr.store.jobs import COMPLETED, Job, ResultsUpload
from crcr.store.triage import DISPATCHED, REQUESTED, RerunRequest
from triage.history import Commit, History, RerunRecord, Run, pr_of_message

TRUNK_EVENTS = ("push", "nightly", "periodic")


def _minutes(value: dt.datetime | None) -> float | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp() / 60.0


def _push_commits(delivery: Delivery) -> list[dict[str, Any]]:
    try:
        payload = json.loads(delivery.payload or "{}")
    except ValueError:
        return []
    commits = payload.get("commits") if isinstance(payload, dict) else None
    return [c for c in commits if isinstance(c, dict) and isinstance(c.get("id"), str)] if isinstance(commits, list) else []


def diff_summary(commit: dict[str, Any], limit: int = 2000) -> str:
    """The files a pushed commit added, modified and removed (GitHub lists them per commit)."""
    parts = []
    for key in ("added", "modified", "removed"):
        files = [f for f in commit.get(key) or [] if isinstance(f, str)]
        if files:
            parts.append(f"{key}: " + ", ".join(files[:50]) + (f" (+{len(files) - 50} more)" if len(files) > 50 else ""))
    return "; ".join(parts)[:limit]


def is_rerun_delivery(delivery_id: str) -> bool:
    return "/rerun/" in delivery_id


def from_store(sessions: sessionmaker, backend: str, *, upstream_repo: str, since: dt.datetime | None = None,
               trunk_ref: str = "refs/heads/main") -> History:
    with sessions() as s:
        return _load(s, backend, upstream_repo, since, trunk_ref)


def _load(s: Session, backend: str, upstream_repo: str, since: dt.datetime | None, trunk_ref: str) -> History:
    q = select(Delivery).where(Delivery.event == "push", Delivery.ref == trunk_ref,
                               or_(Delivery.repo.is_(None), Delivery.repo == upstream_repo))
    if since is not None:
        q = q.where(Delivery.received_at >= since)
    order: dict[str, Commit] = {}
    for d in s.scalars(q.order_by(Delivery.received_at, Delivery.id)):
        if is_rerun_delivery(d.id):
            continue
        listed = _push_commits(d) or ([{"id": d.head_sha, "message": ""}] if d.head_sha else [])
        for c in listed:
            sha = c["id"][:64]
            if sha in order:
                continue
            message = c.get("message") if isinstance(c.get("message"), str) else ""
            order[sha] = Commit(sha=sha, position=len(order), pr=pr_of_message(message),
                                title=message.splitlines()[0][:300] if message else "", push=d.id,
                                diff_summary=diff_summary(c))
    jq = select(Job).where(Job.repo == backend, Job.event_type.in_(TRUNK_EVENTS), Job.head_sha.is_not(None))
    if since is not None:
        jq = jq.where(or_(Job.dispatched_at.is_(None), Job.dispatched_at >= since))
    jobs = list(s.scalars(jq.order_by(Job.id)))
    runs: list[Run] = []
    unplaced = []
    for job in jobs:
        sha = (job.head_sha or "")[:64]
        if sha not in order:
            unplaced.append(sha)
        uploads = list(s.scalars(select(ResultsUpload).where(ResultsUpload.job_id == job.id)))
        tests: dict[str, str] = {}
        messages: dict[str, str] = {}
        tested = None
        for up in uploads:
            try:
                body = json.loads(gzip.decompress(up.body_gz))
            except (OSError, ValueError):
                continue
            tested = tested or up.upstream_sha
            if up.upstream_sha and up.upstream_sha != sha:
                tested = up.upstream_sha
            for t in body.get("tests", []):
                if isinstance(t, dict) and isinstance(t.get("id"), str) and isinstance(t.get("outcome"), str):
                    tests[t["id"]] = t["outcome"]
                    if t.get("message"):
                        messages[t["id"]] = str(t["message"])[:2000]
        if not uploads and job.failed_tests:
            tests = {t: "failed" for t in job.failed_tests}
        completed = job.state == COMPLETED
        log = "\n".join(list(messages.values())[:5])
        runs.append(Run(
            sha=sha, job=job.job_name, attempt=int(job.run_attempt) if job.run_attempt.isdigit() else 1,
            conclusion=(job.conclusion or "unknown") if completed else None, tested_sha=tested,
            tests=tests, messages=messages, log=log,
            started=_minutes(job.in_progress_at or job.dispatched_at), completed=_minutes(job.completed_at),
            rerun=is_rerun_delivery(job.delivery_id), url=job.url,
            has_results=bool(uploads) or bool(job.failed_tests) or job.conclusion == "success",
        ))
    # dispatched to the backend but no job has called back yet: in flight, not untested
    reported = {j.delivery_id for j in jobs}
    dq = select(Dispatch.delivery_id, Delivery.head_sha).join(Delivery, Dispatch.delivery_id == Delivery.id).where(
        Dispatch.target == backend, Delivery.event == "push", Dispatch.state.in_(("pending", "retrying", "sent")))
    if since is not None:
        dq = dq.where(Dispatch.created_at >= since)
    for delivery_id, head in s.execute(dq):
        if delivery_id not in reported and head and head[:64] in order:
            runs.append(Run(sha=head[:64], job="(dispatched, not started)", conclusion=None,
                            rerun=is_rerun_delivery(delivery_id), has_results=False))
    for sha in unplaced:  # self-scheduled runs on commits no stored push listed: append in run order
        if sha not in order:
            order[sha] = Commit(sha=sha, position=len(order))
    done_deliveries = {j.delivery_id for j in jobs if j.state == COMPLETED}
    requests = [RerunRecord(sha=r.sha, outstanding=r.state == REQUESTED
                            or (r.state == DISPATCHED and r.delivery_id not in done_deliveries))
                for r in s.scalars(select(RerunRequest).where(RerunRequest.backend == backend).order_by(RerunRequest.id))]
    history = History(backend=backend, commits=list(order.values()), runs=runs, requests=requests,
                      upstream_repo=upstream_repo)
    return history


def attach_verdict(sessions: sessionmaker, history: History, analysis: object, verdict: dict[str, Any]) -> int:
    """Store ``verdict`` on the backend's failing trunk jobs it explains (the ones at and
    after the first bad commit), so check-run summaries and the dashboard show it; returns
    how many jobs carry it now. The verdict was validated by ``triage.report.verdict``."""
    first_bad = getattr(analysis, "first_bad", None)
    if first_bad is None:
        return 0
    shas = [c.sha for c in history.commits[first_bad.position:]]
    from sqlalchemy import update

    with sessions.begin() as s:
        result = s.execute(update(Job).where(Job.repo == history.backend, Job.head_sha.in_(shas),
                                             Job.conclusion == "failure").values(triage_verdict=verdict))
        return int(result.rowcount or 0)
