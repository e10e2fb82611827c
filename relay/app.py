"""The relay's FastAPI application.

``create_app(settings)`` builds the app; its lifespan migrates the database, registers
the worker tasks and (for ``crcr serve``) runs an in-process Huey consumer and the
sweeper. Routers: intake (``/webhook``), callbacks (``/callback``), results
(``/results``), health (``/livez``, ``/readyz``, ``/metrics``), dashboard (``/dashboard``). Shared dependencies are
in ``relay.deps``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from crcr.queue import ConsumerThread
from crcr.settings import Settings
from crcr.store.migrate import upgrade
from relay import callbacks, health, intake, rerun_requests, results
from relay.dashboard import pages as dashboard
from relay.group_commit import GroupWriter
from relay.oidc import OidcVerifier
from relay.runtime import Runtime, webhook_secret
from relay.wal_checkpoint import Checkpointer
from relay.worker import Sweeper, register_tasks
from relay.worker_process import WorkerProcess

log = logging.getLogger("crcr.relay")

INTAKE_WRITERS = 4  # intake transactions in flight at once on PostgreSQL (relay.group_commit)


class RelayApp(FastAPI):
    """The relay's FastAPI app; ``POST /webhook`` is served before any framework layer.

    GitHub's webhooks are the one route under load: they go straight to
    ``relay.intake.serve_webhook`` (which answers 500 for an unexpected exception, as
    Starlette's error middleware would), skipping FastAPI's and Starlette's per-request
    layers (their error, telemetry and body-limit middleware, the router): ~15 us per
    request in a profile under wrk. With FastAPI's OpenTelemetry instrumentation
    configured, webhooks take the normal path (``intake.WebhookFastPath``) and are traced.
    """

    _traced = False
    _traced_at = -1.0

    def _telemetry_on(self) -> bool:
        """Whether FastAPI's telemetry is configured (asked at most once a second: it reads the environment)."""
        now = time.monotonic()
        if now - self._traced_at >= 1.0:
            self._traced, self._traced_at = bool(self._native_telemetry.enabled()), now
        return self._traced

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if intake.is_fast_webhook(scope) and not self.root_path and not self._telemetry_on():
            scope["app"] = self
            await intake.serve_webhook(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings, *, runtime: Runtime | None = None, start_worker: bool = True,
               start_sweeper: bool = True, workers: int | None = None, migrate: bool = True,
               worker_process: bool = False) -> FastAPI:
    """The relay app.

    ``start_worker``: run dispatch tasks in a thread of this process; ``worker_process``
    (``crcr serve``'s default) instead runs them in a child ``crcr worker`` at a lower
    CPU priority, woken through a pipe, so sending never competes with intake for this
    interpreter.
    """
    # read ci_providers.yml first: a file crcr cannot use stops the start (naming the key)
    # before anything is created, instead of answering 500 to every callback later
    verifier = OidcVerifier.from_settings(settings) if getattr(runtime, "oidc", None) is None else None
    runtime = runtime or Runtime.from_settings(settings)
    if verifier is not None:
        runtime.oidc = verifier
    secret, secret_path = webhook_secret(settings)
    checkpointer = Checkpointer(runtime.engine)
    # SQLite (local, no network wait) with a file allowlist: write on the event loop
    inline = runtime.engine.dialect.name == "sqlite" and not runtime.allowlist.is_url
    # PostgreSQL: overlapping transactions (SQLite has one writer at a time anyway)
    writers = 1 if runtime.engine.dialect.name == "sqlite" else INTAKE_WRITERS
    # PostgreSQL through psycopg: the batches are written on the event loop with psycopg's
    # async connections (no writer threads, no thread handoff per request)
    async_pg = runtime.engine.dialect.name == "postgresql" and runtime.engine.dialect.driver == "psycopg"
    writer = GroupWriter(runtime, hooks=intake.after_store, wants_hook=lambda s: intake.hook_name(s) is not None,
                         inline=inline, writers=writers, async_pg=async_pg)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if migrate:
            await run_in_threadpool(upgrade, runtime.engine)
        register_tasks(runtime)
        rerun_requests.register(runtime)
        checkpointer.start()
        consumer = sweeper = child = reruns = None
        if worker_process:
            child = WorkerProcess(workers=workers or settings.workers)
            child.start()
            runtime.wakeup = child.wakeup
        elif start_worker:
            consumer = ConsumerThread(runtime.huey, workers=workers or settings.workers, wakeup=runtime.wakeup)
            consumer.start()
        if start_sweeper:
            sweeper = Sweeper(runtime)
            sweeper.start()
            reruns = rerun_requests.RerunPoller(runtime)  # triage's rerun requests -> push dispatches
            reruns.start()
        try:
            yield
        finally:
            if reruns:
                reruns.stop()
            if sweeper:
                sweeper.stop()
            await writer.aclose()
            await run_in_threadpool(writer.stop)
            if consumer:
                await run_in_threadpool(consumer.stop)
            if child:
                await run_in_threadpool(child.stop)
            await run_in_threadpool(checkpointer.stop)
            runtime.close()

    app = RelayApp(title="crcr relay", version="1", lifespan=lifespan,
                  description="Cross-repository CI relay: webhooks in, repository_dispatch out, callbacks back.")
    app.state.runtime = runtime
    app.state.webhook_secret = secret
    app.state.webhook_secret_path = secret_path
    app.state.intake_writer = writer
    app.state.rejection_limiter = intake.RejectionLimiter()
    health.install_gauges(runtime)
    app.add_middleware(intake.WebhookFastPath)  # the hot route without FastAPI's routing layers
    app.include_router(intake.router)
    app.include_router(callbacks.router)
    app.include_router(results.router)
    app.include_router(health.router)
    app.include_router(dashboard.router)
    return app
