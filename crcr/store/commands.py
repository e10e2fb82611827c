"""Tables of PR comment commands: every ``/ci`` command with its outcome, and the
comments crcr keeps on a PR (one reply, one on-call ping), edited in place.

A comment is handled once: ``(comment_id, position)`` is unique, so a redelivered
``issue_comment`` (or the same comment arriving under another delivery id) finds its
rows already there and does nothing.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import JSON, BigInteger, DateTime, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from crcr.store.base import Base

# command outcomes
RECEIVED = "received"  # stored, not yet executed
DONE = "done"
REFUSED = "refused"  # the commenter may not run it
INVALID = "invalid"  # unknown command or bad arguments
FAILED = "failed"  # GitHub or storage trouble while executing
OUTCOMES = (RECEIVED, DONE, REFUSED, INVALID, FAILED)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Command(Base):
    """One ``/ci`` line of one PR comment and what came of it."""

    __tablename__ = "commands"
    __table_args__ = (
        UniqueConstraint("comment_id", "position", name="uq_commands_comment_id"),
        Index("ix_commands_repo_pr", "repo", "pr_number"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    comment_id: Mapped[int] = mapped_column(BigInteger)  # GitHub comment ids outgrow 32 bits
    position: Mapped[int] = mapped_column(Integer, default=0)  # n-th command of the comment
    delivery_id: Mapped[str] = mapped_column(String(200))
    repo: Mapped[str] = mapped_column(String(200))
    pr_number: Mapped[int] = mapped_column(Integer)
    commenter: Mapped[str] = mapped_column(String(100))
    command: Mapped[str] = mapped_column(String(20))  # run | retry | cancel | status | select | help | unknown
    args: Mapped[list[str]] = mapped_column(JSON, default=list)
    permission: Mapped[str | None] = mapped_column(String(20))  # admin | maintain | write | ... | trusted-list
    head_sha: Mapped[str | None] = mapped_column(String(64))  # the PR head when it was executed
    outcome: Mapped[str] = mapped_column(String(16), default=RECEIVED)
    detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PrComment(Base):
    """A comment crcr wrote on a PR and edits in place (``kind``: reply | oncall)."""

    __tablename__ = "pr_comments"
    __table_args__ = (UniqueConstraint("repo", "pr_number", "kind", name="uq_pr_comments_repo"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    pr_number: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    github_id: Mapped[int | None] = mapped_column(BigInteger)
    body: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
