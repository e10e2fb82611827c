"""``crcr held``: dispatches held back by trust gating, waiting for approval."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Targets an untrusted PR was not sent to (dispatch state `awaiting`). A maintainer "
                       "approves with the approval label or `/ci run` on the PR. See docs/commands.md.")


@app.callback()
def _group() -> None:
    """A group, so `list` stays a subcommand (typer collapses a one-command app)."""


@app.command("list", help="List held dispatches, newest first.")
def list_(
    pr: int = typer.Option(None, "--pr", min=1, help="only this pull request"),
    limit: int = typer.Option(100, "--limit", min=1, help="at most this many"),
    as_json: bool = typer.Option(False, "--json", help="one JSON array instead of a table"),
) -> None:
    from crcr.cli.listing import print_rows, store_runtime
    from relay.approval import list_held

    runtime = store_runtime()
    try:
        with runtime.sessions() as s:
            rows = [r for r in list_held(s, limit=limit) if pr is None or r["pr"] == pr]
    finally:
        runtime.close()
    print_rows(rows, as_json, ("dispatch", "pr", "head", "target", "author", "held since"),
               f"{len(rows)} held dispatch(es)",
               lambda r: (str(r["dispatch_id"]), str(r["pr"]), (r["head_sha"] or "")[:12], r["target"],
                          r["author_association"] or "", r["held_since"]))
