"""``POST /webhook``: verify, store (delivery + outbox rows in one transaction), acknowledge.

Storing goes through ``relay.group_commit``: one writer thread commits the deliveries
of concurrent requests together and answers each only after its commit.

Answers: 400 no/odd signature or headers or bad JSON; 401 wrong signature; 413 body
over ``CRCR_MAX_WEBHOOK_BYTES`` (checked on Content-Length and while streaming, so a
large body is never buffered whole); 200 ping, duplicate delivery, or an event that
is recorded as ignored, or held (trust gating: ``"status": "held"``, the targets stored as
``awaiting`` approval); 202 with the delivery id when dispatch rows were created;
503 when storage is down. A validly signed payload never causes a 5xx: anything
unexpected while reading it is recorded as ignored with the reason. Every 400/401/413
is logged with its reason and recorded in ``rejected_deliveries`` (rate-limited and
capped; never the body or a secret). A ``check_run`` re-run answers 202 ``rerun`` with
the new delivery id.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from sqlalchemy.exc import SQLAlchemyError

from crcr.errors import ConfigError
from crcr.logs import log_context
from crcr.store.deliveries import ACCEPTED, Delivery, Dispatch
from relay import checks, command_actions
from relay.events import routing_view
from relay.group_commit import GroupWriter, Incoming, Rejected, Stored
from relay.runtime import Runtime

log = logging.getLogger("crcr.relay.intake")
router = APIRouter()

DELIVERY_RE = re.compile(r"^[A-Za-z0-9._:/-]{1,200}$")
# every event name GitHub sends: lowercase letters, digits, underscore (projects_v2_item)
EVENT_RE = re.compile(r"^[a-z0-9_]{1,64}$")


def sign(secret: bytes, body: bytes) -> str:
    """GitHub's ``X-Hub-Signature-256`` value for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


try:  # optional (the `fast` extra): parses a 23 KB payload in 40 us instead of 100 us
    import orjson

    _fast_loads: Callable[[bytes], Any] | None = orjson.loads
    _FastError: type[Exception] = orjson.JSONDecodeError
except ImportError:  # pragma: no cover - the stdlib parser answers the same
    _fast_loads, _FastError = None, ValueError


def parse_json(body: bytes) -> Any:
    """The payload as Python objects: orjson when installed, the stdlib for anything it refuses.

    orjson is strict where ``json`` is lenient (NaN, integers over 64 bits, lone
    surrogates, a byte-order mark, UTF-16): such a body goes to ``json.loads``, so the
    answers (and what is stored) are exactly those of the stdlib parser. Raises
    ``ValueError`` or ``RecursionError`` as ``json.loads`` does.
    """
    if _fast_loads is not None:
        try:
            return _fast_loads(body)
        except _FastError:
            pass
    return json.loads(body)


def _answer(code: int, **body: Any) -> JSONResponse:
    headers = {"Retry-After": "5"} if code == 503 else None
    return JSONResponse(body, status_code=code, headers=headers)


class _Accepted(Response):
    """The 202 of a dispatched delivery, built without JSONResponse's generic encoding.

    The body is byte for byte what ``_answer(202, status="accepted", ...)`` renders: the
    delivery id matched ``DELIVERY_RE`` (no character JSON escapes) and ``dispatches``
    and ``held`` are ints.
    """

    media_type = "application/json"

    def __init__(self, delivery_id: str, dispatches: int, held: int) -> None:
        self.status_code = 202
        self.background = None
        tail = f',"held":{held}}}' if held else "}"
        self.body = f'{{"status":"accepted","delivery_id":"{delivery_id}","dispatches":{dispatches}{tail}'.encode()
        self.raw_headers = [(b"content-length", str(len(self.body)).encode()), _JSON_TYPE]


_JSON_TYPE = (b"content-type", b"application/json")


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


def wants_command_hook(stored: Stored) -> bool:
    """PR comments (``/ci`` commands) and labels (the approval label) for relay.command_actions."""
    return stored.event == "issue_comment" or (stored.event == "pull_request" and stored.info.action == "labeled")


def hook_name(stored: Stored) -> str | None:
    """The hook a stored delivery needs, if any (``on_command``: relay.command_actions only)."""
    info = stored.info
    if stored.event == "pull_request" and info.action == "labeled" and (info.label or "").startswith("ciflow/crcr/"):
        return "on_device_label"
    if stored.event in ("check_run", "check_suite"):  # a re-run requested on a check (CRCR handles both)
        return "on_check_run"
    return "on_command" if wants_command_hook(stored) else None


def after_store(runtime: Runtime, stored: Stored) -> dict[str, Any] | None:
    """Let the check-run module react (label added later, re-run requested); never fails intake.

    Returns what a ``check_run`` re-run did (for the answer), else None.
    """
    delivery_id = stored.delivery_id
    name = hook_name(stored)
    if wants_command_hook(stored):
        try:  # only queues a task: /ci commands never hold up GitHub's answer
            command_actions.on_delivery(runtime, delivery_id, stored.event, stored.info)
        except Exception:
            log.exception("relay.command_actions failed for %s; the delivery is stored regardless", delivery_id)
    if name is None or name == "on_command":
        return None
    fn: Callable[..., Any] = checks.on_device_label if name == "on_device_label" else checks.on_check_run
    try:
        with runtime.sessions() as s:
            delivery = s.get(Delivery, delivery_id)
            result = fn(s, delivery, runtime)
            answer = None
            if name == "on_check_run" and isinstance(result, Dispatch):
                # the re-run is this delivery's outcome: say so wherever the delivery is shown
                delivery.status = ACCEPTED
                delivery.ignored_reason = (f"check run re-run requested: dispatched again to {result.target} "
                                           f"as delivery {result.delivery_id}")
                answer = {"status": "rerun", "rerun_delivery_id": result.delivery_id, "dispatch_id": result.id,
                          "target": result.target}
            elif name == "on_check_run" and _reran_upstream_style(runtime, delivery):
                what = "its failed jobs" if delivery.event == "check_run" else "all its jobs"
                delivery.status = ACCEPTED
                delivery.ignored_reason = (f"{delivery.event} re-run requested: the downstream workflow run is "
                                           f"re-run ({what}) through the Actions API, as CRCR does")
                answer = {"status": "rerun", "how": delivery.ignored_reason}
            s.commit()
            return answer
    except Exception:
        log.exception("relay.checks.%s failed for %s; the delivery is stored regardless", name, delivery_id)
        return None


def _reran_upstream_style(runtime: Runtime, delivery: Delivery | None) -> bool:
    """Whether ``checks.on_check_run`` started CRCR's re-run (it runs in the background)."""
    return (delivery is not None and delivery.action in ("rerequested", "requested_action")
            and (delivery.repo or "").lower() == runtime.settings.upstream_repo.lower()
            and getattr(runtime.allowlist.get(), "rerun", "upstream") == "upstream")


class RejectionLimiter:
    """Token bucket for recording rejected requests (metrics and logs count every one).

    Over the rate, a rejection is folded into a counter per (status, reason) that the
    next recorded row of that kind carries in ``count``: a flood of bad requests costs
    at most ``rate`` small rows a second, and the table keeps only its newest rows.
    """

    def __init__(self, rate: float = 10.0, burst: float = 20.0) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = burst
        self.at = time.monotonic()
        self.folded: dict[tuple[int, str], int] = {}

    def take(self, key: tuple[int, str]) -> int:
        """How many rejections the row to write now stands for (0: fold this one, write nothing)."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            self.folded[key] = self.folded.get(key, 0) + 1
            return 0
        self.tokens -= 1
        return 1 + self.folded.pop(key, 0)


def _clean(value: str | None, limit: int) -> str | None:
    """An unverified header value made safe to log and store (no control chars, bounded)."""
    if not value:
        return None
    return _UNSAFE.sub("?", value[:limit])


_UNSAFE = re.compile(r"[^A-Za-z0-9._:/@+-]")


def _reject(request: Request, code: int, reason: str, **extra: Any) -> JSONResponse:
    """Answer 400/401/413, log the reason and record it (never the body, never a secret)."""
    runtime: Runtime = request.app.state.runtime
    event = _clean(request.headers.get("x-github-event"), 64)
    delivery_id = _clean(request.headers.get("x-github-delivery"), 200)
    label = event if event and EVENT_RE.match(event) else "unknown"
    runtime.metrics.deliveries.labels(label, f"rejected_{code}").inc()
    log.warning("webhook rejected with %d: %s (event %s, delivery %s)", code, reason, event or "-", delivery_id or "-")
    limiter: RejectionLimiter = request.app.state.rejection_limiter
    count = limiter.take((code, reason))
    if count:
        request.app.state.intake_writer.record_rejected(Rejected(delivery_id, event, code, reason, count))
    return _answer(code, error=reason, **extra)


WEBHOOK_PATHS = frozenset({"/webhook", "/github/webhook"})


class WebhookFastPath:
    """ASGI middleware: ``POST /webhook`` (and CRCR's ``/github/webhook``) go straight to ``webhook``.

    The busiest route skips FastAPI's routing, exception and exit-stack layers (the
    handler takes the raw ``Request`` and has no dependencies or response model to
    resolve); it still runs inside Starlette's error middleware, so an unexpected
    exception is a 500 as on any route. Everything else, and a mounted ``root_path``,
    takes the normal route (which stays registered: OpenAPI and direct calls see it).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if is_fast_webhook(scope):
            response = await webhook(Request(scope, receive))
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def is_fast_webhook(scope: Any) -> bool:
    """``POST /webhook`` (or ``/github/webhook``) without a mounted ``root_path``: the hot route."""
    return (scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in WEBHOOK_PATHS
            and not scope.get("root_path"))


async def serve_webhook(scope: Any, receive: Any, send: Any) -> None:
    """The webhook as a bare ASGI call (``relay.app.RelayApp``): an unexpected exception is a 500, as on any route.

    As Starlette's error middleware does: the 500 is sent (nothing of the answer was
    sent yet: ``webhook`` returns its response before sending it) and the exception
    raised again for the server to log.
    """
    try:
        response = await webhook(Request(scope, receive))
    except Exception:
        await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
        raise
    await response(scope, receive, send)


@router.post("/webhook", summary="Receive a GitHub webhook")
@router.post("/github/webhook", include_in_schema=False)  # CRCR's path: GitHub's webhook URL can stay
async def webhook(request: Request) -> Response:
    state = request.app.state
    runtime: Runtime = state.runtime
    secret: bytes = state.webhook_secret
    limit = runtime.settings.max_webhook_bytes
    # the headers read here, in one pass (the first of a repeated header, as Starlette's Headers.get)
    headers = {k: v for k, v in reversed(request.scope["headers"]) if k in _READ_HEADERS}
    length = _header(headers, b"content-length")
    if length is not None:
        if not length.isdigit():
            return _reject(request, 400, "bad Content-Length")
        if int(length) > limit:
            return _reject(request, 413, f"body over {limit} bytes")
    signature = _header(headers, b"x-hub-signature-256")
    if not signature:
        return _reject(request, 400, "missing X-Hub-Signature-256", hint="configure the webhook with a secret")
    if not signature.startswith("sha256=") or len(signature) != 71:
        return _reject(request, 400, "malformed X-Hub-Signature-256")
    try:
        body = await _read_body(request, limit)
    except _TooLarge:
        return _reject(request, 413, f"body over {limit} bytes")
    if not hmac.compare_digest(sign(secret, body).encode(), signature.encode("ascii", "replace")):
        return _reject(request, 401, "signature does not match", hint="check the webhook secret")
    event = _header(headers, b"x-github-event") or ""
    delivery_id = _header(headers, b"x-github-delivery") or ""
    if not EVENT_RE.match(event):
        return _reject(request, 400, "missing or malformed X-GitHub-Event")
    if not DELIVERY_RE.match(delivery_id) or ".." in delivery_id or delivery_id.startswith("/"):
        return _reject(request, 400, "missing or malformed X-GitHub-Delivery")
    # only the fields routing reads (the body is stored as received); anything odd is parsed whole
    payload = routing_view(body)
    try:
        if payload is None:
            payload = parse_json(body)
    except (ValueError, RecursionError):
        return _reject(request, 400, "body is not JSON")
    if not isinstance(payload, dict):
        return _reject(request, 400, "body is not a JSON object")
    writer: GroupWriter = state.intake_writer
    try:
        stored = await writer.store(Incoming(delivery_id, event, body, payload))
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
    return _answer_for(runtime, stored)


_READ_HEADERS = frozenset({b"content-length", b"x-hub-signature-256", b"x-github-event", b"x-github-delivery"})


def _header(headers: dict[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")


def _answer_for(runtime: Runtime, stored: Stored) -> Response:
    metrics, event, info = runtime.metrics, stored.event, stored.info
    if stored.dispatch_ids and stored.hook is None and not stored.duplicate:
        # the common case, on the hot path: logged once per batch by relay.group_commit
        # (every delivery stays listed by `crcr deliveries`), counted here
        metrics.delivery(event, "accepted").inc()
        if stored.held:
            metrics.held.inc(stored.held)
        if log.isEnabledFor(logging.DEBUG):
            with log_context(delivery_id=stored.delivery_id, repo=info.repo, pr=info.pr_number):
                log.debug("%s.%s accepted: %d dispatch(es)", event, info.action, len(stored.dispatch_ids))
        return _Accepted(stored.delivery_id, len(stored.dispatch_ids), stored.held)
    with log_context(delivery_id=stored.delivery_id, repo=info.repo, pr=info.pr_number):
        if stored.duplicate:
            # this X-GitHub-Delivery is already stored (a redelivery, or a concurrent twin)
            metrics.deliveries.labels(event, "duplicate").inc()
            return _answer(200, status="duplicate", delivery_id=stored.delivery_id)
        if stored.hook is not None:  # a check-run re-run: say what was dispatched
            metrics.deliveries.labels(event, "rerun").inc()
            log.info("%s.%s: re-run: %s", event, info.action,
                     stored.hook.get("rerun_delivery_id") or stored.hook.get("how"))
            # 202 when a new dispatch was created; CRCR's Actions API re-run answers 200 as CRCR does
            return _answer(202 if "dispatch_id" in stored.hook else 200, delivery_id=stored.delivery_id,
                           **stored.hook)
        if stored.held:  # trust gating: stored as awaiting approval (no target dispatched)
            metrics.held.inc(stored.held)
            metrics.deliveries.labels(event, "held").inc()
            log.info("%s held for approval: %s", event, stored.reason)
            return _answer(200, status="held", delivery_id=stored.delivery_id, reason=stored.reason, held=stored.held)
        metrics.deliveries.labels(event, "ignored").inc()
        log.info("%s recorded as ignored: %s", event, stored.reason)
        return _answer(200, status="ignored" if event != "ping" else "pong", delivery_id=stored.delivery_id,
                       reason=stored.reason)
