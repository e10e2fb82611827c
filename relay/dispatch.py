"""Sending one dispatch row: claim it, build CRCR's client_payload, send, record.

A worker first *claims* the row with a conditional UPDATE (open state, due, not
claimed by a live worker) so two tasks for the same row never both send. The
outcome moves the row: ``sent``; ``retrying`` with exponential backoff and jitter
(never sooner than ``Retry-After``); or ``dead`` after the last attempt or a
permanent refusal. The claim expires after a lease, so a SIGKILLed worker's row
goes back to the sweeper. ``attempt_many`` does the same for several rows at once
(a delivery's fan-out): one claim transaction, concurrent sends, batched outcome writes.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
from concurrent.futures import FIRST_COMPLETED, Executor, wait
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Update, and_, bindparam, or_, select, update

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


def _finish(runtime: Runtime, row_id: int, values: dict[str, Any], claim: dt.datetime | None = None) -> bool:
    """Write ``values``; with ``claim``, only while the row still carries that claim.

    A worker whose claim lapsed (it was slow past its lease) and was taken by another
    must not overwrite what the other recorded (a ``sent`` turned back to ``retrying``).
    """
    stmt = update(_TABLE).where(_TABLE.c.id == row_id)
    if claim is not None:
        stmt = stmt.where(_TABLE.c.claimed_until == claim)
    with runtime.write_lock, runtime.engine.begin() as conn:
        written = conn.execute(stmt.values(**values)).rowcount == 1
    if not written:
        log.warning("dispatch %s: claim lapsed and was taken over; this attempt's outcome is not recorded", row_id)
    return written


def attempt(runtime: Runtime, dispatch_id: int) -> Outcome | None:
    """Make one attempt at ``dispatch_id``; None when the row was not ours to send."""
    allow = runtime.allowlist.get()
    now = runtime.clock()
    # The claim is the only write before the send and the only step under the write
    # lock (SQLite: one writer); the reads after it run in parallel (WAL readers).
    held = now + _lease(runtime, "github", 0)
    with runtime.write_lock, runtime.engine.begin() as conn:
        if conn.execute(_claim_stmt(dispatch_id, now, _lease(runtime, "github", 0))).rowcount != 1:
            return None
    with runtime.sessions() as s:
        row, delivery = s.execute(
            select(Dispatch, Delivery).join(Delivery, Dispatch.delivery_id == Delivery.id)
            .where(Dispatch.id == dispatch_id)).one()
    target = allow.targets.get(row.target)
    if row.kind == "local" and target is not None:  # a local command may run much longer
        longer = now + _lease(runtime, "local", target.timeout_s)
        if not _finish(runtime, dispatch_id, {"claimed_until": longer}, claim=held):
            return None
        held = longer
    attempts = row.attempts + 1
    with log_context(delivery_id=delivery.id, repo=delivery.repo, pr=delivery.pr_number, target=row.target,
                     dispatch_id=dispatch_id):
        outcome, values = _attempt(runtime, row, delivery, target, attempts)
    return outcome if _finish(runtime, dispatch_id, values, claim=held) else None


def claim_many(runtime: Runtime, dispatch_ids: list[int], lease: dt.timedelta) -> tuple[list[int], dt.datetime]:
    """Claim every due, unheld row of ``dispatch_ids`` in ONE write transaction.

    Returns the ids claimed and the ``claimed_until`` they now carry (rows already
    sent, not due, or held by a live worker are left alone, as ``claim`` does).
    """
    if not dispatch_ids:
        return [], runtime.clock()
    now = runtime.clock()
    until = now + lease
    stmt = (
        update(_TABLE)
        .where(
            _TABLE.c.id.in_(dispatch_ids),
            _TABLE.c.state.in_(OPEN_STATES),
            _TABLE.c.next_attempt_at <= now + CLAIM_SLACK,
            or_(_TABLE.c.claimed_until.is_(None), _TABLE.c.claimed_until < now),
        )
        .values(claimed_until=until, updated_at=now)
        .returning(_TABLE.c.id)
    )
    with runtime.write_lock, runtime.engine.begin() as conn:
        claimed = sorted(conn.execute(stmt).scalars())
    return claimed, until


def _extend_claim(runtime: Runtime, dispatch_id: int, held_until: dt.datetime,
                  lease: dt.timedelta) -> dt.datetime | None:
    """Renew our own claim (still ``held_until``, still open): the new claim, or None when it lapsed
    and another took it."""
    now = runtime.clock()
    with runtime.write_lock, runtime.engine.begin() as conn:
        renewed = conn.execute(
            update(_TABLE)
            .where(_TABLE.c.id == dispatch_id, _TABLE.c.state.in_(OPEN_STATES),
                   _TABLE.c.claimed_until == held_until)
            .values(claimed_until=now + lease, updated_at=now)
        ).rowcount == 1
    return now + lease if renewed else None


def _finish_many(runtime: Runtime, updates: list[tuple[int, dt.datetime, dict[str, Any]]]) -> set[int]:
    """Record several outcomes in one write transaction; returns the ids written.

    Each write is conditional on the row still carrying the claim it was sent under, so a
    worker whose claim lapsed never overwrites what the next holder recorded.
    """
    if not updates:
        return set()
    by_claim: dict[dt.datetime, list[int]] = {}
    for row_id, claim_until, _values in updates:
        by_claim.setdefault(claim_until, []).append(row_id)
    with runtime.write_lock, runtime.engine.begin() as conn:
        # which rows are still ours (the write lock / the same transaction keeps this current)
        ours: set[int] = set()
        for claim_until, ids in by_claim.items():
            ours |= set(conn.execute(select(_TABLE.c.id).where(
                _TABLE.c.id.in_(ids), _TABLE.c.claimed_until == claim_until)).scalars())
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row_id, claim_until, values in updates:  # one executemany per shape (sent, retrying, dead)
            if row_id in ours:
                groups.setdefault(tuple(sorted(values)), []).append(
                    {"b_id": row_id, "b_claim": claim_until, **{f"b_{k}": v for k, v in values.items()}})
        for keys, params in groups.items():
            conn.execute(update(_TABLE)
                         .where(_TABLE.c.id == bindparam("b_id"), _TABLE.c.claimed_until == bindparam("b_claim"))
                         .values({k: bindparam(f"b_{k}") for k in keys}), params)
    lost = sorted({u[0] for u in updates} - ours)
    if lost:
        log.warning("dispatches %s: claims lapsed and were taken over; those outcomes are not recorded", lost)
    return ours


FINISH_COALESCE_S = 0.02  # how long a finished send waits for others before its outcome is written
# a claimed row whose send starts this late (the pool was busy) renews its claim first
LATE_START = dt.timedelta(seconds=1)


def attempt_many(runtime: Runtime, dispatch_ids: list[int], pool: Executor) -> dict[int, Outcome]:
    """One attempt at each of ``dispatch_ids``, sent concurrently on ``pool``.

    The rows are claimed together in one transaction (the lease starts at the claim),
    read together, the delivery's payload is parsed once per delivery, and the outcomes
    are recorded in one transaction per group of sends that finish together. Rows not
    ours to send (done, not due, held) are left out of the result. A row whose turn on
    a busy pool comes late renews its claim first and is skipped if that claim lapsed.
    """
    allow = runtime.allowlist.get()
    claimed, held_until = claim_many(runtime, list(dict.fromkeys(dispatch_ids)), _lease(runtime, "github", 0))
    if not claimed:
        return {}
    claimed_at = runtime.clock()
    with runtime.sessions() as s:
        pairs = s.execute(
            select(Dispatch, Delivery).join(Delivery, Dispatch.delivery_id == Delivery.id)
            .where(Dispatch.id.in_(claimed)).order_by(Dispatch.id)).all()
    payloads: dict[str, dict[str, Any]] = {}

    def one(row: Dispatch, delivery: Delivery) -> tuple[Outcome, dt.datetime, dict[str, Any]] | None:
        target = allow.targets.get(row.target)
        now = runtime.clock()
        held: dt.datetime | None = held_until
        if row.kind == "local" and target is not None:  # a local command may run much longer
            held = _extend_claim(runtime, row.id, held_until, _lease(runtime, "local", target.timeout_s))
        elif now - claimed_at > LATE_START:
            held = _extend_claim(runtime, row.id, held_until, _lease(runtime, "github", 0))
        if held is None:
            return None
        with log_context(delivery_id=delivery.id, repo=delivery.repo, pr=delivery.pr_number, target=row.target,
                         dispatch_id=row.id):
            outcome, values = _attempt(runtime, row, delivery, target, row.attempts + 1, payloads.get(delivery.id))
        return outcome, held, values

    for _row, delivery in pairs:  # parsed once here, shared read-only by the sends of small payloads
        if (delivery.id not in payloads and delivery.payload is not None
                and delivery.payload_bytes * 3 + 1024 < MAX_CLIENT_PAYLOAD_BYTES):
            payloads[delivery.id] = build_client_payload(delivery)
    futures = {pool.submit(one, row, delivery): row.id for row, delivery in pairs}
    outcomes: dict[int, Outcome] = {}
    pending = set(futures)
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        if pending:  # sends of one fan-out finish together: record them in one write, not one each
            more, pending = wait(pending, timeout=FINISH_COALESCE_S)
            done |= more
        batch = []
        for fut in done:
            try:
                result = fut.result()  # _attempt records every send failure itself
            except Exception:  # storage failed around the send: the claim lapses, the sweeper retries
                log.exception("dispatch %s: attempt failed outside the send", futures[fut])
                continue
            if result is not None:
                outcomes[futures[fut]] = result[0]
                batch.append((futures[fut], result[1], result[2]))
        written = _finish_many(runtime, batch)
        for row_id, _held, _values in batch:
            if row_id not in written:  # not ours any more: the next holder's outcome stands
                outcomes.pop(row_id, None)
    return outcomes


def _attempt(runtime: Runtime, row: Dispatch, delivery: Delivery, target: Any, attempts: int,
             shared_payload: dict[str, Any] | None = None) -> tuple[Outcome, dict[str, Any]]:
    """Send once; returns the outcome and the row values that record it (the caller writes them)."""
    settings = runtime.settings
    trimmed: list[str] | None = row.trimmed
    status: int | None = None
    try:
        if delivery.payload is None:
            raise DispatchFailure("the delivery's payload was pruned by retention; it cannot be sent again", False)
        if target is None:
            raise DispatchFailure(f"{row.target} is no longer in the allowlist", False)
        removed: list[str] = []
        # re-encoding can grow the body up to 3x (", " separators, six-character \u escapes of UTF-8
        # text): only a payload far below the limit skips measuring
        if delivery.payload_bytes * 3 + 1024 >= MAX_CLIENT_PAYLOAD_BYTES:
            client_payload, removed = trim_client_payload(build_client_payload(delivery))
        else:
            client_payload = shared_payload if shared_payload is not None else build_client_payload(delivery)
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
    values = {"state": SENT, "attempts": attempts, "sent_at": now, "updated_at": now, "claimed_until": None,
              "last_error": None, "last_status": status, "trimmed": trimmed}
    received = delivery.received_at if delivery.received_at.tzinfo else delivery.received_at.replace(tzinfo=dt.UTC)
    runtime.metrics.dispatches.labels(row.kind, "sent").inc()
    runtime.metrics.dispatch_latency.observe(max(0.0, (now - received).total_seconds()))
    log.info("dispatched (attempt %d)", attempts)
    return Outcome(SENT, attempts), values


def _failed(runtime: Runtime, row: Dispatch, delivery: Delivery, attempts: int, failure: DispatchFailure,
            trimmed: list[str] | None) -> tuple[Outcome, dict[str, Any]]:
    settings = runtime.settings
    now = runtime.clock()
    reason = "permanent" if not failure.retriable else ("rate_limited" if failure.status in (403, 429) else "retriable")
    runtime.metrics.dispatch_failures.labels(reason).inc()
    base = {"attempts": attempts, "updated_at": now, "claimed_until": None, "last_error": failure.message[:2000],
            "last_status": failure.status, "trimmed": trimmed}
    if not failure.retriable or attempts >= settings.dispatch_max_attempts:
        runtime.metrics.dispatches.labels(row.kind, "dead").inc()
        log.warning("dispatch is dead after %d attempt(s): %s", attempts, failure.message)
        return Outcome(DEAD, attempts, error=failure.message), {**base, "state": DEAD}
    delay = backoff_delay(attempts, base_s=settings.dispatch_backoff_base_s, max_s=settings.dispatch_backoff_max_s,
                          retry_after_s=failure.retry_after_s)
    runtime.metrics.dispatches.labels(row.kind, "retrying").inc()
    log.info("attempt %d failed, retrying in %.1fs: %s", attempts, delay, failure.message)
    return (Outcome(RETRYING, attempts, delay_s=delay, error=failure.message),
            {**base, "state": RETRYING, "next_attempt_at": now + dt.timedelta(seconds=delay)})


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


__all__ = ["DEAD", "PENDING", "RETRYING", "SENT", "Outcome", "attempt", "attempt_many", "backoff_delay",
           "build_client_payload", "claim", "claim_many", "due_for_sweep", "redeliver", "touch_for_requeue"]
