"""``crcr triage``: find the upstream commit that broke a backend and draft the report.

``analyze`` prints the call (and writes it as JSON with ``--json``); ``report`` writes
the Markdown report and the CRCR triage-verdict JSON, and posts them when asked. Both
read the relay's database (``--backend`` is the downstream repo, e.g. acme/torch-npu),
or, offline, results files (``--results``) or a history file (``--history``).

Exit status: 0 the analysis ran (whatever it found); 1 there was nothing to analyse
(no runs for the backend) or posting failed; 2 bad input or configuration.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from crcr.errors import CrcrError, InputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Triage trunk failures of a backend: signals, classification, bisection, report.")

BackendOpt = Annotated[str, typer.Option("--backend", help="the backend's downstream repo (owner/name) as the relay knows it")]
SinceOpt = Annotated[str | None, typer.Option(help="only runs and pushes since this ISO-8601 time or this many days (e.g. 7d)")]
ResultsOpt = Annotated[list[Path] | None, typer.Option("--results", help="offline: results JSON files (crcr run --results); repeat")]
CommitsOpt = Annotated[Path | None, typer.Option(help="offline: trunk SHAs oldest first, one per line (git rev-list --reverse)")]
HistoryOpt = Annotated[Path | None, typer.Option(help="offline: a history file (YAML/JSON, tests/triage/histories format)")]
InfraOpt = Annotated[Path | None, typer.Option("--infra-patterns", help="YAML mapping of kind -> list of regular expressions, replacing the default infra patterns")]
PerCommitOpt = Annotated[int, typer.Option("--max-reruns-per-commit", min=1, max=10, help="reruns of one commit at most")]


class NothingToAnalyse(CrcrError):
    reference = "triage-no-data"
    exit_code = 1


def _since(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    text = value.strip()
    if text.endswith("d") and text[:-1].isdigit():
        return dt.datetime.now(dt.UTC) - dt.timedelta(days=int(text[:-1]))
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InputError(f"--since {value!r} is neither an ISO-8601 time nor a number of days",
                         hint="e.g. --since 2026-11-30T00:00:00Z or --since 7d") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _history(backend: str, since: str | None, results: list[Path] | None, commits: Path | None,
             history: Path | None) -> tuple[Any, Any]:
    """(History, sessionmaker or None) from the chosen source."""
    from triage import history as hist

    if history is not None and results:
        raise InputError("--history and --results are two sources: pass one", hint="see crcr triage analyze --help")
    if history is not None:
        h = hist.load_yaml(history)
        h.backend = backend or h.backend
        return h, None
    if results:
        return hist.from_results_files(list(results), backend, commits), None
    if commits is not None:
        raise InputError("--commits orders --results files", hint="pass the results files with --results")
    from crcr.settings import get_settings
    from crcr.store.migrate import upgrade
    from crcr.store.session import engine_for, sessions_for
    from triage.source import from_store

    settings = get_settings()
    engine = engine_for(settings.resolved_database_url)
    upgrade(engine)
    sessions = sessions_for(engine)
    return from_store(sessions, backend, upstream_repo=settings.upstream_repo, since=_since(since)), sessions


def _analyse(backend: str, since: str | None, results: list[Path] | None, commits: Path | None,
             history: Path | None, infra_patterns: Path | None, per_commit: int) -> tuple[Any, Any, Any]:
    from triage.bisect import analyze
    from triage.rules import load_rules

    h, sessions = _history(backend, since, results, commits, history)
    if not h.runs:
        raise NothingToAnalyse(f"no trunk runs of {backend} to analyse" + (f" since {since}" if since else ""),
                               hint="check --backend (the downstream repo) and --since; trunk runs come from "
                                    "push and nightly/periodic dispatches")
    analysis = analyze(h, load_rules(infra_patterns), _limits(per_commit))
    return h, analysis, sessions


def _limits(per_commit: int = 2) -> Any:
    """Bisection limits: reruns per commit, and per round as CRCR_TRIAGE_RERUNS_PER_ROUND says."""
    from crcr.settings import get_settings
    from triage.bisect import Limits

    return Limits(max_per_commit=per_commit, max_per_round=get_settings().triage_reruns_per_round)


def _add_requests(session: Any, backend: str, reruns: list[Any]) -> list[Any]:
    """Write the planned reruns as rerun requests, paced by CRCR_TRIAGE_RERUN_SPACING_S."""
    from crcr.settings import get_settings
    from crcr.store.triage import add_rerun_requests

    return add_rerun_requests(session, backend, [r.sha for r in reruns], reruns[0].reason, now=dt.datetime.now(dt.UTC),
                              spacing=dt.timedelta(seconds=get_settings().triage_rerun_spacing_s))


def analysis_dict(analysis: Any) -> dict[str, Any]:
    """The analysis as JSON (the interface `crcr triage analyze --json` promises)."""
    def sha(c: Any) -> str | None:
        return c.sha if c is not None else None

    return {
        "backend": analysis.backend, "kind": analysis.kind, "category": analysis.category,
        "confidence": analysis.confidence, "action": analysis.action, "summary": analysis.summary,
        "suspect": ({"sha": analysis.suspect.sha, "pr": analysis.suspect.pr, "title": analysis.suspect.title}
                    if analysis.suspect else None),
        "last_good": sha(analysis.last_good), "first_bad": sha(analysis.first_bad),
        "gap": [c.sha for c in analysis.gap], "failing_tests": analysis.failing_tests,
        "reproduced": analysis.reproduced, "sandwiched": analysis.sandwiched,
        "reruns": [{"sha": r.sha, "reason": r.reason} for r in analysis.reruns],
        "retried": analysis.retried, "notes": analysis.notes,
        "advisor": analysis.advisor,
    }


def _request_reruns(sessions: Any, analysis: Any) -> list[str]:
    if not analysis.reruns:
        return []
    with sessions.begin() as s:
        return [r.sha for r in _add_requests(s, analysis.backend, analysis.reruns)]


def _source_options(
    backend: BackendOpt,
    since: SinceOpt = None,
    results: ResultsOpt = None,
    commits: CommitsOpt = None,
    history: HistoryOpt = None,
    infra_patterns: InfraOpt = None,
    max_reruns_per_commit: PerCommitOpt = 2,
) -> None:
    """The options ``analyze`` and ``report`` share: where the runs come from, how far bisection goes."""


def _with_source_options(fn: Any) -> Any:
    """Declare ``_source_options``'s options first on a command that takes them as ``**source``."""
    shared = list(inspect.signature(_source_options, eval_str=True).parameters.values())
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.kind is not p.VAR_KEYWORD]
    fn.__signature__ = inspect.Signature([*shared, *own])
    return fn


def _analysed(source: dict[str, Any]) -> tuple[Any, Any, Any]:
    return _analyse(source["backend"], source["since"], source["results"], source["commits"], source["history"],
                    source["infra_patterns"], source["max_reruns_per_commit"])


def _echo_call(analysis: Any) -> None:
    typer.echo(f"{analysis.backend}: {analysis.kind.replace('_', ' ')} -> {analysis.action} "
               f"({analysis.category}, confidence {analysis.confidence})")


@app.command(help="Classify the backend's trunk failures and print the call (new break, flaky, infra, "
                  "born red, recovered) with the suspect commit and the reruns a bisection needs.")
@_with_source_options
def analyze(
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the analysis as JSON here ('-': stdout only)")] = None,
    request_reruns: Annotated[bool, typer.Option("--request-reruns/--no-request-reruns",
                                                 help="database mode: write the planned reruns as rerun requests "
                                                      "(the relay dispatches them)")] = False,
    **source: Any,
) -> None:
    _, analysis, sessions = _analysed(source)
    data = analysis_dict(analysis)
    if request_reruns:
        if sessions is None:
            raise InputError("--request-reruns needs the database (not --results/--history)",
                             hint="run it where CRCR_DATABASE_URL points at the relay's database")
        data["requested"] = _request_reruns(sessions, analysis)
    if json_out is not None and str(json_out) == "-":
        typer.echo(json.dumps(data, indent=1))
        return
    if json_out is not None:
        from crcr.fileio import atomic_write_text

        atomic_write_text(json_out, json.dumps(data, indent=1) + "\n")
    _echo_call(analysis)
    typer.echo(analysis.summary)
    if analysis.suspect:
        typer.echo(f"suspect: {analysis.suspect.sha}" + (f" (PR #{analysis.suspect.pr})" if analysis.suspect.pr else ""))
    for r in analysis.reruns:
        typer.echo(f"rerun: {r.sha} ({r.reason})")
    for n in analysis.notes:
        typer.echo(f"note: {n}")


@app.command(help="Write the Markdown report and the CRCR triage-verdict JSON (schema v1); optionally ask the "
                  "advisor and post to GitHub (dry-run unless --post).")
@_with_source_options
def report(
    out: Annotated[Path, typer.Option(help="directory for triage-report.md and triage-verdict.json")] = Path("."),
    advisor: Annotated[str, typer.Option(help="offline (default, no network) or claude (the anthropic Messages API)")] = "offline",
    post: Annotated[bool, typer.Option("--post/--dry-run", help="post to GitHub (default: dry-run, print what would be posted)")] = False,
    issue_repo: Annotated[str | None, typer.Option(help="open the issue in this repo (default: the backend repo)")] = None,
    comment_upstream: Annotated[bool, typer.Option("--comment-upstream/--no-comment-upstream",
                                                   help="also comment on the suspect upstream PR")] = False,
    **source: Any,
) -> None:
    from crcr.fileio import atomic_write_text
    from triage.report import markdown, verdict

    if advisor not in ("offline", "claude"):
        raise InputError(f"--advisor {advisor!r} is not an advisor", hint="choose offline or claude")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the output directory {out}: {exc.strerror}",
                         hint="pass --out DIR, a directory you can write") from exc
    h, analysis, sessions = _analysed(source)
    from triage.advisor import advise

    opinion = advise(analysis, h, advisor)
    v = verdict(analysis, model=opinion.model if opinion else "", prompt_version=opinion.prompt_version if opinion else "")
    text = markdown(analysis, v, upstream_repo=h.upstream_repo)
    md_path, json_path = out / "triage-report.md", out / "triage-verdict.json"
    atomic_write_text(md_path, text)
    atomic_write_text(json_path, json.dumps(v, indent=1) + "\n")
    _echo_call(analysis)
    typer.echo(f"wrote {md_path} and {json_path}")
    if sessions is not None:  # check-run summaries and the dashboard read it from the jobs
        from triage.source import attach_verdict

        attached = attach_verdict(sessions, h, analysis, v)
        if attached:
            typer.echo(f"verdict stored on {attached} failing trunk job(s)")
    from triage.posting import PostingConfig, publish

    config = PostingConfig.from_env(dry_run=not post, issue_repo=issue_repo or source["backend"], comment_upstream=comment_upstream,
                                    upstream_repo=h.upstream_repo)
    for line in publish(analysis, text, config, sessions=sessions):
        typer.echo(line)


def trunk_analyzer(sessions: Any, upstream_repo: str, *, window_days: int = 7, min_interval_s: float | None = None) -> Any:
    """What the relay runs after a failed trunk job or a finished triage rerun
    (``Runtime.trunk_analyzer``): analyse the backend's last ``window_days`` and write the
    rerun requests a bisection needs. At most one analysis per backend per
    ``min_interval_s`` (default CRCR_TRIAGE_MIN_INTERVAL_S: a burst of shard callbacks is
    one look); posting stays a person's step (``crcr triage report --post``)."""
    import threading
    import time

    from crcr.settings import get_settings
    from triage.bisect import analyze as run_analysis
    from triage.rules import load_rules
    from triage.source import from_store

    if min_interval_s is None:
        min_interval_s = get_settings().triage_min_interval_s
    rules = load_rules()
    last: dict[str, float] = {}
    lock = threading.Lock()

    def run(backend: str) -> list[str]:
        with lock:
            now = time.monotonic()
            if now - last.get(backend, -1e9) < min_interval_s:
                return []
            last[backend] = now
        since = dt.datetime.now(dt.UTC) - dt.timedelta(days=window_days)
        history = from_store(sessions, backend, upstream_repo=upstream_repo, since=since)
        if not history.runs:
            return []
        analysis = run_analysis(history, rules, _limits())
        if not analysis.reruns:
            return []
        with sessions.begin() as s:
            return [r.sha for r in _add_requests(s, backend, analysis.reruns)]

    return run


TRUNK_TASK = "crcr.triage.analyze_trunk"


def register_trunk_task(runtime: Any) -> Any:
    """Put triage on the relay's queue: ``runtime.trunk_analyzer`` enqueues the task
    ``crcr.triage.analyze_trunk`` (run by any worker of this queue: ``crcr serve``'s
    in-process consumer or ``crcr worker``), which analyses the backend and writes the
    bisection rerun requests. Both kinds of process call this so either can run it."""
    from relay.rerun_requests import dispatch_due

    analyzer = trunk_analyzer(runtime.sessions, runtime.settings.upstream_repo)

    def analyze_trunk(backend: str) -> int:
        requested = analyzer(backend)
        if requested:
            dispatch_due(runtime)  # the ones due now go out at once, not at the poller's next look
        return len(requested)

    task = runtime.huey.task(name=TRUNK_TASK)(analyze_trunk)
    runtime.trunk_analyzer = task  # calling a Huey task enqueues it
    return task
