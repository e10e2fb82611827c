"""``/livez`` (the process answers), ``/readyz`` (database, queue and allowlist usable), ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import func, select, text
from starlette.concurrency import run_in_threadpool

from crcr.queue import queue_depth
from crcr.store.deliveries import DISPATCH_STATES, Dispatch
from relay.runtime import Runtime

router = APIRouter()


@router.get("/livez", summary="Liveness: the process is serving")
def livez() -> dict[str, str]:
    return {"status": "ok"}


def _check(runtime: Runtime) -> dict[str, str]:
    checks: dict[str, str] = {}
    try:
        with runtime.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    try:
        queue_depth(runtime.huey)
        checks["queue"] = "ok"
    except Exception as exc:
        checks["queue"] = f"unreachable: {type(exc).__name__}"
    try:  # without it no webhook can be routed (intake answers 503)
        runtime.allowlist.get()
        checks["allowlist"] = "ok"
    except Exception as exc:
        checks["allowlist"] = f"unreadable: {type(exc).__name__}"
    return checks


@router.get("/readyz", summary="Readiness: database and queue reachable, allowlist readable")
async def readyz(request: Request) -> JSONResponse:
    checks = await run_in_threadpool(_check, request.app.state.runtime)
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse({"status": "ok" if ok else "unavailable", "checks": checks}, status_code=200 if ok else 503)


def install_gauges(runtime: Runtime) -> None:
    """Queue depth and open dispatch rows, read at scrape time."""
    m = runtime.metrics

    def collect() -> None:
        m.queue_depth.set(queue_depth(runtime.huey))
        with runtime.sessions() as s:
            counts = dict(s.execute(select(Dispatch.state, func.count()).group_by(Dispatch.state)).all())
        for state in DISPATCH_STATES:
            m.dispatch_rows.labels(state).set(counts.get(state, 0))

    m.on_collect(collect)


@router.get("/metrics", summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    data = await run_in_threadpool(runtime.metrics.render)
    return Response(data, media_type=CONTENT_TYPE_LATEST)
