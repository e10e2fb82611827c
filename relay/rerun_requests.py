"""Triage's rerun requests become push-event dispatches (triage writes rows; the relay sends).

``dispatch_due`` takes due ``triage_rerun_requests`` rows and, per row, stores a new
delivery ``<push delivery id>/rerun/<n>`` (the contract's id for a rerun of an upstream
event) whose payload is the trunk push that landed the commit, narrowed to that commit
(``after`` = the SHA, ``commits`` up to it, ``head_commit`` = it), plus one dispatch row
to the backend; the normal dispatch path then sends it with its retries and sweeper.
A SHA no stored push lists gets a minimal push payload and ``triage/<sha>/rerun/<n>``.
A backend that is not an allowlisted target, or does not take push events, fails the
request with the reason.

``RerunPoller`` runs ``dispatch_due`` every few seconds in one process (the one with
the sweeper); ``register`` adds the on-demand Huey task ``crcr.triage.rerun_requests``.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from sqlalchemy import func, select

from crcr.store.deliveries import ACCEPTED, PENDING, Delivery, Dispatch
from crcr.store.triage import DISPATCHED, FAILED, REQUESTED, RerunRequest
from relay.runtime import Runtime

log = logging.getLogger("crcr.relay.rerun_requests")

TASK = "crcr.triage.rerun_requests"
TRUNK_REF = "refs/heads/main"


def _origin(session: Any, sha: str, upstream_repo: str) -> tuple[Delivery | None, dict[str, Any] | None]:
    """The stored trunk push that landed ``sha`` and its payload."""
    candidates = session.scalars(
        select(Delivery).where(Delivery.event == "push", Delivery.payload.is_not(None),
                               Delivery.payload.contains(sha), ~Delivery.id.contains("/rerun/"))
        .order_by(Delivery.received_at).limit(20))
    for d in candidates:
        try:
            payload = json.loads(d.payload or "{}")
        except ValueError:
            continue
        commits = payload.get("commits") if isinstance(payload, dict) else None
        if d.head_sha == sha or (isinstance(commits, list) and any(isinstance(c, dict) and c.get("id") == sha
                                                                     for c in commits)):
            return d, payload
    return None, None


def narrowed_payload(payload: dict[str, Any] | None, sha: str, upstream_repo: str) -> dict[str, Any]:
    """The push payload as if ``sha`` had been the head of the push."""
    if payload is None:
        return {"ref": TRUNK_REF, "after": sha, "before": None, "commits": [], "head_commit": {"id": sha},
                "repository": {"full_name": upstream_repo}}
    out = dict(payload)
    commits = [c for c in payload.get("commits") or [] if isinstance(c, dict)]
    kept = []
    for c in commits:
        kept.append(c)
        if c.get("id") == sha:
            break
    out["commits"] = kept
    out["after"] = sha
    out["head_commit"] = kept[-1] if kept and kept[-1].get("id") == sha else {"id": sha}
    if len(kept) >= 2:
        out["before"] = kept[-2].get("id")
    return out


def dispatch_due(runtime: Runtime, *, limit: int = 20) -> list[int]:
    """Turn due rerun requests into delivery + dispatch rows and enqueue them; returns dispatch ids."""
    now = runtime.clock()
    allow = runtime.allowlist.get()
    upstream = runtime.settings.upstream_repo
    created: list[int] = []
    due = (select(RerunRequest.id).where(RerunRequest.state == REQUESTED, RerunRequest.not_before <= now).limit(1))
    with runtime.sessions() as s:  # nothing due (the usual case): no write lock, no write transaction
        if s.scalar(due) is None:
            return created
    with runtime.write_lock, runtime.sessions.begin() as s:
        rows = list(s.scalars(select(RerunRequest).where(RerunRequest.state == REQUESTED,
                                                         RerunRequest.not_before <= now)
                              .order_by(RerunRequest.id).limit(limit)))
        for req in rows:
            target = allow.targets.get(req.backend)
            if target is None or not target.wants_event("push", None):
                req.state = FAILED
                req.error = ("not an allowlisted target" if target is None
                             else "the target does not take push events")
                continue
            origin, payload = _origin(s, req.sha, upstream)
            base = origin.id if origin is not None else f"triage/{req.sha[:40]}"
            n = (s.scalar(select(func.count()).select_from(Delivery)
                          .where(Delivery.id.startswith(f"{base}/rerun/"))) or 0) + 1
            delivery_id = f"{base}/rerun/{n}"[:200]
            body = json.dumps(narrowed_payload(payload, req.sha, upstream), separators=(",", ":"))
            s.add(Delivery(id=delivery_id, event="push", action=None, repo=upstream, head_sha=req.sha,
                           ref=(payload or {}).get("ref", TRUNK_REF) if isinstance((payload or {}).get("ref"), str)
                           else TRUNK_REF, labels=[], sender="crcr-triage", payload=body,
                           payload_bytes=len(body), received_at=now, status=ACCEPTED))
            s.flush()
            dispatch = Dispatch(delivery_id=delivery_id, target=target.repo, kind=target.kind, level=target.level,
                                event_type="push", state=PENDING, attempts=0, next_attempt_at=now,
                                created_at=now, updated_at=now)
            s.add(dispatch)
            s.flush()
            created.append(dispatch.id)
            req.state, req.delivery_id, req.dispatched_at = DISPATCHED, delivery_id, now
            log.info("rerun of %s at %s requested by triage: delivery %s", req.backend, req.sha[:12], delivery_id)
    if created and runtime.tasks is not None:
        runtime.tasks.enqueue(created)  # never raises; the sweeper is the safety net
    return created


def register(runtime: Runtime) -> Any:
    """The on-demand task (any worker of this runtime's queue runs it)."""
    return runtime.huey.task(name=TASK)(lambda: len(dispatch_due(runtime)))


class RerunPoller:
    """Runs ``dispatch_due`` every ``interval_s`` in a daemon thread (one process, like the sweeper)."""

    def __init__(self, runtime: Runtime, interval_s: float = 5.0) -> None:
        self.runtime = runtime
        self.interval_s = interval_s
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="crcr-rerun-requests", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                dispatch_due(self.runtime)
            except Exception:  # storage down: try again next period
                log.warning("rerun requests could not be dispatched", exc_info=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(5)
