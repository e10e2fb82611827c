"""The relay's own tables: received webhooks (``deliveries``) and the dispatch outbox.

A delivery and its outbox rows are written in one transaction before the webhook is
acknowledged. The ``dispatches`` rows are the truth about what was sent: the queue only
wakes workers, and a sweeper re-enqueues rows whose worker vanished.

Dispatch states::

    pending --attempt ok--> sent
       |  \\--retriable failure--> retrying --ok--> sent
       |                              |--last attempt fails--> dead --redeliver--> pending
       \\--permanent failure (4xx)-----------------------------> dead
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from crcr.store.base import Base

# dispatch states
PENDING = "pending"
RETRYING = "retrying"
SENT = "sent"
DEAD = "dead"
DISPATCH_STATES = (PENDING, RETRYING, SENT, DEAD)
OPEN_STATES = (PENDING, RETRYING)

# delivery statuses
ACCEPTED = "accepted"
IGNORED = "ignored"
REJECTED = "rejected"  # answered 400/401/413: kept in ``rejected_deliveries``, never in ``deliveries``


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Delivery(Base):
    """One upstream webhook, keyed by ``X-GitHub-Delivery`` (GitHub keeps it on redelivery)."""

    __tablename__ = "deliveries"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str | None] = mapped_column(String(64))
    repo: Mapped[str | None] = mapped_column(String(200), index=True)
    pr_number: Mapped[int | None] = mapped_column(Integer)
    head_sha: Mapped[str | None] = mapped_column(String(64))
    ref: Mapped[str | None] = mapped_column(String(255))
    labels: Mapped[list[str]] = mapped_column(JSON, default=list)
    label: Mapped[str | None] = mapped_column(String(255))  # the label of a `labeled` event
    sender: Mapped[str | None] = mapped_column(String(100))
    author_association: Mapped[str | None] = mapped_column(String(40))
    # the raw body as received (verbatim JSON text); NULL once pruned by retention
    payload: Mapped[str | None] = mapped_column(Text)
    payload_bytes: Mapped[int] = mapped_column(Integer, default=0)
    received_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    status: Mapped[str] = mapped_column(String(16), default=ACCEPTED)
    ignored_reason: Mapped[str | None] = mapped_column(Text)
    pruned_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    dispatches: Mapped[list[Dispatch]] = relationship(back_populates="delivery", order_by="Dispatch.id")

    def summary(self) -> dict[str, Any]:
        return {
            "delivery_id": self.id,
            "event": self.event,
            "action": self.action,
            "repo": self.repo,
            "pr": self.pr_number,
            "head_sha": self.head_sha,
            "status": self.status,
        }


class Dispatch(Base):
    """One (delivery, target) pair of the outbox, with its own retry state."""

    __tablename__ = "dispatches"
    __table_args__ = (
        UniqueConstraint("delivery_id", "target", name="uq_dispatches_delivery_target"),
        Index("ix_dispatches_state_next", "state", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(ForeignKey("deliveries.id", ondelete="CASCADE"), index=True)
    target: Mapped[str] = mapped_column(String(200))  # owner/repo
    kind: Mapped[str] = mapped_column(String(16), default="github")  # github | local
    level: Mapped[int] = mapped_column(Integer)  # allowlist level 1..4
    event_type: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(16), default=PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_status: Mapped[int | None] = mapped_column(Integer)  # HTTP status or process exit code
    next_attempt_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # a worker holds the row until this time; past it, the sweeper may hand it to another
    claimed_until: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    sent_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    # JSON pointers removed from the payload to fit GitHub's 64 KB limit (None: not trimmed)
    trimmed: Mapped[list[str] | None] = mapped_column(JSON)

    delivery: Mapped[Delivery] = relationship(back_populates="dispatches")


class RejectedDelivery(Base):
    """A webhook refused before it was stored (400, 401, 413), with the reason.

    A separate table: a refused request's ``X-GitHub-Delivery`` is unverified and must
    never occupy the id of the real delivery. Bounded: intake keeps only the newest
    ``REJECTED_KEEP`` rows, and while rejections arrive faster than
    ``REJECTED_PER_SECOND`` the excess is counted into the last row (``count``) instead of
    written one by one, so a flood of bad requests cannot fill the disk. Neither the body
    nor any header value other than the (sanitized) event and delivery id is stored.
    """

    __tablename__ = "rejected_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str | None] = mapped_column(String(200))  # as sent, sanitized; unverified
    event: Mapped[str | None] = mapped_column(String(64))  # as sent, sanitized; unverified
    status_code: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(String(200))
    received_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    count: Mapped[int] = mapped_column(Integer, default=1)  # >1: this many like it were folded into this row
