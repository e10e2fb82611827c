"""``crcr deliveries``: every webhook the relay received, including ignored and rejected ones."""

from __future__ import annotations

import json
from typing import Any

import typer

from crcr.cli.listing import print_rows, store_runtime
from crcr.errors import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="List and show received webhooks: accepted (dispatched), ignored (stored, with the "
                       "reason nothing was sent) and rejected (answered 400/401/413, with the reason).")

STATUSES = ("accepted", "ignored", "rejected")


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _delivery_row(d: Any, dispatches: int) -> dict[str, Any]:
    return {**d.summary(), "received_at": _iso(d.received_at), "reason": d.ignored_reason, "dispatches": dispatches,
            "payload_bytes": d.payload_bytes}


def _rejected_row(r: Any) -> dict[str, Any]:
    return {"delivery_id": r.delivery_id, "event": r.event, "action": None, "repo": None, "pr": None,
            "head_sha": None, "status": "rejected", "received_at": _iso(r.received_at),
            "reason": f"{r.status_code}: {r.reason}", "status_code": r.status_code, "count": r.count}


@app.command("list", help="""List deliveries, newest first.

Rejected requests (400/401/413) are listed with their reason; their event and
delivery id are as the sender gave them (unverified). Only the newest rejected
requests are kept, and a flood is folded into one row with a count.""")
def list_(
    event: str = typer.Option(None, "--event", help="only this X-GitHub-Event (e.g. pull_request)"),
    status: str = typer.Option(None, "--status", help=f"only this status: {', '.join(STATUSES)}"),
    repo: str = typer.Option(None, "--repo", help="only deliveries from this repository (owner/repo)"),
    limit: int = typer.Option(50, "--limit", min=1, help="at most this many rows"),
    as_json: bool = typer.Option(False, "--json", help="one JSON array instead of a table"),
) -> None:
    from sqlalchemy import func, select

    from crcr.store.deliveries import Delivery, Dispatch, RejectedDelivery

    if status is not None and status not in STATUSES:
        raise InputError(f"unknown status {status!r}", hint=f"use one of {', '.join(STATUSES)}")
    runtime = store_runtime()
    rows: list[dict[str, Any]] = []
    try:
        with runtime.sessions() as s:
            if status != "rejected":
                counts = (select(Dispatch.delivery_id, func.count().label("n")).group_by(Dispatch.delivery_id)
                          .subquery())
                q = (select(Delivery, func.coalesce(counts.c.n, 0)).outerjoin(counts, counts.c.delivery_id == Delivery.id)
                     .order_by(Delivery.received_at.desc(), Delivery.id.desc()).limit(limit))
                if event:
                    q = q.where(Delivery.event == event)
                if status:
                    q = q.where(Delivery.status == status)
                if repo:
                    q = q.where(func.lower(Delivery.repo) == repo.lower())
                rows += [_delivery_row(d, n) for d, n in s.execute(q)]
            if status in (None, "rejected") and not repo:  # a rejected request names no verified repository
                q = select(RejectedDelivery).order_by(RejectedDelivery.id.desc()).limit(limit)
                if event:
                    q = q.where(RejectedDelivery.event == event)
                rows += [_rejected_row(r) for r in s.scalars(q)]
    finally:
        runtime.close()
    rows.sort(key=lambda r: r["received_at"] or "", reverse=True)
    rows = rows[:limit]
    print_rows(rows, as_json, ("received", "delivery", "event", "repo", "pr", "status", "dispatches", "reason"),
               f"{len(rows)} deliver{'y' if len(rows) == 1 else 'ies'}", _cells)


def _cells(r: dict[str, Any]) -> tuple[str, ...]:
    event_name = r["event"] or "-"
    if r.get("action"):
        event_name += f".{r['action']}"
    if r.get("count", 1) > 1:
        event_name += f" (x{r['count']})"
    return ((r["received_at"] or "")[:19], r["delivery_id"] or "-", event_name, r["repo"] or "-",
            str(r["pr"] or "-"), r["status"], str(r.get("dispatches", 0)), (r["reason"] or "")[:80])


@app.command(help="Show one delivery (JSON): what was received, why it was sent or not, and its dispatches.")
def show(delivery_id: str = typer.Argument(..., help="the X-GitHub-Delivery id (from `crcr deliveries list`)")) -> None:
    from sqlalchemy import select

    from crcr.store.deliveries import Delivery, Dispatch, RejectedDelivery

    runtime = store_runtime()
    try:
        with runtime.sessions() as s:
            d = s.get(Delivery, delivery_id)
            if d is not None:
                dispatches = list(s.scalars(select(Dispatch).where(Dispatch.delivery_id == d.id).order_by(Dispatch.id)))
                out = _delivery_row(d, len(dispatches))
                out.update(ref=d.ref, labels=d.labels, label=d.label, sender=d.sender,
                           author_association=d.author_association, payload_pruned=d.payload is None,
                           dispatch_rows=[{"id": x.id, "target": x.target, "state": x.state, "attempts": x.attempts,
                                           "last_status": x.last_status, "last_error": x.last_error}
                                          for x in dispatches])
            else:
                rejected = list(s.scalars(select(RejectedDelivery).where(RejectedDelivery.delivery_id == delivery_id)
                                          .order_by(RejectedDelivery.id.desc()).limit(20)))
                if not rejected:
                    raise InputError(f"no delivery {delivery_id!r}",
                                     hint="see `crcr deliveries list` (rejected requests are kept only while recent)")
                out = {**_rejected_row(rejected[0]), "rejections": [_rejected_row(r) for r in rejected]}
    finally:
        runtime.close()
    typer.echo(json.dumps(out, indent=2))
