"""``crcr report``: post a job's results to the relay (CRCR callbacks and a results upload)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(add_completion=False)


@app.command(
    help=(
        "Post a job's results to the relay as CRCR callbacks and a results upload.\n\n"
        "By default (--phase all): the in_progress callback, the full results JSON (gzip) to the relay's "
        "/results, then the completed callback with the conclusion, test_results counts and at most 1000 "
        "failed_tests. --phase start sends only in_progress (call it when the job begins); --phase finish "
        "sends the upload and completed.\n\n"
        "The token comes from --token, CRCR_CALLBACK_TOKEN, or GitHub Actions' OIDC (the job needs "
        "`permissions: id-token: write`); it is never printed. The delivery id and job identity default "
        "to the repository_dispatch event and GitHub Actions' variables."
    ),
)
def report(
    callback: Annotated[str, typer.Option(help="the relay's callback URL, e.g. https://relay.example/callback")],
    results: Annotated[Path | None, typer.Option(help="results JSON written by crcr run --results")] = None,
    results_url: Annotated[str | None, typer.Option(help="the relay's results URL (default: <callback>/../results)")] = None,
    token: Annotated[str | None, typer.Option(help="bearer token (prefer CRCR_CALLBACK_TOKEN or OIDC: argv is visible)",
                                              show_default=False)] = None,
    delivery_id: Annotated[str | None, typer.Option(help="delivery id of the dispatch (default: from GITHUB_EVENT_PATH)")] = None,
    event_type: Annotated[str | None, typer.Option(help="event type echoed in the callback (default: from the dispatch)")] = None,
    job_name: Annotated[str | None, typer.Option(help="job name (default: GITHUB_JOB)")] = None,
    audience: Annotated[str, typer.Option(help="OIDC audience the relay expects")] = "pytorch-cross-repo-ci-relay",
    phase: Annotated[str, typer.Option(help="all | start | finish")] = "all",
) -> None:
    from crcr.contracts.results import load_results
    from crcr.errors import InputError
    from runners import report as reporting

    if phase not in ("all", "start", "finish"):
        raise InputError(f"--phase {phase!r} is not a phase", hint="choose all, start or finish")
    loaded = load_results(results) if results is not None else None
    if loaded is None and phase != "start":
        raise InputError("--results FILE is needed unless --phase start", hint="crcr run --results FILE writes it")
    env = reporting.environment()
    identity = reporting.identity_from_env(env, delivery_id=delivery_id, event_type=event_type, job_name=job_name)
    bearer = reporting.resolve_token(token, env, audience)
    reporter = reporting.Reporter(callback, bearer, results_url=results_url)
    reporting.report(reporter, identity, loaded, phase, log=lambda m: typer.echo(m, err=True))
