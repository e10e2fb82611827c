"""``crcr worker``: a Huey consumer process running the relay's dispatch tasks."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False)


@app.command(help="""Run dispatch workers against the shared database and queue.

Start as many as you like, on any machine that reaches CRCR_DATABASE_URL and
CRCR_QUEUE_URL (a redis:// queue for more than one machine). Rows in the database
are the truth: a worker killed mid-attempt loses nothing, the sweeper (enable it
in one process: `crcr serve` runs one, or pass --sweeper here) sends it again.
SIGINT stops gracefully (running attempts finish); SIGTERM stops at once.""")
def worker(
    workers: int = typer.Option(4, "--workers", "-w", min=1, help="worker threads in this process"),
    sweeper: bool = typer.Option(False, "--sweeper/--no-sweeper", help="also run the sweeper in this process"),
    migrate: bool = typer.Option(True, "--migrate/--no-migrate", help="upgrade the database schema first"),
    wake_stdin: bool = typer.Option(False, "--wake-stdin", hidden=True,
                                    help="crcr serve's child: wake on each byte of stdin, stop at its end"),
    nice: int = typer.Option(0, "--nice", min=0, max=19, help="lower this process's CPU priority by N"),
) -> None:
    import os
    import signal
    import threading

    from crcr.logs import configure_logging
    from crcr.queue import WakeableConsumer, Wakeup, apply_wake_bytes
    from crcr.settings import get_settings
    from crcr.store.migrate import upgrade
    from relay.runtime import Runtime
    from relay.worker import Sweeper, register_tasks

    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)
    runtime = Runtime.from_settings(settings)
    if migrate:
        upgrade(runtime.engine)
    register_tasks(runtime)
    from relay import rerun_requests

    rerun_requests.register(runtime)  # triage's rerun requests -> push dispatches
    from crcr.cli.triage import register_trunk_task

    register_trunk_task(runtime)  # this worker can run the triage the relay queues after a failed trunk job
    sweep = Sweeper(runtime) if sweeper else None
    reruns = rerun_requests.RerunPoller(runtime) if sweeper else None
    if sweep:
        sweep.start()
    if reruns:
        reruns.start()
    if nice:
        os.nice(nice)
    wakeup = None
    if wake_stdin:
        wakeup = runtime.wakeup = Wakeup()

        def read_wakeups() -> None:
            while chunk := os.read(0, 4096):  # one byte per enqueue of the parent, or "intake is busy"
                apply_wake_bytes(chunk, wakeup)
            os.kill(os.getpid(), signal.SIGINT)  # the parent closed the pipe (or died): stop gracefully

        threading.Thread(target=read_wakeups, name="crcr-wake-stdin", daemon=True).start()
    consumer = WakeableConsumer(runtime.huey, wakeup=wakeup, workers=workers, periodic=False, max_delay=0.5,
                                initial_delay=0.05, backoff=1.5, worker_type="thread")
    typer.echo(f"crcr worker: {workers} thread(s) on queue {settings.queue_name!r}", err=True)
    try:
        consumer.run()
    finally:
        if reruns:
            reruns.stop()
        if sweep:
            sweep.stop()
        runtime.close()
