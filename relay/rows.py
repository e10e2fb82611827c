"""The rows a delivery becomes: one ``deliveries`` row and one pending ``dispatches`` row per target.

Intake and the re-run path (``relay.checks.rerun_for_check``, and ``/ci retry`` through
it) build them here, from the same ``EventInfo`` and ``Route``, so a re-run carries the
same fields and goes only where routing and trust would send the event today.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from crcr.store.deliveries import ACCEPTED, IGNORED
from relay.allowlist import Target
from relay.events import EventInfo


def delivery_row(delivery_id: str, event: str, info: EventInfo, *, payload: str, payload_bytes: int,
                 now: dt.datetime, targets: list[Target], reason: str | None,
                 sender: str | None = None) -> dict[str, Any]:
    """The ``deliveries`` row (a dict for a Core insert)."""
    return {
        "id": delivery_id, "event": event, "action": info.action, "repo": info.repo, "pr_number": info.pr_number,
        "head_sha": info.head_sha, "ref": info.ref, "labels": info.labels, "label": info.label,
        "sender": sender if sender is not None else info.sender, "author_association": info.author_association,
        "payload": payload, "payload_bytes": payload_bytes, "received_at": now,
        "status": ACCEPTED if targets else IGNORED, "ignored_reason": reason,
    }


def dispatch_rows(delivery_id: str, event: str, targets: list[Target], now: dt.datetime) -> list[dict[str, Any]]:
    """One pending ``dispatches`` row per target (dicts for a Core insert)."""
    return [
        {"delivery_id": delivery_id, "target": t.repo, "kind": t.kind, "level": t.level, "event_type": event,
         "state": "pending", "attempts": 0, "next_attempt_at": now, "created_at": now, "updated_at": now}
        for t in targets
    ]
