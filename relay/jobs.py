"""The per-job state machine of downstream callbacks (CRCR's contract).

A job is keyed by (delivery, repo, run_id, run_attempt, job_name) and only moves
forward: DISPATCHED -> IN_PROGRESS -> COMPLETED. A callback with no prior dispatch,
a duplicate (the same state twice, e.g. a replayed completion), a step backwards, or
a skipped step (completed before in_progress) is rejected and changes nothing, except
for self-scheduled runs: CRCR's action sends a nightly/periodic run's ``completed``
alone, so there it is accepted without a prior in_progress (as CRCR accepts it).

DISPATCHED is proven by the dispatch row of (delivery, repo) in the core store; a job
row itself appears with the first callback (``queued`` creates it in DISPATCHED,
``in_progress`` in IN_PROGRESS), because a dispatch does not know the run ids the
downstream CI will pick. Self-scheduled runs (``nightly``/``periodic``) have no
dispatch: their ``delivery_id`` is an upstream commit SHA; with a ``crcr:`` allowlist
section it is accepted only when that commit exists upstream (asked once through
GitHub, the answer cached in ``upstream_commits``).

Queue time = dispatch -> in_progress; execution time = in_progress -> completed.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from crcr.contracts.callback import MAX_VERDICT_BYTES, CallbackBody, TriageVerdict
from crcr.store.deliveries import Delivery, Dispatch
from crcr.store.jobs import COMPLETED, DISPATCHED, IN_PROGRESS, Job, UpstreamCommit

SELF_SCHEDULED = ("nightly", "periodic")
SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")
# a commit that was not found may still be pushed later; ask again after this long
NEGATIVE_TTL = dt.timedelta(minutes=10)
_ORDER = {DISPATCHED: 0, IN_PROGRESS: 1, COMPLETED: 2}
_STATUS_TO_STATE = {"queued": DISPATCHED, "in_progress": IN_PROGRESS, "completed": COMPLETED}


class CallbackRejected(Exception):
    """The callback breaks the state machine or names nothing known; ``status`` is the HTTP answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class UpstreamUnavailable(Exception):
    """GitHub could not say whether a commit exists; the caller should retry later (503)."""


@dataclass
class Applied:
    """What one accepted callback did."""

    job: Job
    previous: str | None
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        j = self.job
        return {
            "delivery_id": j.delivery_id,
            "repo": j.repo,
            "run_id": j.run_id,
            "run_attempt": j.run_attempt,
            "job_name": j.job_name,
            "state": j.state,
            "queue_time_s": j.queue_time_s,
            "execution_time_s": j.execution_time_s,
        }


def as_utc(value: dt.datetime | None) -> dt.datetime | None:
    """SQLite hands datetimes back naive; everything crcr stores is UTC."""
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _seconds(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    start, end = as_utc(start), as_utc(end)
    if start is None or end is None:
        return None
    return max(0.0, round((end - start).total_seconds(), 3))


def job_key(repo: str, body: CallbackBody) -> tuple[str, str, str, str, str]:
    wf = body.workflow
    return (body.delivery_id, repo, wf.run_id or "", wf.run_attempt or "1", wf.job_name or "")


def find_job(session: Session, key: tuple[str, str, str, str, str]) -> Job | None:
    delivery_id, repo, run_id, run_attempt, job_name = key
    return session.scalar(
        select(Job).where(
            Job.delivery_id == delivery_id,
            Job.repo == repo,
            Job.run_id == run_id,
            Job.run_attempt == run_attempt,
            Job.job_name == job_name,
        )
    )


def find_dispatch(session: Session, delivery_id: str, repo: str) -> Dispatch | None:
    # GitHub repo names are case-insensitive; the token's claim and the allowlist may differ in case
    rows = session.scalars(select(Dispatch).where(Dispatch.delivery_id == delivery_id)).all()
    for row in rows:
        if row.target.lower() == repo.lower():
            return row
    return None


def commit_exists_cached(
    session: Session,
    upstream_repo: str,
    sha: str,
    lookup: Callable[[str], bool | None],
    now: dt.datetime,
) -> bool:
    """Does ``sha`` exist in ``upstream_repo``? Asked through ``lookup`` once, then cached.

    ``lookup`` returns True/False, or None when GitHub could not answer (not cached).
    A found commit is cached for good; a missing one for ``NEGATIVE_TTL``.
    """
    row = session.get(UpstreamCommit, (sha, upstream_repo))
    if row is not None and (row.exists or now - as_utc(row.checked_at) < NEGATIVE_TTL):
        return row.exists
    answer = lookup(sha)
    if answer is None:
        raise UpstreamUnavailable(f"could not ask GitHub whether {upstream_repo}@{sha} exists")
    if row is None:
        try:
            with session.begin_nested():
                session.add(UpstreamCommit(sha=sha, repo=upstream_repo, exists=answer, checked_at=now))
        except IntegrityError:  # another replica cached it first: same answer
            pass
    else:
        row.exists, row.checked_at = answer, now
    return answer


def validate_verdict(raw: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
    """The verdict as stored, or (None, why it was dropped). Never half-applied."""
    if raw is None:
        return None, None
    try:
        size = len(json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError):
        return None, "triage_verdict dropped: not serialisable"
    if size > MAX_VERDICT_BYTES:
        return None, f"triage_verdict dropped: {size} bytes, the limit is {MAX_VERDICT_BYTES}"
    try:
        verdict = TriageVerdict.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(root)"
        return None, f"triage_verdict dropped: {loc}: {first['msg']}"
    return verdict.model_dump(mode="json"), None


def apply_callback(
    session: Session,
    repo: str,
    body: CallbackBody,
    *,
    now: dt.datetime,
    upstream_repo: str,
    commit_lookup: Callable[[str], bool | None],
    crcr_mode: bool = True,
) -> Applied:
    """Move the job named by ``body`` one step forward, or raise CallbackRejected.

    The caller commits; on rejection nothing was written. ``crcr_mode`` (a ``crcr:``
    allowlist section): a nightly/periodic SHA must exist upstream (asked through GitHub)
    and such runs may also report in_progress. Without it, as CRCR: the SHA is only a
    correlation key, and a self-scheduled run reports ``completed`` only (400 otherwise).
    """
    status = body.workflow.status
    target_state = _STATUS_TO_STATE[status]
    key = job_key(repo, body)
    dispatch = find_dispatch(session, body.delivery_id, repo)
    self_scheduled = False
    if dispatch is None:
        if body.event_type not in SELF_SCHEDULED:
            raise CallbackRejected(
                409, f"no dispatch of delivery {body.delivery_id!r} to {repo}: callbacks answer a dispatch"
            )
        sha = body.delivery_id.lower()
        if not SHA_RE.match(sha):
            raise CallbackRejected(400, f"a {body.event_type} callback's delivery_id must be an upstream commit SHA")
        if not crcr_mode and status != "completed":
            raise CallbackRejected(400, f"nightly/periodic callbacks must have status 'completed', got {status!r}")
        if crcr_mode and not commit_exists_cached(session, upstream_repo, sha, commit_lookup, now):
            raise CallbackRejected(409, f"commit {sha} does not exist in {upstream_repo}")
        self_scheduled = True

    job = find_job(session, key)
    previous = job.state if job else None
    if job is not None:
        if _ORDER[target_state] <= _ORDER[job.state]:
            what = "duplicate" if target_state == job.state else "out-of-order"
            raise CallbackRejected(409, f"{what} callback: job is already {job.state}, got {status}")
    elif target_state == COMPLETED and not self_scheduled:
        # nightly/periodic runs report only `completed` (CRCR's action never sends in_progress there);
        # 400 as CRCR (utils/redis_helper.py set_callback_state: None -> COMPLETED is an invalid transition)
        raise CallbackRejected(400, "completed before in_progress: a job must report in_progress first")

    warnings: list[str] = []
    if job is None:
        delivery = dispatch.delivery if dispatch is not None else None
        job = Job(
            delivery_id=key[0], repo=key[1], run_id=key[2], run_attempt=key[3], job_name=key[4],
            state=DISPATCHED,
            event_type=body.event_type,
            self_scheduled=self_scheduled,
            dispatched_at=(dispatch.sent_at or dispatch.created_at) if dispatch is not None else None,
            head_sha=(delivery.head_sha if isinstance(delivery, Delivery) else body.delivery_id.lower()),
            pr_number=delivery.pr_number if isinstance(delivery, Delivery) else None,
        )
        try:
            with session.begin_nested():
                session.add(job)
                session.flush()
        except IntegrityError as exc:  # a concurrent identical callback won the insert
            raise CallbackRejected(409, "duplicate callback: this job was just created by another request") from exc

    wf = body.workflow
    job.workflow_name = wf.name or job.workflow_name
    job.url = wf.url or job.url
    job.artifact_url = wf.artifact_url or job.artifact_url
    if target_state == IN_PROGRESS:
        job.in_progress_at = now
        job.queue_time_s = _seconds(job.dispatched_at, now)
    elif target_state == COMPLETED:
        job.completed_at = now
        job.execution_time_s = _seconds(job.in_progress_at, now)
        job.conclusion = wf.conclusion
    job.state = target_state
    if wf.test_results is not None:
        job.test_results = wf.test_results  # stored in whatever JSON shape it came, as CRCR does
        counts = wf.counts()
        if counts is not None:
            job.passed, job.failed, job.skipped = counts.passed, counts.failed, counts.skipped
    if body.failed_tests is not None:
        job.failed_tests = [t[:500] for t in body.failed_tests if isinstance(t, str)]
    verdict, why = validate_verdict(body.triage_verdict)
    if verdict is not None:
        job.triage_verdict = verdict
    if why:
        warnings.append(why)
    session.flush()
    return Applied(job=job, previous=previous, warnings=warnings)
