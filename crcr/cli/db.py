"""``crcr db``: schema migrations and retention."""

from __future__ import annotations

import datetime as dt

import typer

from crcr.errors import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Database migrations (upgrade) and retention (prune). Uses CRCR_DATABASE_URL "
                       "(default: SQLite in CRCR_DATA_DIR).")


@app.command(help="Bring the database schema to the latest version (Alembic). Safe to run again.")
def upgrade(revision: str = typer.Option("head", help="target revision")) -> None:
    from crcr.settings import get_settings
    from crcr.store.base import make_engine
    from crcr.store.migrate import current_revision
    from crcr.store.migrate import upgrade as do_upgrade

    settings = get_settings()
    engine = make_engine(settings.resolved_database_url)
    try:
        do_upgrade(engine, revision)
        typer.echo(f"database at revision {current_revision(engine)} "
                   f"({engine.url.render_as_string(hide_password=True)})")
    finally:
        engine.dispose()


@app.command(help="""Retention: drop data older than DAYS.

Raw webhook payloads are dropped (the delivery rows and dispatch history stay;
deliveries with a dispatch still pending or retrying keep their payload; a pruned
delivery can no longer be redelivered). Callback log rows and results uploads of
that age are deleted (jobs and check runs stay).""")
def prune(
    older_than: float = typer.Option(None, "--older-than", help="age in days (default CRCR_RETENTION_DAYS)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="only count what would be dropped"),
) -> None:
    from crcr.settings import get_settings
    from crcr.store.base import make_engine, make_sessionmaker
    from crcr.store.migrate import upgrade as do_upgrade
    from crcr.store.prune import prunable, prune_payloads

    settings = get_settings()
    days = settings.retention_days if older_than is None else older_than
    if days < 0:
        raise InputError(f"--older-than must be 0 or more days, got {days}", hint="e.g. --older-than 30")
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=days)
    engine = make_engine(settings.resolved_database_url)
    try:
        do_upgrade(engine)
        sessions = make_sessionmaker(engine)
        if dry_run:
            typer.echo(f"{prunable(sessions, cutoff)} payload(s) older than {days:g} day(s) would be dropped")
            return
        from rich.console import Console
        from rich.progress import Progress

        from crcr.store.jobs import prune_callback_data

        with Progress(console=Console(stderr=True), transient=True) as progress:
            bar = progress.add_task("dropping payloads", total=prunable(sessions, cutoff))
            n = prune_payloads(sessions, cutoff, progress=lambda k: progress.advance(bar, k))
            progress.update(bar, description="dropping callback logs and results uploads")
            other = prune_callback_data(sessions, cutoff)
        extra = ", ".join(f"{k} {v}" for k, v in other.items())
        typer.echo(f"dropped {n} payload(s) older than {days:g} day(s); deleted rows: {extra}")
    finally:
        engine.dispose()
