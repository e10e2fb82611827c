"""``POST /results``: the full per-test results of one job (``crcr.contracts.results``).

Same bearer token and identity rules as ``/callback`` (401, 200 ``ignored`` below L2,
429 over the per-repo rate). The job is named in the query string, exactly as the
callback names it: ``?delivery_id=...&run_id=...&run_attempt=...&job_name=...``; it
must already be known (an ``in_progress`` callback came first), else 409.

The body may be gzip (``Content-Encoding: gzip``). Both the bytes on the wire and the
decompressed JSON are capped at ``max_results_bytes``; past the cap the answer is 413
at once, without reading or inflating the rest (a gzip bomb costs at most the cap).
Uploads are stored (as validated, with secrets scrubbed from excerpts) gzip-compressed
and linked to the job.
"""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from crcr.contracts.results import parse_results
from crcr.errors import ContractError
from crcr.store.jobs import CallbackLog, ResultsUpload
from relay import jobs
from relay.callbacks import admit, count, declared_too_large, error, identify, now_of, runtime_of
from relay.oidc import Identity

log = logging.getLogger("crcr.relay.results")

router = APIRouter()


class _TooLarge(Exception):
    pass


class _BadGzip(Exception):
    pass


async def _read(request: Request, limit: int, gzipped: bool) -> bytes:
    """The decompressed body; _TooLarge past ``limit`` on the wire or after inflating."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
    out = bytearray()
    wire = 0
    async for chunk in request.stream():
        wire += len(chunk)
        if wire > limit:
            raise _TooLarge
        if inflater is None:
            out += chunk
        else:
            try:
                # max_length bounds the work per chunk: a bomb stops at the cap
                out += inflater.decompress(chunk, limit + 1 - len(out))
                while inflater.unconsumed_tail and len(out) <= limit:
                    out += inflater.decompress(inflater.unconsumed_tail, limit + 1 - len(out))
            except zlib.error as exc:
                raise _BadGzip(str(exc)) from exc
        if len(out) > limit:
            raise _TooLarge
    if inflater is not None and not inflater.eof:
        raise _BadGzip("truncated gzip stream")
    return bytes(out)


def _store(runtime: Any, ident: Identity, params: dict[str, str], raw: bytes) -> JSONResponse:
    now = now_of(runtime)
    with runtime.sessions() as session:
        repo, done = admit(runtime, session, ident, "results", now)
        if done is not None:
            return done

        def record(outcome: str, status: int, reason: str | None, job_id: int | None = None) -> None:
            session.add(CallbackLog(kind="results", repo=repo, delivery_id=params.get("delivery_id", "")[:300] or None,
                                    outcome=outcome, http_status=status, reason=(reason or "")[:2000] or None,
                                    received_at=now, job_id=job_id))
            session.commit()
            count(runtime, f"results_{outcome}")

        delivery_id = params.get("delivery_id", "")
        if not delivery_id or len(delivery_id) > 300:
            record("rejected", 400, "delivery_id query parameter missing")
            return error(400, "name the job: ?delivery_id=...&run_id=...&run_attempt=...&job_name=...")
        key = (delivery_id, repo, params.get("run_id", "")[:100], params.get("run_attempt", "") [:20] or "1",
               params.get("job_name", "")[:200])
        job = jobs.find_job(session, key)
        if job is None:
            record("rejected", 409, "no such job")
            return error(409, f"no job {key[2]}/{key[3]}/{key[4]!r} of delivery {delivery_id!r} from {repo}:"
                              " send the in_progress callback first")
        try:
            results = parse_results(raw, "results upload")
        except ContractError as exc:
            record("rejected", 400, exc.message, job.id)
            return error(400, exc.message)
        except RecursionError:  # absurdly deep JSON
            record("rejected", 400, "results JSON nested too deeply", job.id)
            return error(400, "results JSON is nested too deeply")
        upload = ResultsUpload(
            job_id=job.id, repo=repo, received_at=now, device=results.run.device[:100],
            upstream_sha=(results.run.upstream_sha or None) and results.run.upstream_sha[:64],
            shard=(results.run.shard or None) and results.run.shard[:20],
            counts=results.counts(), size_bytes=len(raw),
            # the validated model, not the raw bytes: message excerpts come back scrubbed of secrets
            body_gz=gzip.compress(results.model_dump_json(exclude_none=True).encode(), compresslevel=6, mtime=0),
        )
        session.add(upload)
        session.flush()
        record("accepted", 200, None, job.id)
        log.info("[e: %s] results of %s %s stored: %d tests", delivery_id, repo, job.job_name, len(results.tests))
        return JSONResponse({"ok": True, "status": "stored", "results_id": upload.id, "job_id": job.id,
                             "counts": results.counts()})


@router.post("/results")
async def upload_results(request: Request) -> JSONResponse:
    """Store one job's full per-test results (OIDC bearer; gzip accepted; capped)."""
    runtime = runtime_of(request)
    limit = int(runtime.settings.max_results_bytes)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", ""):
        return error(415, f"Content-Encoding {encoding[:40]!r} is not accepted; send gzip or plain JSON")
    if declared_too_large(request, limit):
        return error(413, f"results uploads are limited to {limit} bytes")
    ident = await run_in_threadpool(identify, runtime, request.headers.get("authorization"))
    if isinstance(ident, JSONResponse):
        return ident
    try:
        raw = await _read(request, limit, encoding == "gzip")
    except _TooLarge:
        return error(413, f"results uploads are limited to {limit} bytes (after decompression)")
    except _BadGzip as exc:
        return error(400, f"body is not valid gzip: {exc}")
    params = {k: v for k, v in request.query_params.items() if k in ("delivery_id", "run_id", "run_attempt", "job_name")}
    try:
        return await run_in_threadpool(_store, runtime, ident, params, raw)
    except SQLAlchemyError:
        log.exception("storage failed while storing results")
        return error(503, "storage unavailable; try again later")


def load_upload(upload: ResultsUpload) -> dict[str, Any]:
    """The stored results JSON of an upload (for triage, the dashboard, the selector)."""
    return json.loads(gzip.decompress(upload.body_gz))
