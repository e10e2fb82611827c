"""Retention: drop the raw payloads of old deliveries (``crcr db prune --older-than DAYS``).

A payload is dropped only when none of its dispatches is still open (pending or
retrying): the row keeps its metadata (event, repo, PR, SHA, states), the payload
becomes NULL and ``pruned_at`` records when. A pruned delivery cannot be redelivered.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from sqlalchemy import Select, exists, select, update
from sqlalchemy.orm import sessionmaker

from crcr.store.deliveries import OPEN_STATES, Delivery, Dispatch


def prunable(sessions: sessionmaker, cutoff: dt.datetime) -> int:
    with sessions() as s:
        return len(list(s.scalars(_query(cutoff))))


def _query(cutoff: dt.datetime) -> Select:
    still_open = exists().where(Dispatch.delivery_id == Delivery.id, Dispatch.state.in_(OPEN_STATES))
    return select(Delivery.id).where(Delivery.received_at < cutoff, Delivery.payload.is_not(None), ~still_open)


def prune_payloads(sessions: sessionmaker, cutoff: dt.datetime, *, now: dt.datetime | None = None,
                   batch: int = 500, progress: Callable[[int], None] | None = None) -> int:
    """Drop payloads of deliveries received before ``cutoff``; returns how many.

    Works in batches (short transactions, so a running relay keeps writing);
    ``progress(n)`` is called after each batch with the number just dropped.
    """
    now = now or dt.datetime.now(dt.UTC)
    total = 0
    while True:
        with sessions.begin() as s:
            ids = list(s.scalars(_query(cutoff).limit(batch)))
            if not ids:
                return total
            s.execute(update(Delivery).where(Delivery.id.in_(ids)).values(payload=None, pruned_at=now))
            total += len(ids)
        if progress is not None:
            progress(len(ids))
