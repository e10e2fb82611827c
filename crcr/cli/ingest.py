"""``crcr ingest poll``: events from an upstream repo where no GitHub App can be installed."""

from __future__ import annotations

import os
import re
import time

import typer

from crcr.errors import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Feed the relay from an upstream repo without a GitHub App on it (see docs/commands.md).")


@app.callback()
def _group() -> None:
    """A group, so `poll` stays a subcommand."""


@app.command("poll", help=(
    "Poll the upstream repo's open PRs and trunk through the REST API (conditional requests, rate-limit "
    "aware, resumable) and post each change to the relay's /webhook as a signed delivery. The first round "
    "only records what is open unless --backfill."))
def poll(
    repo: str = typer.Option(..., "--repo", help="upstream owner/repo, e.g. pytorch/pytorch"),
    relay_url: str = typer.Option(None, "--relay", help="the relay's base URL (default http://CRCR_HOST:CRCR_PORT)"),
    branch: str = typer.Option("main", "--branch", help="trunk branch whose pushes are forwarded"),
    interval: float = typer.Option(60.0, "--interval", min=5.0, help="seconds between rounds"),
    once: bool = typer.Option(False, "--once", help="one round, then exit"),
    backfill: bool = typer.Option(False, "--backfill", help="also dispatch what is open on the first round"),
    token_env: str = typer.Option("GITHUB_TOKEN", "--token-env",
                                  help="environment variable holding a GitHub token (else CRCR_GITHUB_TOKEN)"),
) -> None:
    import httpx

    from crcr.settings import get_settings
    from relay.ingest_poll import Poller
    from relay.runtime import webhook_secret

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}/[A-Za-z0-9._-]{1,100}", repo) or ".." in repo:
        raise InputError(f"--repo {repo!r} is not owner/repo", hint="e.g. --repo pytorch/pytorch")
    settings = get_settings()
    token = os.environ.get(token_env) or (settings.github_token.get_secret_value() if settings.github_token else "")
    if not token:
        raise InputError(f"no GitHub token: ${token_env} and CRCR_GITHUB_TOKEN are unset",
                          hint="export a token with read access to the repo")
    secret, _ = webhook_secret(settings, create=False)
    relay_url = relay_url or f"http://{settings.host}:{settings.port}"
    owner, name = repo.split("/", 1)
    state = settings.data_dir / "ingest" / f"{owner}__{name}.json"
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=settings.github_api_url.rstrip("/"), headers=headers, timeout=30) as gh, \
            httpx.Client(base_url=relay_url.rstrip("/"), timeout=30) as relay:
        poller = Poller(repo, github=gh, relay=relay, secret=secret, state_path=state, branch=branch,
                        backfill=backfill)
        while True:
            report = poller.poll_once()
            typer.echo(f"{repo}: {len(report.delivered)} delivered, {report.duplicates} already there, "
                       f"{report.recorded} recorded, {report.not_modified} unchanged"
                       + (f"; error: {report.error}" if report.error else ""))
            if once:
                raise typer.Exit(1 if report.error else 0)
            wait = interval
            if report.wait_until is not None:
                wait = max(interval, report.wait_until - time.time())
                typer.echo(f"rate limit low: next round in {wait:.0f}s")
            time.sleep(wait)
