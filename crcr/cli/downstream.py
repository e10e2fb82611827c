"""``crcr downstream``: consume one dispatch (what a `local` allowlist target runs)."""

from __future__ import annotations

import sys

import typer

app = typer.Typer(add_completion=False)


@app.command(help="""Consume one dispatch: CRCR's client_payload as JSON on standard input.

This is the command the embedded default's `local` target runs for every relayed
event. Today it validates the payload and records it under
<data_dir>/downstream/received/<backend>/ (so you can see what arrived); selecting,
running and reporting tests from it is not wired in yet. Exit status 2 on a payload
that is not CRCR's {event_type, delivery_id, payload}.""")
def downstream(
    backend: str = typer.Option("snpu", "--backend", help="the backend this dispatch is for"),
) -> None:
    from crcr.downstream import parse_client_payload, record_dispatch
    from crcr.settings import get_settings

    text = sys.stdin.read()
    payload = parse_client_payload(text)
    path = record_dispatch(payload, get_settings().data_dir, backend=backend)
    typer.echo(f"recorded {payload.event_type} delivery {payload.delivery_id} in {path}")
