"""Sending one dispatch row: claim it, build CRCR's client_payload, send, record.

A worker first *claims* the row with a conditional UPDATE (open state, due, not
claimed by a live worker) so two tasks for the same row never both send. The
outcome moves the row: ``sent``; ``retrying`` with exponential backoff and jitter
(never sooner than ``Retry-After``); or ``dead`` after the last attempt or a
permanent refusal. The claim expires after a lease, so a SIGKILLed worker's row
goes back to the sweeper.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Update, and_, or_, select, update

from crcr.contracts.dispatch import MAX_CLIENT_PAYLOAD_BYTES
from crcr.github.dispatch import DispatchFailure, send_repository_dispatch
from crcr.logs import log_context
from crcr.store.deliveries import DEAD, OPEN_STATES, PENDING, RETRYING, SENT, Delivery, Dispatch
from relay.local_target import run_local
from relay.runtime import Runtime
from relay.trim import encoded_size, trim_client_payload

log = logging.getLogger("crcr.relay.dispatch")

CLAIM_SLACK = dt.timedelta(seconds=1)
_TABLE = Dispatch.__table__  # Core statements on the hot path: no ORM unit of work per update  # a retry task may fire a moment before its due time


@dataclass(frozen=True)
class Outcome:
    state: str
    attempts: int
    delay_s: float | None = None  # for `retrying`: when to try again
    error: str | None = None


def backoff_delay(attempt: int, *, base_s: float, max_s: float, retry_after_s: float | None = None,
                  rng: random.Random | None = None) -> float:
    """Delay before attempt ``attempt + 1``: base * 2**(attempt-1), capped, with jitter in [50%, 100%].

    ``Retry-After`` (or a rate-limit reset) is a floor: GitHub asks us not to come back sooner.
    """
    rng = rng or random
    raw = min(max_s, base_s * (2 ** max(0, attempt - 1)))
    delay = raw * (0.5 + rng.random() / 2)
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    return delay


def build_client_payload(delivery: Delivery) -> dict[str, Any]:
    """CRCR's pass-through body: ``{event_type, delivery_id, payload}`` (payload verbatim)."""
    # the shape of crcr.contracts.dispatch.ClientPayload, built directly: validating and
    # re-dumping a 20-60 KB payload per attempt costs more than the HTTP request's CPU
    return {"event_type": delivery.event, "delivery_id": delivery.id, "payload": json.loads(delivery.payload or "{}")}


def _lease(runtime: Runtime, kind: str, timeout_s: float) -> dt.timedelta:
    if kind == "local":
        return dt.timedelta(seconds=timeout_s + 30)
    # covers token lookup + mint + dispatch, each bounded by the HTTP timeout
    return dt.timedelta(seconds=runtime.settings.dispatch_timeout_s * 3 + 2)


def _claim_stmt(dispatch_id: int, now: dt.datetime, lease: dt.timedelta) -> Update:
    return (
        update(_TABLE)
        .where(
            Dispatch.id == dispatch_id,
            Dispatch.state.in_(OPEN_STATES),
            Dispatch.next_attempt_at <= now + CLAIM_SLACK,
            or_(Dispatch.claimed_until.is_(None), Dispatch.claimed_until < now),
        )
        .values(claimed_until=now + lease, updated_at=now)
    )


def claim(runtime: Runtime, dispatch_id: int, lease: dt.timedelta) -> bool:
    """Take the row for one attempt; False when it is done, not due, or held by a live worker."""
    with runtime.write_lock, runtime.engine.begin() as conn:
        return conn.execute(_claim_stmt(dispatch_id, runtime.clock(), lease)).rowcount == 1


def _finish(runtime: Runtime, row_id: int, values: dict[str, Any]) -> None:
    with runtime.write_lock, runtime.engine.begin() as conn:
        conn.execute(update(_TABLE).where(_TABLE.c.id == row_id).values(**values))


def attempt(runtime: Runtime, dispatch_id: int) -> Outcome | None:
    """Make one attempt at ``dispatch_id``; None when the row was not ours to send."""
    allow = runtime.allowlist.get()
    now = runtime.clock()
    # The claim is the only write before the send and the only step under the write
    # lock (SQLite: one writer); the reads after it run in parallel (WAL readers).
    if not claim(runtime, dispatch_id, _lease(runtime, "github", 0)):
        return None
    with runtime.sessions() as s:
        row, delivery = s.execute(
            select(Dispatch, Delivery).join(Delivery, Dispatch.delivery_id == Delivery.id)
            .where(Dispatch.id == dispatch_id)).one()
    target = allow.targets.get(row.target)
    if row.kind == "local" and target is not None:  # a local command may run much longer
        _finish(runtime, dispatch_id, {"claimed_until": now + _lease(runtime, "local", target.timeout_s)})
    attempts = row.attempts + 1
    with log_context(delivery_id=delivery.id, repo=delivery.repo, pr=delivery.pr_number, target=row.target,
                     dispatch_id=dispatch_id):
        return _attempt(runtime, row, delivery, target, attempts)


def _attempt(runtime: Runtime, row: Dispatch, delivery: Delivery, target: Any, attempts: int) -> Outcome:
    settings = runtime.settings
    trimmed: list[str] | None = row.trimmed
    status: int | None = None
    try:
        if delivery.payload is None:
            raise DispatchFailure("the delivery's payload was pruned by retention; it cannot be sent again", False)
        if target is None:
            raise DispatchFailure(f"{row.target} is no longer in the allowlist", False)
        client_payload = build_client_payload(delivery)
        removed: list[str] = []
        # re-encoding can grow the body up to 3x (", " separators, \uXXXX escapes of UTF-8
        # text): only a payload far below the limit skips measuring
        if delivery.payload_bytes * 3 + 1024 >= MAX_CLIENT_PAYLOAD_BYTES:
            client_payload, removed = trim_client_payload(client_payload)
        trimmed = removed or None
        if removed:
            log.info("payload trimmed to %d bytes: removed %s", encoded_size(client_payload), ", ".join(removed))
        if row.kind == "local":
            result = run_local(target.command, client_payload, timeout_s=target.timeout_s,
                               env={"CRCR_DATA_DIR": str(settings.data_dir.resolve())})
            status = result.exit_code
            if result.exit_code != 0:
                what = "timed out" if result.exit_code is None else f"exited with {result.exit_code}"
                tail = result.stderr_tail.strip().splitlines()[-1:] or [""]
                raise DispatchFailure(f"local command {what}: {tail[0][:300]}", True, result.exit_code)
        else:
            send_repository_dispatch(runtime.github(), row.target, row.event_type, client_payload)
            status = 204
    except DispatchFailure as failure:
        return _failed(runtime, row, delivery, attempts, failure, trimmed)
    except Exception as exc:  # a bug or an unexpected library error must not lose the row
        log.exception("dispatch attempt crashed")
        failure = DispatchFailure(f"internal error: {type(exc).__name__}: {str(exc)[:200]}", True)
        return _failed(runtime, row, delivery, attempts, failure, trimmed)
    now = runtime.clock()
    _finish(runtime, row.id, {"state": SENT, "attempts": attempts, "sent_at": now, "updated_at": now,
                              "claimed_until": None, "last_error": None, "last_status": status,
                              "trimmed": trimmed})
    received = delivery.received_at if delivery.received_at.tzinfo else delivery.received_at.replace(tzinfo=dt.UTC)
    runtime.metrics.dispatches.labels(row.kind, "sent").inc()
    runtime.metrics.dispatch_latency.observe(max(0.0, (now - received).total_seconds()))
    log.info("dispatched (attempt %d)", attempts)
    return Outcome(SENT, attempts)


def _failed(runtime: Runtime, row: Dispatch, delivery: Delivery, attempts: int, failure: DispatchFailure,
            trimmed: list[str] | None) -> Outcome:
    settings = runtime.settings
    now = runtime.clock()
    reason = "permanent" if not failure.retriable else ("rate_limited" if failure.status in (403, 429) else "retriable")
    runtime.metrics.dispatch_failures.labels(reason).inc()
    base = {"attempts": attempts, "updated_at": now, "claimed_until": None, "last_error": failure.message[:2000],
            "last_status": failure.status, "trimmed": trimmed}
    if not failure.retriable or attempts >= settings.dispatch_max_attempts:
        _finish(runtime, row.id, {**base, "state": DEAD})
        runtime.metrics.dispatches.labels(row.kind, "dead").inc()
        log.warning("dispatch is dead after %d attempt(s): %s", attempts, failure.message)
        return Outcome(DEAD, attempts, error=failure.message)
    delay = backoff_delay(attempts, base_s=settings.dispatch_backoff_base_s, max_s=settings.dispatch_backoff_max_s,
                          retry_after_s=failure.retry_after_s)
    _finish(runtime, row.id, {**base, "state": RETRYING, "next_attempt_at": now + dt.timedelta(seconds=delay)})
    runtime.metrics.dispatches.labels(row.kind, "retrying").inc()
    log.info("attempt %d failed, retrying in %.1fs: %s", attempts, delay, failure.message)
    return Outcome(RETRYING, attempts, delay_s=delay, error=failure.message)


def due_for_sweep(runtime: Runtime, *, stale_after: dt.timedelta, limit: int = 1000,
                  only_abandoned: bool = False) -> list[int]:
    """Open rows that should have been attempted by now but are held by nobody.

    ``only_abandoned``: just the rows a worker claimed and never finished (its claim
    expired), the ones whose task is certainly gone.
    """
    now = runtime.clock()
    held = (and_(Dispatch.claimed_until.is_not(None), Dispatch.claimed_until < now) if only_abandoned
            else or_(Dispatch.claimed_until.is_(None), Dispatch.claimed_until < now))
    with runtime.sessions() as s:
        return list(s.scalars(
            select(Dispatch.id)
            .where(
                Dispatch.state.in_(OPEN_STATES),
                Dispatch.next_attempt_at <= now - stale_after,
                held,
            )
            .order_by(Dispatch.next_attempt_at, Dispatch.id)
            .limit(limit)
        ))


def touch_for_requeue(runtime: Runtime, ids: list[int]) -> None:
    """Mark swept rows as freshly due so the next sweep waits a full period for them."""
    if not ids:
        return
    now = runtime.clock()
    with runtime.sessions.begin() as s:
        s.execute(update(Dispatch).where(and_(Dispatch.id.in_(ids), Dispatch.state.in_(OPEN_STATES)))
                  .values(next_attempt_at=now, updated_at=now))


def redeliver(runtime: Runtime, ids: list[int]) -> list[int]:
    """Put dead (or sent) rows back to ``pending`` with a fresh attempt budget; returns the ids moved."""
    now = runtime.clock()
    with runtime.sessions.begin() as s:
        found = list(s.scalars(select(Dispatch.id).where(Dispatch.id.in_(ids), Dispatch.state.in_((DEAD, SENT)))))
        if found:
            s.execute(update(Dispatch).where(Dispatch.id.in_(found)).values(
                state=PENDING, attempts=0, next_attempt_at=now, claimed_until=None, updated_at=now))
    return found


__all__ = ["DEAD", "PENDING", "RETRYING", "SENT", "Outcome", "attempt", "backoff_delay", "build_client_payload",
           "claim", "due_for_sweep", "redeliver", "touch_for_requeue"]
