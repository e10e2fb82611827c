"""Held dispatches (trust gating) and their approval.

Intake stores a target that an untrusted PR was not sent to as a dispatch in state
``awaiting``. Approval (the approval label added by a maintainer, or ``/ci run`` by a
trusted commenter) calls ``release`` with the PR head SHA just read from GitHub:

- awaiting rows of older head SHAs become ``superseded`` (that code is not what the
  PR holds now);
- per target, the newest delivery's row for the current head moves ``awaiting`` ->
  ``pending`` in one conditional UPDATE, so two approvals racing release it once;
- the released rows are enqueued like any fresh dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update

from crcr.store.deliveries import AWAITING, PENDING, SUPERSEDED, Delivery, Dispatch

RUN_ACTIONS = ("opened", "reopened", "synchronize")


@dataclass
class Released:
    head_sha: str
    released: list[str] = field(default_factory=list)  # targets now pending
    superseded: int = 0
    still_held: list[str] = field(default_factory=list)  # awaiting rows for this head not asked for


def held_for_pr(session: Any, upstream: str, pr_number: int) -> list[tuple[Dispatch, Delivery]]:
    """Awaiting rows of one PR, newest delivery first."""
    return list(session.execute(
        select(Dispatch, Delivery).join(Delivery, Dispatch.delivery_id == Delivery.id)
        .where(Dispatch.state == AWAITING, Delivery.pr_number == pr_number,
               func.lower(Delivery.repo) == upstream.lower())
        .order_by(Delivery.received_at.desc(), Dispatch.id.desc())).all())


def release(runtime: Any, pr_number: int, head_sha: str, *, targets: set[str] | None = None,
            via: str = "comment") -> Released:
    """Approve the PR's held targets (all, or ``targets``) for ``head_sha``; see the module doc."""
    upstream = runtime.settings.upstream_repo
    out = Released(head_sha)
    now = runtime.clock()
    with runtime.write_lock, runtime.sessions.begin() as s:
        rows = held_for_pr(s, upstream, pr_number)
        stale = [d.id for d, dl in rows if dl.head_sha != head_sha]
        newest: dict[str, int] = {}
        older: list[int] = []
        # per target, the newest push-like delivery (opened/reopened/synchronize) wins over a
        # newer `labeled` or `closed` one: approval runs the code, not a label event
        current = sorted(((d, dl) for d, dl in rows if dl.head_sha == head_sha),
                         key=lambda p: p[1].action not in RUN_ACTIONS)
        for d, _dl in current:
            if d.target in newest:
                older.append(d.id)
            else:
                newest[d.target] = d.id
        chosen = {t: i for t, i in newest.items() if targets is None or t in targets}
        out.still_held = sorted(set(newest) - set(chosen))
        if stale or older:
            out.superseded = s.execute(update(Dispatch).where(Dispatch.id.in_(stale + older), Dispatch.state == AWAITING)
                                       .values(state=SUPERSEDED, updated_at=now)).rowcount
        if chosen:
            ids = list(s.scalars(
                update(Dispatch).where(Dispatch.id.in_(list(chosen.values())), Dispatch.state == AWAITING)
                .values(state=PENDING, next_attempt_at=now, updated_at=now).returning(Dispatch.id)))
            by_id = {i: t for t, i in chosen.items()}
            out.released = sorted(by_id[i] for i in ids)
            released_ids = ids
        else:
            released_ids = []
    if released_ids:
        runtime.metrics.approvals.labels(via).inc(len(released_ids))
        if runtime.tasks is not None:
            runtime.tasks.enqueue(released_ids)
    return out


def list_held(session: Any, *, limit: int = 100) -> list[dict[str, Any]]:
    """Every awaiting row with its PR and head SHA (``crcr held list``), newest first."""
    rows = session.execute(
        select(Dispatch, Delivery).join(Delivery, Dispatch.delivery_id == Delivery.id)
        .where(Dispatch.state == AWAITING).order_by(Dispatch.id.desc()).limit(limit)).all()
    return [{"dispatch_id": d.id, "delivery_id": d.delivery_id, "target": d.target, "level": d.level,
             "pr": dl.pr_number, "head_sha": dl.head_sha, "author_association": dl.author_association,
             "action": dl.action, "held_since": d.created_at.isoformat()} for d, dl in rows]
