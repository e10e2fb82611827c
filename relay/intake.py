"""``POST /webhook``: verify, store (delivery + outbox rows in one transaction), acknowledge.

Answers: 400 no/odd signature or headers or bad JSON; 401 wrong signature; 413 body
over ``CRCR_MAX_WEBHOOK_BYTES`` (checked on Content-Length and while streaming, so a
large body is never buffered whole); 200 ping, duplicate delivery, or an event that
is recorded as ignored; 202 with the delivery id when dispatch rows were created;
503 when storage is down. A validly signed payload never causes a 5xx: anything
unexpected while reading it is recorded as ignored with the reason.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from crcr.errors import ConfigError
from crcr.logs import log_context
from crcr.store.deliveries import ACCEPTED, IGNORED, Delivery, Dispatch
from relay import checks
from relay.events import EventInfo, describe, route
from relay.runtime import Runtime

log = logging.getLogger("crcr.relay.intake")
router = APIRouter()

DELIVERY_RE = re.compile(r"^[A-Za-z0-9._:/-]{1,200}$")
EVENT_RE = re.compile(r"^[a-z_]{1,64}$")


def sign(secret: bytes, body: bytes) -> str:
    """GitHub's ``X-Hub-Signature-256`` value for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def _answer(code: int, **body: Any) -> JSONResponse:
    headers = {"Retry-After": "5"} if code == 503 else None
    return JSONResponse(body, status_code=code, headers=headers)


class _TooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _store(runtime: Runtime, delivery_id: str, event: str, body: bytes, payload: dict[str, Any]) -> JSONResponse:
    """Runs in a worker thread: route, write one transaction (the primary key dedupes), enqueue."""
    metrics = runtime.metrics
    # Outside the try below: without an allowlist the targets are unknown, and recording
    # the delivery as ignored would lose it. The caller answers 503 (GitHub can redeliver).
    allowlist = runtime.allowlist.get() if event != "ping" else None
    try:
        info = describe(event, payload)
        if allowlist is None:
            decision_targets, reason = [], "ping"
            result = None
        else:
            result = route(info, allowlist, upstream_repo=runtime.settings.upstream_repo)
            decision_targets, reason = result.targets, result.ignored_reason
    except Exception as exc:  # an untrusted payload shape crcr did not foresee: record, don't 5xx
        log.exception("could not read delivery %s", delivery_id)
        info = EventInfo(event=event)
        decision_targets, reason, result = [], f"could not be processed: {type(exc).__name__}", None
    if result is not None and result.skipped and decision_targets:
        reason = f"not sent to {', '.join(result.skipped)}: untrusted author"
    now = runtime.clock()
    delivery = {
        "id": delivery_id, "event": event, "action": info.action, "repo": info.repo, "pr_number": info.pr_number,
        "head_sha": info.head_sha, "ref": info.ref, "labels": info.labels, "label": info.label,
        "sender": info.sender, "author_association": info.author_association,
        "payload": body.decode("utf-8", "replace"), "payload_bytes": len(body), "received_at": now,
        "status": ACCEPTED if decision_targets else IGNORED, "ignored_reason": reason,
    }
    rows = [
        {"delivery_id": delivery_id, "target": t.repo, "kind": t.kind, "level": t.level, "event_type": event,
         "state": "pending", "attempts": 0, "next_attempt_at": now, "created_at": now, "updated_at": now}
        for t in decision_targets
    ]
    with log_context(delivery_id=delivery_id, repo=info.repo, pr=info.pr_number):
        try:
            # Core statements, not ORM objects: this is the hot path of every webhook
            with runtime.write_lock, runtime.engine.begin() as conn:
                conn.execute(insert(Delivery), delivery)
                ids = list(conn.execute(
                    insert(Dispatch).returning(Dispatch.id, sort_by_parameter_order=True), rows).scalars()
                ) if rows else []
        except IntegrityError:
            # this X-GitHub-Delivery is already stored (a redelivery, or a concurrent twin)
            metrics.deliveries.labels(event, "duplicate").inc()
            return _answer(200, status="duplicate", delivery_id=delivery_id)
        # stored: from here on nothing may turn the answer into an error
        try:
            if ids and runtime.tasks is not None:
                runtime.tasks.enqueue_batch(ids)  # one task claims and sends them concurrently
            _after_store_hooks(runtime, delivery_id, event, info)
        except Exception:
            log.exception("post-store step failed; the sweeper will send the dispatches")
        if not rows:
            metrics.deliveries.labels(event, "ignored").inc()
            log.info("%s recorded as ignored: %s", event, reason)
            return _answer(200, status="ignored" if event != "ping" else "pong", delivery_id=delivery_id,
                           reason=reason)
        metrics.deliveries.labels(event, "accepted").inc()
        log.info("%s.%s accepted: %d dispatch(es)", event, info.action, len(rows))
        return _answer(202, status="accepted", delivery_id=delivery_id, dispatches=len(rows))


def _after_store_hooks(runtime: Runtime, delivery_id: str, event: str, info: EventInfo) -> None:
    """Let the check-run module react (label added later, re-run requested); never fails intake."""
    fn: Callable[..., Any]
    if event == "pull_request" and info.action == "labeled" and (info.label or "").startswith("ciflow/crcr/"):
        fn, name = checks.on_device_label, "on_device_label"
    elif event in ("check_run", "check_suite"):  # a re-run requested on a check (CRCR handles both)
        fn, name = checks.on_check_run, "on_check_run"
    else:
        return
    try:
        with runtime.sessions() as s:
            delivery = s.get(Delivery, delivery_id)
            fn(s, delivery, runtime)
            s.commit()
    except Exception:
        log.exception("relay.checks.%s failed for %s; the delivery is stored regardless", name, delivery_id)


@router.post("/webhook", summary="Receive a GitHub webhook")
@router.post("/github/webhook", include_in_schema=False)  # CRCR's path: GitHub's webhook URL can stay
async def webhook(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    secret: bytes = request.app.state.webhook_secret
    limit = runtime.settings.max_webhook_bytes
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            return _answer(400, error="bad Content-Length")
        if int(length) > limit:
            return _answer(413, error=f"body over {limit} bytes")
    signature = request.headers.get("x-hub-signature-256")
    if not signature:
        return _answer(400, error="missing X-Hub-Signature-256", hint="configure the webhook with a secret")
    if not signature.startswith("sha256=") or len(signature) != 71:
        return _answer(400, error="malformed X-Hub-Signature-256")
    try:
        body = await _read_body(request, limit)
    except _TooLarge:
        return _answer(413, error=f"body over {limit} bytes")
    if not hmac.compare_digest(sign(secret, body).encode(), signature.encode("ascii", "replace")):
        runtime.metrics.deliveries.labels("unknown", "bad_signature").inc()
        return _answer(401, error="signature does not match", hint="check the webhook secret")
    event = request.headers.get("x-github-event", "")
    delivery_id = request.headers.get("x-github-delivery", "")
    if not EVENT_RE.match(event):
        return _answer(400, error="missing or malformed X-GitHub-Event")
    if not DELIVERY_RE.match(delivery_id) or ".." in delivery_id or delivery_id.startswith("/"):
        return _answer(400, error="missing or malformed X-GitHub-Delivery")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return _answer(400, error="body is not JSON")
    if not isinstance(payload, dict):
        return _answer(400, error="body is not a JSON object")
    try:
        return await run_in_threadpool(_store, runtime, delivery_id, event, body, payload)
    except ConfigError as exc:
        log.error("allowlist unavailable, delivery %s refused: %s", delivery_id, exc.message)
        runtime.metrics.deliveries.labels(event, "allowlist_down").inc()
        return _answer(503, error="the relay cannot read its allowlist; GitHub can redeliver this delivery later")
    except SQLAlchemyError as exc:
        log.error("storage unavailable, delivery %s refused: %s", delivery_id, type(exc).__name__)
        runtime.metrics.deliveries.labels(event, "storage_down").inc()
        return _answer(503, error="storage unavailable; GitHub can redeliver this delivery later")
    except Exception:  # not stored and not the payload's fault: ask for a redelivery
        log.exception("delivery %s could not be stored", delivery_id)
        runtime.metrics.deliveries.labels(event, "storage_down").inc()
        return _answer(503, error="the delivery could not be stored; redeliver it later")
