"""Per-repo limit on callbacks: ``callback_rate_per_minute`` in any 60 s window, then 429.

Storage-backed, not in-process: production runs several relay replicas behind one
service (deploy/k8s), and an in-process counter would let each replica admit the full
quota. The window is the ``callback_log`` table itself (every authenticated callback
is logged there anyway, indexed by repo, kind and time), so the limit costs one
indexed COUNT and no extra table or Redis dependency. Two replicas racing on the last
slot can both admit it: the limit is exact to within the number of replicas.
Rate-limited requests are logged but not counted, so a client that keeps hammering
regains its quota as soon as its accepted calls age out of the window.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from crcr.store.jobs import CallbackLog

WINDOW = dt.timedelta(seconds=60)


def over_limit(session: Session, repo: str, kind: str, limit: int, now: dt.datetime) -> bool:
    """True when ``repo`` already made ``limit`` counted calls of ``kind`` in the last minute."""
    since = now - WINDOW
    count = session.scalar(
        select(func.count(CallbackLog.id)).where(
            CallbackLog.repo == repo,
            CallbackLog.kind == kind,
            CallbackLog.received_at > since,
            CallbackLog.outcome != "rate_limited",
        )
    )
    return (count or 0) >= limit
