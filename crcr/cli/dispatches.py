"""``crcr dispatches``: inspect the outbox and bring dead dispatches back."""

from __future__ import annotations

import json
from typing import Any

import typer

from crcr.cli.listing import print_rows, store_runtime
from crcr.errors import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Inspect and redeliver dispatches: one row per (delivery, target) with its state "
                       "(pending, retrying, sent, dead; awaiting approval, superseded, cancelled), attempts and last error.")

STATES = ("pending", "retrying", "sent", "dead", "awaiting", "superseded", "cancelled")


def _row(d: Any) -> dict[str, Any]:
    return {
        "id": d.id, "delivery_id": d.delivery_id, "target": d.target, "kind": d.kind, "level": d.level,
        "event_type": d.event_type, "state": d.state, "attempts": d.attempts, "last_status": d.last_status,
        "last_error": d.last_error, "next_attempt_at": d.next_attempt_at.isoformat() if d.next_attempt_at else None,
        "sent_at": d.sent_at.isoformat() if d.sent_at else None, "created_at": d.created_at.isoformat(),
        "trimmed": d.trimmed,
    }


@app.command("list", help="List dispatches, newest first.")
def list_(
    state: str = typer.Option(None, "--state", help=f"only this state: {', '.join(STATES)}"),
    target: str = typer.Option(None, "--target", help="only this target repo (owner/repo)"),
    delivery: str = typer.Option(None, "--delivery", help="only this delivery id"),
    limit: int = typer.Option(50, "--limit", min=1, help="at most this many rows"),
    as_json: bool = typer.Option(False, "--json", help="one JSON array instead of a table ([] when none match)"),
) -> None:
    from sqlalchemy import select

    from crcr.store.deliveries import Dispatch

    if state is not None and state not in STATES:
        raise InputError(f"unknown state {state!r}", hint=f"use one of {', '.join(STATES)}")
    runtime = store_runtime()
    try:
        q = select(Dispatch).order_by(Dispatch.id.desc()).limit(limit)
        if state:
            q = q.where(Dispatch.state == state)
        if target:
            q = q.where(Dispatch.target == target)
        if delivery:
            q = q.where(Dispatch.delivery_id == delivery)
        with runtime.sessions() as s:
            rows = [_row(d) for d in s.scalars(q)]
    finally:
        runtime.close()
    print_rows(rows, as_json, ("id", "delivery", "target", "state", "attempts", "last error"),
               f"{len(rows)} dispatch(es)", lambda r: (str(r["id"]), r["delivery_id"], r["target"], r["state"],
                                                       str(r["attempts"]), (r["last_error"] or "")[:80]))


@app.command(help="Show one dispatch with its delivery.")
def show(dispatch_id: int = typer.Argument(..., help="the dispatch id (from `crcr dispatches list`)")) -> None:
    from crcr.store.deliveries import Delivery, Dispatch

    runtime = store_runtime()
    try:
        with runtime.sessions() as s:
            d = s.get(Dispatch, dispatch_id)
            if d is None:
                raise InputError(f"no dispatch {dispatch_id}", hint="see `crcr dispatches list`")
            out = _row(d)
            delivery = s.get(Delivery, d.delivery_id)
            out["delivery"] = {**delivery.summary(), "received_at": delivery.received_at.isoformat(),
                               "payload_bytes": delivery.payload_bytes, "payload_pruned": delivery.payload is None,
                               "ignored_reason": delivery.ignored_reason}
    finally:
        runtime.close()
    typer.echo(json.dumps(out, indent=2))


@app.command(help="""Send dispatches again: put them back to pending with a fresh attempt budget.

Give dispatch ids, or --all-dead for every dead one. Sent dispatches can be
redelivered too (the downstream sees the same delivery id again). A running
`crcr serve` or `crcr worker` on the same queue sends them.""")
def redeliver(
    ids: list[int] = typer.Argument(None, help="dispatch ids"),
    all_dead: bool = typer.Option(False, "--all-dead", help="every dispatch in state dead"),
) -> None:
    from rich.console import Console
    from rich.progress import Progress
    from sqlalchemy import select

    from crcr.store.deliveries import DEAD, Dispatch
    from relay.dispatch import redeliver as do_redeliver
    from relay.worker import register_tasks

    if not ids and not all_dead:
        raise InputError("nothing to redeliver", hint="give dispatch ids or --all-dead")
    runtime = store_runtime()
    try:
        wanted = list(ids or [])
        if all_dead:
            with runtime.sessions() as s:
                wanted += list(s.scalars(select(Dispatch.id).where(Dispatch.state == DEAD).order_by(Dispatch.id)))
        moved: list[int] = []
        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("redelivering", total=len(wanted))
            for start in range(0, len(wanted), 200):
                chunk = wanted[start:start + 200]
                moved += do_redeliver(runtime, chunk)
                progress.advance(task, len(chunk))
        enqueued = register_tasks(runtime).enqueue(moved)
    finally:
        runtime.close()
    missing = sorted(set(ids or []) - set(moved))
    if moved and enqueued < len(moved):
        typer.echo(f"{len(moved)} dispatch(es) back to pending, but the queue could not be reached: "
                   "they are sent when a sweeper (crcr serve, or crcr worker --sweeper) next runs", err=True)
    else:
        typer.echo(f"{len(moved)} dispatch(es) back to pending and enqueued")
    if missing:
        typer.echo(f"not redelivered (unknown, or still pending/retrying): {', '.join(map(str, missing))}", err=True)
    if missing or enqueued < len(moved):
        raise typer.Exit(1)
