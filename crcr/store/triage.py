"""Triage's tables: rerun requests (triage -> relay) and posted reports (deduplication).

Triage never imports the relay: it asks for a run at an upstream commit by writing a
``triage_rerun_requests`` row; a relay worker task (``relay.rerun_requests``) turns each
due row into a push-event dispatch for that SHA to the backend and records the delivery
it created. ``triage_posts`` remembers what was posted per (backend, suspect, kind) so a
report is posted once.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import DateTime, Index, Integer, String, Text, UniqueConstraint, func, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from crcr.store.base import Base

# rerun request states
REQUESTED = "requested"
DISPATCHED = "dispatched"
FAILED = "failed"
RERUN_STATES = (REQUESTED, DISPATCHED, FAILED)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class RerunRequest(Base):
    """Run the backend's trunk job at one upstream commit (bisection or reproduction)."""

    __tablename__ = "triage_rerun_requests"
    __table_args__ = (
        Index("ix_triage_rerun_requests_backend_sha", "backend", "sha"),
        Index("ix_triage_rerun_requests_state_due", "state", "not_before"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    backend: Mapped[str] = mapped_column(String(200))  # the downstream repo (an allowlist target)
    sha: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text, default="")
    state: Mapped[str] = mapped_column(String(20), default=REQUESTED)
    requested_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    not_before: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    dispatched_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    delivery_id: Mapped[str | None] = mapped_column(String(300))  # the rerun delivery it created
    error: Mapped[str | None] = mapped_column(Text)


class TriagePost(Base):
    """One report posted (or drafted, in dry-run) for a (backend, suspect, kind)."""

    __tablename__ = "triage_posts"
    __table_args__ = (UniqueConstraint("backend", "suspect", "kind", name="uq_triage_posts_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    backend: Mapped[str] = mapped_column(String(200))
    suspect: Mapped[str] = mapped_column(String(64))  # SHA, or a range "a..b"
    kind: Mapped[str] = mapped_column(String(20))  # issue | comment
    target: Mapped[str] = mapped_column(String(300))  # owner/repo#number
    url: Mapped[str | None] = mapped_column(String(2000))
    posted_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def add_rerun_requests(session: Session, backend: str, shas: list[str], reason: str, *, now: dt.datetime,
                       max_open: int = 2, max_per_hour: int = 6, spacing: dt.timedelta = dt.timedelta(minutes=2)
                       ) -> list[RerunRequest]:
    """Write rerun requests, paced: at most ``max_open`` not yet dispatched and ``max_per_hour``
    per backend; each due ``spacing`` after the previous one. Returns the rows written."""
    open_count = session.scalar(select(func.count()).select_from(RerunRequest).where(
        RerunRequest.backend == backend, RerunRequest.state == REQUESTED)) or 0
    hour = session.scalar(select(func.count()).select_from(RerunRequest).where(
        RerunRequest.backend == backend, RerunRequest.requested_at >= now - dt.timedelta(hours=1))) or 0
    latest = session.scalar(select(func.max(RerunRequest.not_before)).where(RerunRequest.backend == backend))
    if latest is not None and latest.tzinfo is None:
        latest = latest.replace(tzinfo=dt.UTC)
    due = max(now, latest + spacing) if latest is not None else now
    rows = []
    for sha in shas:
        if open_count >= max_open or hour >= max_per_hour:
            break
        row = RerunRequest(backend=backend[:200], sha=sha[:64], reason=reason[:2000], requested_at=now, not_before=due)
        session.add(row)
        rows.append(row)
        open_count += 1
        hour += 1
        due = due + spacing
    session.flush()
    return rows


def rerun_requests(session: Session, backend: str) -> list[RerunRequest]:
    return list(session.scalars(select(RerunRequest).where(RerunRequest.backend == backend).order_by(RerunRequest.id)))
