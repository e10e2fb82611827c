"""``POST /callback`` (also ``/github/callback``, CRCR's path): downstream jobs report their state (CRCR's callback contract).

Order of checks, each with its own answer:

1. a declared ``Content-Length`` over ``MAX_CALLBACK_BYTES`` -> 413 (nothing read);
2. bearer token missing or invalid -> 401 (``relay.oidc``), before any of the body is read;
   then a body that grows past ``MAX_CALLBACK_BYTES`` while streaming -> 413;
3. a valid token from a repo below L2 or not allowlisted -> 200 ``{"status": "ignored"}``
   (CRCR's action calls with ``curl --fail-with-body``; an error would turn it red);
4. over ``callback_rate_per_minute`` for that repo -> 429 with ``Retry-After``;
5. not JSON / schema violation -> 400;
6. the state machine (``relay.jobs``) refuses -> 409 (no dispatch, duplicate), 400 (a skipped step: completed before in_progress, as CRCR);
7. accepted -> 200 with the job's state, queue and execution times; a malformed
   ``triage_verdict`` is dropped whole and named in ``warnings``.

Storage down -> 503. No body can cause a 5xx. Every authenticated L2+ call is
written to ``callback_log`` (which is also the rate limiter's window).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError
from starlette.background import BackgroundTask, BackgroundTasks
from starlette.concurrency import run_in_threadpool

from crcr.contracts.callback import CallbackBody
from crcr.errors import ConfigError
from crcr.store.jobs import CallbackLog
from relay import checks, jobs, oncall, ratelimit
from relay.oidc import AuthError, Identity, OidcVerifier

log = logging.getLogger("crcr.relay.callbacks")

router = APIRouter()

MAX_CALLBACK_BYTES = 2 * 1024 * 1024  # the echoed payload is < 64 KB; 1000 failed tests fit easily


class TooLarge(Exception):
    pass


def runtime_of(request: Request) -> Any:
    """The ``relay.runtime.Runtime`` the app was built with."""
    return request.app.state.runtime


def verifier_of(runtime: Any) -> OidcVerifier:
    """One verifier (and JWKS cache) per runtime, built on first use."""
    verifier = getattr(runtime, "oidc", None)
    if verifier is None:
        verifier = OidcVerifier.from_settings(runtime.settings)
        runtime.oidc = verifier
    return verifier


def now_of(runtime: Any) -> dt.datetime:
    now = runtime.clock()
    return now if now.tzinfo else now.replace(tzinfo=dt.UTC)


def error(status: int, message: str, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="crcr"'} if status == 401 else None
    return JSONResponse({"ok": False, "error": message, **extra}, status_code=status, headers=headers)


async def read_capped(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The body, refusing (TooLarge) as soon as it passes ``limit`` bytes."""
    buf = bytearray()
    async for chunk in chunks:
        buf += chunk
        if len(buf) > limit:
            raise TooLarge
    return bytes(buf)


def declared_too_large(request: Request, limit: int) -> bool:
    try:
        return int(request.headers.get("content-length", "0")) > limit
    except ValueError:
        return False


def count(runtime: Any, outcome: str) -> None:
    metrics = getattr(runtime, "metrics", None)
    if metrics is not None:
        metrics.callbacks.labels(outcome=outcome).inc()


def identify(runtime: Any, authorization: str | None) -> Identity | JSONResponse:
    try:
        return verifier_of(runtime).verify(authorization)
    except AuthError as exc:
        count(runtime, "unauthorized" if exc.status == 401 else "forbidden")
        return error(exc.status, exc.reason)


def admit(runtime: Any, session: Any, ident: Identity, kind: str, now: dt.datetime) -> tuple[str, JSONResponse | None]:
    """The repo as the allowlist spells it, or the answer that ends the request (ignored / 429)."""
    allowlist = runtime.allowlist.get()
    repo = next((r for r in allowlist.targets if r.lower() == ident.repo.lower()), ident.repo)
    level = allowlist.level_of(repo)
    if level is None or level < 2:
        count(runtime, "ignored")
        log.info("%s from %s ignored: not allowlisted at L2 or above", kind, ident.repo)
        return repo, JSONResponse({"ok": True, "status": "ignored"})
    if ratelimit.over_limit(session, repo, kind, runtime.settings.callback_rate_per_minute, now):
        session.add(CallbackLog(kind=kind, repo=repo, outcome="rate_limited", http_status=429, received_at=now,
                                reason="rate limit"))
        session.commit()
        count(runtime, "rate_limited")
        return repo, JSONResponse(
            {"ok": False, "error": f"rate limit: {runtime.settings.callback_rate_per_minute} per minute for {repo}"},
            status_code=429, headers={"Retry-After": "60"},
        )
    return repo, None


def _commit_lookup(runtime: Any):
    def lookup(sha: str) -> bool | None:
        from crcr.github.commits import commit_exists

        try:
            app = runtime.github()
        except ConfigError as exc:  # never answerable here: a 4xx, not a retry-later
            raise jobs.CallbackRejected(
                409, f"cannot verify commit {sha}: this relay has no GitHub App configured") from exc
        try:
            gh = app.client_for_repo(runtime.settings.upstream_repo)
        except Exception as exc:  # GitHub unreachable or the installation lookup failed: ask again later
            log.warning("cannot ask GitHub about %s: %s", sha, exc)
            return None
        return commit_exists(gh, runtime.settings.upstream_repo, sha)

    return getattr(runtime, "commit_lookup", None) or lookup


def handle(runtime: Any, ident: Identity, raw: bytes) -> JSONResponse:
    now = now_of(runtime)
    with runtime.sessions() as session:
        repo, done = admit(runtime, session, ident, "callback", now)
        if done is not None:
            return done

        def record(outcome: str, status: int, reason: str | None, delivery_id: str | None = None,
                   state: str | None = None, job_id: int | None = None) -> None:
            session.add(CallbackLog(kind="callback", repo=repo, delivery_id=(delivery_id or "")[:300] or None,
                                    status=state, outcome=outcome, http_status=status,
                                    reason=(reason or "")[:2000] or None, received_at=now, job_id=job_id))
            session.commit()
            count(runtime, outcome)

        try:
            body = CallbackBody.model_validate(json.loads(raw))
        except (ValueError, ValidationError, RecursionError) as exc:  # RecursionError: absurdly deep JSON
            reason = _schema_reason(exc)
            record("rejected", 400, reason)
            return error(400, reason)
        try:
            applied = jobs.apply_callback(session, repo, body, now=now, upstream_repo=runtime.settings.upstream_repo,
                                          commit_lookup=_commit_lookup(runtime),
                                          crcr_mode=runtime.allowlist.get().extensions)
        except jobs.CallbackRejected as exc:
            session.rollback()
            record("rejected", exc.status, exc.reason, body.delivery_id, body.workflow.status)
            log.info("[e: %s] callback from %s rejected: %s", body.delivery_id, repo, exc.reason)
            return error(exc.status, exc.reason)
        except jobs.UpstreamUnavailable as exc:
            session.rollback()
            return error(503, f"{exc}; try again later")
        job = applied.job
        # the job's new state, its check-run plan and the log entry commit together
        row = checks.plan_check(session, job, runtime)
        record("accepted", 200, "; ".join(applied.warnings) or None, body.delivery_id, body.workflow.status, job.id)
        log.info("[e: %s] %s %s/%s/%s: %s -> %s", job.delivery_id, repo, job.run_id, job.run_attempt,
                 job.job_name, applied.previous, job.state)
        # GitHub hears about it after the answer, so a slow GitHub never slows the job
        # (and, for a failed L3/L4 check, the PR's on-call comment: relay/oncall.py)
        background: BackgroundTask | None = (BackgroundTask(oncall.push_and_ping, runtime, row.id)
                                             if row is not None else None)
        if _failed_trunk_job(runtime, job):  # triage looks at the backend's trunk after the answer
            both = BackgroundTasks([background] if background is not None else [])
            both.add_task(_analyze_trunk, runtime, repo)
            background = both
        return JSONResponse({"ok": True, "status": body.workflow.status, "job": applied.as_dict(),
                             "warnings": applied.warnings}, background=background)


TRUNK_EVENTS = ("push", "nightly", "periodic")


def _failed_trunk_job(runtime: Any, job: Any) -> bool:
    """A completed trunk job that failed, or any completed run triage asked for (a rerun's
    delivery id holds ``/rerun/``): a passing rerun moves the bisection on as much as a
    failing one, so its answer is analysed too."""
    if getattr(runtime, "trunk_analyzer", None) is None or job.state != "completed" or job.event_type not in TRUNK_EVENTS:
        return False
    return job.conclusion not in ("success", "skipped", "neutral") or "/rerun/" in (job.delivery_id or "")


def _analyze_trunk(runtime: Any, repo: str) -> None:
    """Run the analyzer crcr.cli installed (triage); it never fails the callback."""
    try:
        runtime.trunk_analyzer(repo)
    except Exception:
        log.exception("trunk analysis of %s failed; the callback is stored regardless", repo)


def _schema_reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(body)"
        return f"callback body invalid at {loc}: {first['msg']}"
    return "callback body is not JSON"


@router.post("/callback")
@router.post("/github/callback", include_in_schema=False)  # CRCR's path: backends switch without edits
async def callback(request: Request) -> JSONResponse:
    """A downstream job reports in_progress / completed (OIDC bearer, CRCR's body)."""
    runtime = runtime_of(request)
    if declared_too_large(request, MAX_CALLBACK_BYTES):  # a header: nothing read yet
        return error(413, f"callback bodies are limited to {MAX_CALLBACK_BYTES} bytes")
    # the token first: an anonymous caller never gets 2 MB of its body buffered
    ident = await run_in_threadpool(identify, runtime, request.headers.get("authorization"))
    if isinstance(ident, JSONResponse):
        return ident
    try:
        raw = await read_capped(request.stream(), MAX_CALLBACK_BYTES)
    except TooLarge:
        return error(413, f"callback bodies are limited to {MAX_CALLBACK_BYTES} bytes")
    try:
        return await run_in_threadpool(handle, runtime, ident, raw)
    except SQLAlchemyError:
        log.exception("storage failed while handling a callback")
        return error(503, "storage unavailable; try again later")
