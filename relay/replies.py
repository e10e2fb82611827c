"""Comments crcr writes on a PR, one per (PR, kind), edited in place on repeat.

``upsert_comment`` creates the comment the first time and edits it afterwards (a
comment someone deleted is created again). Untrusted text (logins, backend names
from a comment) is made inert with ``inert`` before it goes into Markdown.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from crcr.github.comments import GitHubCallError, create_comment, edit_comment
from crcr.store.commands import PrComment, utcnow
from relay.commands import USAGE

log = logging.getLogger("crcr.relay.replies")

MARKER = "<!-- crcr:{kind} -->"
MAX_BODY = 60_000  # GitHub's limit is 65,536 characters
_write_lock = threading.Lock()  # two answers on one PR at once must not both create a comment


def inert(value: Any, limit: int = 100) -> str:
    """Untrusted text as plain Markdown: no HTML, no @mentions, no code spans or links."""
    s = str(value)[:limit]
    return re.sub(r"[^A-Za-z0-9._/:+ -]", "?", s)


def help_text() -> str:
    lines = ["Commands (a whole line of a new comment on this PR; write, maintain or admin permission, "
             "or the trusted list):", ""]
    lines += [f"- `{usage}`" for usage in USAGE.values()]
    lines += ["", "Backends are named by device (the `ciflow/crcr/<device>` labels) or by repository."]
    return "\n".join(lines)


def upsert_comment(runtime: Any, gh: Any, pr_number: int, kind: str, text: str) -> int | None:
    """Write ``text`` as crcr's ``kind`` comment on the PR; returns the comment id (None on failure)."""
    with _write_lock:
        return _upsert(runtime, gh, pr_number, kind, text)


def _upsert(runtime: Any, gh: Any, pr_number: int, kind: str, text: str) -> int | None:
    repo = runtime.settings.upstream_repo
    body = f"{MARKER.format(kind=kind)}\n{text}"[:MAX_BODY]
    with runtime.sessions() as s:
        row = s.scalar(select(PrComment).where(PrComment.repo == repo, PrComment.pr_number == pr_number,
                                               PrComment.kind == kind))
        known = row.github_id if row is not None else None
        if row is not None and row.body == body:
            return known  # nothing changed: no edit, no notification
    try:
        if known is not None:
            try:
                edit_comment(gh, repo, known, body)
                comment_id = known
            except GitHubCallError as exc:
                if exc.status != 404:
                    raise
                comment_id = create_comment(gh, repo, pr_number, body)  # deleted by someone: write it again
        else:
            comment_id = create_comment(gh, repo, pr_number, body)
    except GitHubCallError as exc:
        log.warning("PR #%s: %s comment not written: %s", pr_number, kind, exc.message)
        return None
    with runtime.write_lock, runtime.sessions() as s:
        row = s.scalar(select(PrComment).where(PrComment.repo == repo, PrComment.pr_number == pr_number,
                                               PrComment.kind == kind))
        if row is None:
            row = PrComment(repo=repo, pr_number=pr_number, kind=kind)
            s.add(row)
        row.github_id, row.body, row.updated_at = comment_id, body, utcnow()
        try:
            s.commit()
        except IntegrityError:  # a concurrent writer stored its own: keep theirs, ours is edited next time
            s.rollback()
    return comment_id
