"""``crcr serve``: the relay API with an in-process dispatch worker and the sweeper."""

from __future__ import annotations

import socket

import typer

from crcr.errors import ConfigError

app = typer.Typer(add_completion=False)


def _check_can_listen(host: str, port: int) -> None:
    """Fail with a clear error, before anything is written, if ``host:port`` cannot be bound."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                              flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            sock.bind(address)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                          hint="stop what uses that port, or pass --port N (0 picks a free one) / --host ADDRESS "
                               "(CRCR_PORT / CRCR_HOST)") from exc


def install_dashboard_hooks(runtime: object) -> None:
    """The backend page's refinement proposals come from the selector (the relay never imports it)."""
    from selector.refine import proposals_from_bodies

    runtime.refine_proposals = proposals_from_bodies  # type: ignore[attr-defined]


def _tune_gc() -> None:
    """Fewer, cheaper garbage collections for a long-running server.

    Everything built so far (modules, settings, the app) lives as long as the process:
    ``gc.freeze`` moves it out of the collector's generations, so full collections
    stop walking it. A webhook's parsed payload is a few hundred containers, so the
    default gen0 threshold (700 allocations) ran a collection every request or two,
    each walking the payloads of the requests in flight; a higher threshold runs one
    every few dozen requests (what is garbage is freed by reference counting anyway;
    the collector only finds cycles).
    """
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)


GC_GEN0_THRESHOLD = 20_000


@app.command(help="""Run the relay: POST /webhook, /callback, /results; GET /livez, /readyz, /metrics, /dashboard.

The one-command embedded default: SQLite (WAL) and a SQLite queue in CRCR_DATA_DIR,
a worker (a child process this one supervises) that sends the dispatches, and the
sweeper that re-enqueues dispatches whose worker died. Without CRCR_WEBHOOK_SECRET a random secret is
generated into <data_dir>/webhook-secret on first start (printed below) and every
webhook must be signed with it. The database is migrated on start; an allowlist
that cannot be read or parsed stops it before it listens.

Every setting is a CRCR_* variable; see docs/configuration.md.""")
def serve(
    host: str = typer.Option(None, help="address to bind (default CRCR_HOST, 127.0.0.1)"),
    port: int = typer.Option(None, min=0, max=65535, help="port to bind (default CRCR_PORT, 8000; 0 picks a free one)"),
    workers: int = typer.Option(None, min=1, help="dispatch worker threads (default CRCR_WORKERS)"),
    worker: bool = typer.Option(True, "--worker/--no-worker",
                                help="send dispatches from a `crcr worker` child process started and supervised "
                                     "by this one (at a lower CPU priority, so sending never slows intake)"),
    worker_thread: bool = typer.Option(False, "--worker-thread",
                                       help="send dispatches from threads of this process instead of a child "
                                            "process (slower intake under load)"),
    sweeper: bool = typer.Option(True, "--sweeper/--no-sweeper",
                                 help="re-enqueue dispatches left in flight (one process per deployment is enough; more are safe: sends are claimed)"),
) -> None:
    import uvicorn

    from crcr.logs import configure_logging
    from crcr.settings import get_settings
    from relay.allowlist import AllowlistSource
    from relay.app import create_app

    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)
    # read the allowlist before anything is created: a relay that cannot read it would
    # accept webhooks it cannot route
    AllowlistSource(settings.allowlist, ttl_s=settings.allowlist_ttl_s, github_api_url=settings.github_api_url).get()
    bind_host, bind_port = host or settings.host, settings.port if port is None else port
    _check_can_listen(bind_host, bind_port)
    application = create_app(settings, start_worker=worker and worker_thread, start_sweeper=sweeper, workers=workers,
                             worker_process=worker and not worker_thread)
    from crcr.cli.triage import register_trunk_task

    # a failed trunk job's callback queues triage, which looks for the commit to blame
    register_trunk_task(application.state.runtime)
    install_dashboard_hooks(application.state.runtime)
    secret_path = application.state.webhook_secret_path
    typer.echo(f"crcr relay: data in {settings.data_dir.resolve()}, database "
               f"{'SQLite (WAL)' if not settings.database_url else 'from CRCR_DATABASE_URL'}, allowlist "
               f"{settings.allowlist}", err=True)
    if secret_path is not None:
        typer.echo(f"webhook secret: generated in {secret_path} (set CRCR_WEBHOOK_SECRET to use your own)", err=True)
    _tune_gc()
    uvicorn.run(application, host=bind_host, port=bind_port,
                log_level=settings.log_level.lower(), access_log=False)
