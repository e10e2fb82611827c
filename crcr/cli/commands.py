"""``crcr commands``: the ``/ci`` commands received from PR comments and what came of them."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="PR comment commands (/ci run, retry, cancel, status, select, help): who, on which PR, "
                       "the outcome (done, refused, invalid, failed) and why. See docs/commands.md.")


@app.callback()
def _group() -> None:
    """A group, so `list` stays a subcommand (typer collapses a one-command app)."""


@app.command("list", help="List commands, newest first.")
def list_(
    pr: int = typer.Option(None, "--pr", min=1, help="only this pull request"),
    limit: int = typer.Option(50, "--limit", min=1, help="at most this many"),
    as_json: bool = typer.Option(False, "--json", help="one JSON array instead of a table"),
) -> None:
    from crcr.cli.listing import print_rows, store_runtime
    from relay.command_actions import commands_of

    runtime = store_runtime()
    try:
        with runtime.sessions() as s:
            rows = [{"id": c.id, "pr": c.pr_number, "comment_id": c.comment_id, "commenter": c.commenter,
                     "command": c.command, "args": c.args, "permission": c.permission, "head_sha": c.head_sha,
                     "outcome": c.outcome, "detail": c.detail, "at": c.created_at.isoformat()}
                    for c in commands_of(s, pr=pr, limit=limit)]
    finally:
        runtime.close()
    print_rows(rows, as_json, ("id", "pr", "commenter", "command", "outcome", "detail"), f"{len(rows)} command(s)",
               lambda r: (str(r["id"]), str(r["pr"]), r["commenter"], " ".join(["/ci", r["command"], *r["args"]]),
                          r["outcome"], (r["detail"] or "")[:80]))
