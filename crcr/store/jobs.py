"""Tables of the callback side: downstream jobs, the callback log, results uploads,
check runs on the upstream PR, and the cache of upstream commit lookups.

A job is one downstream CI job reporting back, keyed by CRCR's tuple
(delivery, repo, run_id, run_attempt, job_name). Its dispatch lives in the
dispatches table (the core store); a self-scheduled run (nightly/periodic) has none
and is keyed by the upstream commit SHA instead.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from crcr.store.base import Base

# job states, in the only order they may be reached
DISPATCHED = "dispatched"
IN_PROGRESS = "in_progress"
COMPLETED = "completed"
JOB_STATES = (DISPATCHED, IN_PROGRESS, COMPLETED)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Job(Base):
    """One downstream job and where it is in DISPATCHED -> IN_PROGRESS -> COMPLETED."""

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("delivery_id", "repo", "run_id", "run_attempt", "job_name", name="uq_jobs_key"),
        Index("ix_jobs_repo_delivery", "repo", "delivery_id"),
        Index("ix_jobs_head_sha", "head_sha"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(300))
    repo: Mapped[str] = mapped_column(String(200))
    run_id: Mapped[str] = mapped_column(String(100))
    run_attempt: Mapped[str] = mapped_column(String(20))
    job_name: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(20), default=DISPATCHED)
    event_type: Mapped[str] = mapped_column(String(100), default="pull_request")
    self_scheduled: Mapped[bool] = mapped_column(Boolean, default=False)
    workflow_name: Mapped[str | None] = mapped_column(String(200))
    url: Mapped[str | None] = mapped_column(String(2000))
    artifact_url: Mapped[str | None] = mapped_column(String(2000))
    conclusion: Mapped[str | None] = mapped_column(String(50))
    # upstream context, copied from the delivery so check runs need no payload
    head_sha: Mapped[str | None] = mapped_column(String(64))
    pr_number: Mapped[int | None] = mapped_column(Integer)
    dispatched_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    in_progress_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    queue_time_s: Mapped[float | None] = mapped_column(Float)
    execution_time_s: Mapped[float | None] = mapped_column(Float)
    passed: Mapped[int | None] = mapped_column(Integer)
    failed: Mapped[int | None] = mapped_column(Integer)
    skipped: Mapped[int | None] = mapped_column(Integer)
    failed_tests: Mapped[list[str] | None] = mapped_column(JSON)
    test_results: Mapped[Any | None] = mapped_column(JSON)  # as the callback sent it: any JSON (CRCR stores any)
    triage_verdict: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)

    check_runs: Mapped[list[CheckRun]] = relationship(back_populates="job")

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.delivery_id, self.repo, self.run_id, self.run_attempt, self.job_name)


class CallbackLog(Base):
    """Every authenticated callback or upload, accepted or not (also the rate limiter's window)."""

    __tablename__ = "callback_log"
    __table_args__ = (Index("ix_callback_log_repo_kind_at", "repo", "kind", "received_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    received_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    kind: Mapped[str] = mapped_column(String(20), default="callback")  # callback | results
    repo: Mapped[str] = mapped_column(String(200))
    delivery_id: Mapped[str | None] = mapped_column(String(300))
    status: Mapped[str | None] = mapped_column(String(20))
    outcome: Mapped[str] = mapped_column(String(20))  # accepted | rejected | ignored | rate_limited
    http_status: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))


class ResultsUpload(Base):
    """The full per-test results of one job (crcr.contracts.results JSON, gzip-compressed)."""

    __tablename__ = "results_uploads"
    __table_args__ = (Index("ix_results_uploads_job", "job_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    repo: Mapped[str] = mapped_column(String(200))
    received_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    device: Mapped[str | None] = mapped_column(String(100))
    upstream_sha: Mapped[str | None] = mapped_column(String(64))
    shard: Mapped[str | None] = mapped_column(String(20))
    counts: Mapped[dict[str, int]] = mapped_column(JSON)
    size_bytes: Mapped[int] = mapped_column(Integer)
    body_gz: Mapped[bytes] = mapped_column(LargeBinary)


class CheckRun(Base):
    """A check run crcr keeps on the upstream PR for one job; the row is the desired state."""

    __tablename__ = "check_runs"
    __table_args__ = (
        UniqueConstraint("job_id", name="uq_check_runs_job_id"),
        Index("ix_check_runs_github_id", "github_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    upstream_repo: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(500))
    head_sha: Mapped[str] = mapped_column(String(64))
    github_id: Mapped[int | None] = mapped_column(BigInteger)  # GitHub's check-run ids pass 2**31
    status: Mapped[str] = mapped_column(String(20))  # in_progress | completed
    conclusion: Mapped[str | None] = mapped_column(String(50))
    synced: Mapped[bool] = mapped_column(Boolean, default=False)
    last_error: Mapped[str | None] = mapped_column(Text)
    # a pusher's claim on one version of the row (relay.checks): GitHub is called outside any
    # row lock, and only the claim holder of the current version writes the outcome
    push_claimed_until: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)

    job: Mapped[Job] = relationship(back_populates="check_runs")


class UpstreamCommit(Base):
    """Cached answer to "does this commit exist upstream?" (self-scheduled callbacks)."""

    __tablename__ = "upstream_commits"

    sha: Mapped[str] = mapped_column(String(64), primary_key=True)
    repo: Mapped[str] = mapped_column(String(200), primary_key=True)
    exists: Mapped[bool] = mapped_column(Boolean)
    checked_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def prune_callback_data(sessions: Any, cutoff: dt.datetime, *, batch: int = 1000) -> dict[str, int]:
    """Retention for this module's tables: delete callback-log rows and results uploads
    received before ``cutoff`` (jobs and check runs stay: they are small and are history).

    Meant for ``crcr db prune --older-than DAYS`` beside the delivery payloads; returns
    how many rows of each table went.
    """
    from sqlalchemy import delete, select

    removed = {"callback_log": 0, "results_uploads": 0}
    for name, model, column in (("callback_log", CallbackLog, CallbackLog.received_at),
                                ("results_uploads", ResultsUpload, ResultsUpload.received_at)):
        while True:  # in batches: a long retention backlog never holds one huge transaction
            with sessions.begin() as s:
                ids = list(s.scalars(select(model.id).where(column < cutoff).limit(batch)))
                if not ids:
                    break
                s.execute(delete(model).where(model.id.in_(ids)))
                removed[name] += len(ids)
    return removed
