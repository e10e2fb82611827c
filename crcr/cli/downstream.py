"""``crcr downstream``: consume one dispatch (what a `local` allowlist target runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

app = typer.Typer(add_completion=False)


@app.command(help="""Consume one dispatch: CRCR's client_payload as JSON on standard input.

This is the command the embedded default's `local` target runs for every relayed
event. It validates the payload and records it under
<data_dir>/downstream/received/<backend>/. With --upstream-git (a clone of upstream
holding the dispatched commits) it then tests the dispatch for real, as a backend's CI
job would: `crcr report --phase start`, `crcr select pick` over the dispatch's diff,
`crcr run` on the commit's tree (the commit's torch/**.py functions overlaid on the
installed torch), `crcr report --phase finish` to --callback (default
CRCR_PUBLIC_URL/callback) with an OIDC token (CRCR_CALLBACK_TOKEN or GitHub Actions'
token request variables). Without --upstream-git nothing is tested and it says so.

Failing tests are reported, not an error (exit 0). Exit 1 when the pipeline could not
produce results (the relay retries the dispatch); 2 on a payload that is not CRCR's
{event_type, delivery_id, payload}.""")
def downstream(
    backend: str = typer.Option("snpu", "--backend", help="the backend this dispatch is for"),
    upstream_git: Path | None = typer.Option(None, help="a git clone of upstream with the dispatched commits"),
    plan: Path = typer.Option(Path("configs/selections/snpu"), help="the backend's plan directory"),
    inventory: Path | None = typer.Option(None, help="test inventory JSON (default: collected once into the data dir)"),
    callback: str | None = typer.Option(None, help="the relay's callback URL (default: CRCR_PUBLIC_URL + /callback)"),
    device: str = typer.Option("snpu", help="device to run on: cpu, cuda or snpu"),
    budget: float | None = typer.Option(None, help="pick's time budget in seconds (default: no cut)"),
) -> None:
    from crcr.downstream import Pipeline, parse_client_payload, record_dispatch, run_pipeline
    from crcr.errors import ConfigError
    from crcr.settings import get_settings

    text = sys.stdin.read()
    payload = parse_client_payload(text)
    settings = get_settings()
    path = record_dispatch(payload, settings.data_dir, backend=backend)
    typer.echo(f"recorded {payload.event_type} delivery {payload.delivery_id} in {path}")
    if upstream_git is None:
        typer.echo("not tested: no --upstream-git clone to take the commit and its diff from", err=True)
        return
    url = callback or (settings.public_url.rstrip("/") + "/callback" if settings.public_url else None)
    if url is None:
        raise ConfigError("no callback URL to report to", hint="pass --callback URL or set CRCR_PUBLIC_URL")
    pipeline = Pipeline(backend=backend, data_dir=settings.data_dir.resolve(), upstream_git=upstream_git.resolve(),
                        plan=plan.resolve(), callback=url, inventory=inventory.resolve() if inventory else None,
                        device=device, budget_s=budget)
    summary = run_pipeline(payload, pipeline, say=lambda m: typer.echo(m, err=True))
    typer.echo(json.dumps(summary, sort_keys=True))
