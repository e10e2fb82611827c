"""Check runs on the upstream PR for downstream jobs (L3 with its device label, all L4).

Named ``crcr/<owner>/<repo>/<workflow>/<job>``, ``external_id`` = ``<run_id>:<pr>`` (as
CRCR), created in progress and completed with a summary (counts, failed tests, links,
verdict); as CRCR, each push creates a new check run (a ``crcr:`` allowlist section
makes crcr update one check run per job in place). The ``check_runs`` row is the desired state, committed with the callback;
pushing it to GitHub happens after the callback is answered (so a slow GitHub never
slows a downstream job), by the one pusher that claimed the row's current version, with
no row lock held while GitHub answers, and a row GitHub refused stays ``synced = False`` until the
next successful push or ``sync_pending`` retries it. A GitHub failure never fails the
callback that caused it.

Entry points for the rest of the relay:

- ``plan_check(session, job, runtime)`` with each accepted callback (committed with
  it), then ``push_planned(runtime, row_id)`` after the answer is sent;
- ``on_device_label(session, delivery, runtime)`` when a ``ciflow/crcr/<device>``
  label is added: checks appear for the jobs already running or done (pushed from a
  background thread: intake must answer GitHub quickly);
- ``rerun_for_check(session, delivery, runtime)`` for ``check_run`` ``rerequested``
  / ``requested_action``: a new delivery ``<original>/rerun/<n>`` with its dispatch.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import threading
from typing import Any, Protocol

from sqlalchemy import func, insert, or_, select, true, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from crcr.github.checks import (
    CONCLUSIONS,
    MAX_SUMMARY_CHARS,
    CheckOutput,
    CheckRunError,
    create_check_run,
    update_check_run,
)
from crcr.store.deliveries import Delivery, Dispatch
from crcr.store.jobs import COMPLETED, IN_PROGRESS, CheckRun, Job, ResultsUpload, utcnow
from relay.events import describe, route
from relay.rows import delivery_row, dispatch_rows

log = logging.getLogger("crcr.relay.checks")

LABEL_PREFIX = "ciflow/crcr/"
MAX_FAILED_LISTED = 100
RETRY_ON_SUCCESS = 3  # unsynced rows retried after a push that went through
RERUN_ACTION = "rerun"
# GitHub's requested_action button: label <= 20 chars, description <= 40, identifier <= 20
RERUN_BUTTON = {"label": "Re-run backend", "description": "Dispatch this upstream event again", "identifier": RERUN_ACTION}
MAX_NAME_CHARS = 300
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._\- ()\[\]:+=,]")


class _Runtime(Protocol):  # the parts of relay.runtime.Runtime this module uses
    settings: Any
    allowlist: Any

    def github(self) -> Any: ...


# -- who gets a check ----------------------------------------------------------------
def device_of_label(label: str | None) -> str | None:
    if label and label.startswith(LABEL_PREFIX) and len(label) > len(LABEL_PREFIX):
        return label[len(LABEL_PREFIX):]
    return None


def wants_check(allowlist: Any, repo: str, labels: list[str] | None) -> bool:
    """L4: always; L3: when one of the repo's ``ciflow/crcr/<device>`` labels is on the PR."""
    level = allowlist.level_of(repo)
    if level == 4:
        return True
    if level != 3:
        return False
    target = allowlist.targets.get(repo)
    devices = set(getattr(target, "devices", ()) or ())
    return any(device_of_label(label) in devices for label in labels or [])


def current_labels(session: Session, job: Job) -> list[str]:
    """Labels of the PR as of its newest delivery (labels may arrive after the dispatch)."""
    if job.pr_number is None:
        return []
    newest = session.scalar(
        select(Delivery)
        .where(Delivery.pr_number == job.pr_number, Delivery.head_sha == job.head_sha)
        .order_by(Delivery.received_at.desc())
        .limit(1)
    )
    labels = list(newest.labels or []) if newest is not None else []
    if newest is not None and newest.action == "labeled" and newest.label:
        labels.append(newest.label)
    return labels


# -- what the check says ---------------------------------------------------------------
def check_name(repo: str, workflow: str | None, job_name: str | None) -> str:
    """``crcr/<owner>/<repo>/<workflow>/<job>`` with untrusted parts reduced to plain characters."""
    wf = _UNSAFE_NAME.sub("_", workflow or "workflow")[:100]
    jb = _UNSAFE_NAME.sub("_", job_name or "job")[:100]
    return f"crcr/{repo}/{wf}/{jb}"[:MAX_NAME_CHARS]


def _text(value: Any, limit: int = 300) -> str:
    """Untrusted text made inert in Markdown: no HTML, no @mentions, no code fences."""
    s = str(value)[:limit]
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = s.replace("@", "@\u200b").replace("`", "'").replace("\r", " ").replace("\n", " ")
    return s


def _https(url: str | None) -> str | None:
    if url and re.match(r"^https://[^\s()<>\"']+$", url) and len(url) <= 2000:
        return url
    return None


def conclusion_of(job: Job) -> str:
    c = (job.conclusion or "").lower()
    if c in CONCLUSIONS:
        return c
    return "failure" if (job.failed or 0) > 0 else "neutral"


def render(job: Job, *, results: ResultsUpload | None = None) -> CheckOutput:
    """Title and Markdown summary of one job; never longer than GitHub's 65,535 chars."""
    counts = job.passed is not None
    if job.state == COMPLETED:
        title = f"{conclusion_of(job)}: {job.passed or 0} passed, {job.failed or 0} failed, {job.skipped or 0} skipped" if counts \
            else conclusion_of(job)
    else:
        title = "running"
    lines = [
        f"**{_text(job.repo)}**: workflow `{_text(job.workflow_name or '?', 100)}`, job `{_text(job.job_name or '?', 100)}`,"
        f" run {_text(job.run_id, 40)} attempt {_text(job.run_attempt, 10)}",
        "",
        f"State: **{job.state}**" + (f", conclusion **{conclusion_of(job)}**" if job.state == COMPLETED else ""),
    ]
    if job.queue_time_s is not None or job.execution_time_s is not None:
        lines.append(f"Queue time: {job.queue_time_s if job.queue_time_s is not None else '?'} s;"
                     f" execution time: {job.execution_time_s if job.execution_time_s is not None else '?'} s")
    if counts:
        lines += ["", "| passed | failed | skipped |", "|---:|---:|---:|", f"| {job.passed} | {job.failed} | {job.skipped} |"]
    links = []
    if url := _https(job.url):
        links.append(f"- [Downstream run]({url})")
    if url := _https(job.artifact_url):
        links.append(f"- [Artifacts]({url})")
    if results is not None:
        counts = results.counts or {}
        stored = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if isinstance(n, int) and n)
        # no URL: the relay serves no results page (uploads may come from private repos)
        links.append(f"- Full per-test results stored on the relay as upload #{results.id} ({stored or 'no tests'})")
    if links:
        lines += ["", "### Links", *links]
    verdict = job.triage_verdict
    if verdict:
        lines += ["", "### Triage verdict (advisory)",
                  f"Category **{_text(verdict.get('category'), 20)}**, confidence **{_text(verdict.get('confidence'), 10)}**: "
                  f"{_text(verdict.get('summary', ''), 1000)}"]
        sus = verdict.get("suspected_upstream") or {}
        if sus.get("pr") or sus.get("commit"):
            lines.append(f"Suspected upstream: PR {_text(sus.get('pr') or '?', 20)}, commit {_text(sus.get('commit') or '?', 64)}"
                         + (f" ({_text(sus['reason'])})" if sus.get("reason") else ""))
    failed = job.failed_tests or []
    if failed:
        lines += ["", f"### Failed tests ({len(failed)})", "```text"]
        lines += [t.replace("`", "'").replace("\n", " ")[:300] for t in failed[:MAX_FAILED_LISTED]]
        lines.append("```")
        if len(failed) > MAX_FAILED_LISTED:
            lines.append(f"... and {len(failed) - MAX_FAILED_LISTED} more (see the full results)")
    summary = "\n".join(lines)
    if len(summary) > MAX_SUMMARY_CHARS:  # unreachable with the bounds above; kept as the contract's guard
        summary = summary[: MAX_SUMMARY_CHARS - 40] + "\n```\n... [summary truncated]"
    return CheckOutput(title=title, summary=summary)


# -- pushing to GitHub -------------------------------------------------------------------
def _latest_results(session: Session, job: Job) -> ResultsUpload | None:
    return session.scalar(select(ResultsUpload).where(ResultsUpload.job_id == job.id).order_by(ResultsUpload.id.desc()).limit(1))


def _external_id(job: Job) -> str:
    """``<run_id>:<pr>`` as CRCR writes it (the run id alone without a PR); re-runs read the run id back."""
    return f"{job.run_id}:{job.pr_number}" if job.pr_number else str(job.run_id)


def _claim(session: Session, row_id: int, lease: dt.timedelta) -> tuple[dt.datetime, dt.datetime] | None:
    """Claim the current version of an unsynced row for one push; ``(version, claim)`` or None.

    A conditional UPDATE, committed at once: no row lock is held while GitHub is called,
    and a second pusher (thread or process) finds the claim and leaves the row alone.
    """
    now = utcnow()
    until = now + lease
    version = session.scalar(select(CheckRun.updated_at).where(CheckRun.id == row_id, CheckRun.synced.is_(False)))
    if version is None:
        return None
    taken = session.execute(
        update(CheckRun)
        .where(CheckRun.id == row_id, CheckRun.synced.is_(False), CheckRun.updated_at == version,
               or_(CheckRun.push_claimed_until.is_(None), CheckRun.push_claimed_until < now))
        .values(push_claimed_until=until, updated_at=CheckRun.updated_at)
    ).rowcount == 1
    session.commit()
    return (version, until) if taken else None


def push(session: Session, row: CheckRun, runtime: _Runtime, *, claim: dt.datetime | None = None) -> bool:
    """Send ``row``'s desired state to GitHub. True when GitHub took it.

    ``updated_at`` is the row's version: ``plan_check`` bumps it whenever the job moves.
    The outcome is written only if the version is still the one read here (and, with
    ``claim``, only while that claim is ours), so a push of an older state that finishes
    late never marks a newer plan as synced. A created check's id is kept either way.

    As CRCR does, every push creates a new check run (GitHub shows the newest of a name
    on a commit) with ``external_id`` ``<run_id>:<pr>``; with a ``crcr:`` allowlist
    section crcr updates its one check run per job in place instead.
    """
    job = row.job
    seen = row.updated_at
    output = render(job, results=_latest_results(session, job))
    status = "completed" if job.state == COMPLETED else ("in_progress" if job.state == IN_PROGRESS else "queued")
    conclusion = conclusion_of(job) if status == "completed" else None
    in_place = bool(getattr(runtime.allowlist.get(), "extensions", False))
    # crcr mode: a button on finished, unsuccessful checks (GitHub's own "Re-run" stays available too)
    actions = [RERUN_BUTTON] if in_place and conclusion in ("failure", "timed_out", "cancelled",
                                                            "action_required") else []
    same_version = (CheckRun.id == row.id) & (CheckRun.updated_at == seen)
    if claim is not None:
        same_version = same_version & (CheckRun.push_claimed_until == claim)
    row_id, repo, name, head_sha, github_id = row.id, row.upstream_repo, row.name, row.head_sha, row.github_id
    external_id, details_url, delivery_id = _external_id(job), _https(job.url), job.delivery_id
    session.commit()  # end the read transaction: nothing is held while GitHub answers
    error: str | None = None
    try:
        gh = runtime.github().client_for_repo(repo)
        if github_id is None or not in_place:
            new_id = create_check_run(
                gh, repo, name=name, head_sha=head_sha, status=status, external_id=external_id,
                details_url=details_url, output=output, conclusion=conclusion, actions=actions,
            )
            keep = CheckRun.github_id.is_(None) if in_place else true()
            session.execute(update(CheckRun).where(CheckRun.id == row_id, keep)
                            .values(github_id=new_id, updated_at=CheckRun.updated_at))
        else:
            update_check_run(gh, repo, github_id, status=status, output=output,
                             details_url=details_url, conclusion=conclusion, actions=actions)
    except CheckRunError as exc:
        error = exc.message
    except Exception as exc:  # auth/config problems: recorded, retried later, never a 5xx
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    if error is not None:
        log.warning("[e: %s] check run %s not pushed: %s", delivery_id, name, error)
        session.execute(update(CheckRun).where(same_version).values(last_error=error, updated_at=seen))
    else:
        session.execute(update(CheckRun).where(same_version).values(
            synced=True, last_error=None, status=status, conclusion=conclusion, updated_at=seen))
    if claim is not None:  # let go of the claim whatever happened (a newer version may be waiting)
        session.execute(update(CheckRun).where(CheckRun.id == row_id, CheckRun.push_claimed_until == claim)
                        .values(push_claimed_until=None, updated_at=CheckRun.updated_at))
    session.commit()
    session.refresh(row)
    return error is None


def _push_lease(runtime: Any) -> dt.timedelta:
    # token lookup + mint + the check-run call, each bounded by the HTTP timeout
    return dt.timedelta(seconds=float(getattr(runtime.settings, "dispatch_timeout_s", 10)) * 3 + 2)


def push_claimed(session: Session, runtime: Any, row_id: int) -> bool | None:
    """Claim ``row_id``'s current version, push it, write the outcome; None when not ours to push."""
    claimed = _claim(session, row_id, _push_lease(runtime))
    if claimed is None:
        return None
    row = session.get(CheckRun, row_id, populate_existing=True)
    if row is None:
        return None
    return push(session, row, runtime, claim=claimed[1])


def plan_check(session: Session, job: Job, runtime: _Runtime, *, force: bool = False) -> CheckRun | None:
    """The check row of ``job``, created when the job qualifies and marked for a push.

    Cheap for jobs that never get a check (L1/L2, no PR): no query beyond the allowlist.
    """
    if job.pr_number is None or not job.head_sha:
        return None  # self-scheduled and push runs have no PR to put a check on
    allowlist = runtime.allowlist.get()
    level = allowlist.level_of(job.repo)
    if level not in (3, 4) and not force:
        return None
    row = session.scalar(select(CheckRun).where(CheckRun.job_id == job.id))
    if row is None:
        if not force and not wants_check(allowlist, job.repo, current_labels(session, job) if level == 3 else []):
            return None
        row = CheckRun(job=job, upstream_repo=runtime.settings.upstream_repo,
                       name=check_name(job.repo, job.workflow_name, job.job_name),
                       head_sha=job.head_sha, status="in_progress")
        session.add(row)
    # the job changed: GitHub must hear about it; the new version outdates any push in flight
    row.synced, row.updated_at = False, utcnow()
    session.flush()
    return row


def ensure_check(session: Session, job: Job, runtime: _Runtime, *, force: bool = False) -> CheckRun | None:
    """``plan_check``, commit, then push at once (claimed like any push)."""
    row = plan_check(session, job, runtime, force=force)
    session.commit()
    if row is not None:
        push_claimed(session, runtime, row.id)
    return row


MAX_CATCH_UP = 5  # versions one push_planned call follows while callbacks keep arriving


def push_planned(runtime: Any, row_id: int) -> bool:
    """Push one planned row in its own session (run after the callback was answered).

    The row is claimed by version (``_claim``), GitHub is called with no transaction
    open, and the outcome is written only for that version and claim. Two quick
    callbacks of a job never both push the same version; a version planned while a push
    was under way is pushed next, here. When GitHub took it, a few rows it refused
    earlier are retried too: an outage heals with the next callbacks even where no
    periodic ``sync_pending`` runs.
    """
    try:
        ok: bool | None = None
        with runtime.sessions() as session:
            for _ in range(MAX_CATCH_UP):
                result = push_claimed(session, runtime, row_id)
                if result is None:
                    break
                ok = result
                if not result:
                    break
        if ok:
            with runtime.sessions() as session:
                sync_pending(session, runtime, limit=RETRY_ON_SUCCESS)
        return bool(ok)
    except Exception:  # storage trouble after the answer was sent: the row stays unsynced
        log.exception("check run %s not pushed", row_id)
        return False


def sync_pending(session: Session, runtime: _Runtime, *, limit: int = 100, min_age_s: float = 0.0) -> int:
    """Retry check rows GitHub did not take; returns how many went through (commits per row).

    A row whose push is under way elsewhere (claimed) is skipped, so a retry never
    duplicates a push. ``min_age_s`` leaves alone rows planned that recently (their own
    push, maybe in another process, is due).
    """
    query = select(CheckRun.id).where(CheckRun.synced.is_(False))
    if min_age_s > 0:
        query = query.where(CheckRun.updated_at < utcnow() - dt.timedelta(seconds=min_age_s))
    ids = session.scalars(query.order_by(CheckRun.id).limit(limit)).all()
    session.commit()
    return sum(1 for row_id in ids if push_claimed(session, runtime, row_id))


def sweep(runtime: Any, *, min_age_s: float = 60.0, limit: int = 100) -> int:
    """Periodic safety net (call it from the sweeper): push rows left unsynced for a while."""
    try:
        with runtime.sessions() as session:
            return sync_pending(session, runtime, limit=limit, min_age_s=min_age_s)
    except Exception:  # storage or GitHub trouble: the next period tries again
        log.warning("check-run sweep failed", exc_info=True)
        return 0


def on_device_label(session: Session, delivery: Delivery, runtime: _Runtime) -> list[CheckRun]:
    """A ``ciflow/crcr/<device>`` label was added: checks for that device's L3 jobs on this PR head.

    Intake calls this before answering GitHub's webhook (which must be answered within
    10 s), so the rows are planned and committed here and pushed from a background
    thread; a push lost with the process is retried like any unsynced row.
    """
    device = device_of_label(delivery.label)
    if device is None or delivery.pr_number is None:
        return []
    allowlist = runtime.allowlist.get()
    repos = {r.lower() for r in allowlist.devices().get(device, [])}
    if not repos:
        return []
    jobs = session.scalars(
        select(Job).where(Job.pr_number == delivery.pr_number, Job.head_sha == delivery.head_sha).order_by(Job.id)
    ).all()
    out = []
    for job in jobs:
        if job.repo.lower() in repos and allowlist.level_of(job.repo) == 3:
            row = plan_check(session, job, runtime, force=True)
            if row is not None:
                out.append(row)
    session.commit()
    if out:
        push_in_background(runtime, [row.id for row in out])
    return out


_background: list[threading.Thread] = []


def push_in_background(runtime: Any, row_ids: list[int]) -> threading.Thread:
    """Push planned rows from a daemon thread (see ``wait_for_background``)."""

    def run() -> None:
        for row_id in row_ids:
            push_planned(runtime, row_id)

    return _in_background(run)


def _in_background(fn: Any) -> threading.Thread:
    """Run ``fn`` on a daemon thread that ``wait_for_background`` joins; its errors are logged."""

    def run() -> None:
        try:
            fn()
        except Exception:
            log.exception("background check-run work failed")

    thread = threading.Thread(target=run, name="crcr-check-push", daemon=True)
    _background[:] = [t for t in _background if t.is_alive()] + [thread]
    thread.start()
    return thread


def wait_for_background(timeout_s: float = 30.0) -> bool:
    """Join background pushes (tests, graceful shutdown); True when none is left running."""
    for thread in list(_background):
        thread.join(timeout_s)
    return not any(t.is_alive() for t in _background)


# -- re-runs -------------------------------------------------------------------------------
def _root_delivery_id(delivery_id: str) -> str:
    return delivery_id.split("/rerun/", 1)[0]


RERUN_ID_TRIES = 8  # concurrent re-runs of one delivery race for the next number; each loser takes the next


def rerun_for_check(session: Session, delivery: Delivery, runtime: _Runtime | None = None) -> Dispatch | None:
    """``check_run`` rerequested/requested_action on one of crcr's checks: dispatch that backend again.

    Creates delivery ``<original id>/rerun/<n>`` (n counts up per original) carrying the
    original upstream payload, and one pending dispatch to the job's repo, built as
    intake builds rows (``relay.rows``) after routing the original event through today's
    allowlist: a target the event would not reach now (removed, filtered, or held back
    for an untrusted author) gets no re-run. Two concurrent re-runs get distinct numbers
    (a taken id is retried with the next). Returns the dispatch (the caller commits and
    wakes a worker), or None when the check is not crcr's, the original payload was
    pruned, or routing leaves the repo out.
    """
    try:
        payload = json.loads(delivery.payload or "{}")
    except ValueError:
        return None
    if delivery.action == "requested_action":
        requested = payload.get("requested_action") if isinstance(payload, dict) else None
        if not isinstance(requested, dict) or requested.get("identifier") != RERUN_ACTION:
            return None
    check = payload.get("check_run") if isinstance(payload, dict) else None
    check_id = check.get("id") if isinstance(check, dict) else None
    if not isinstance(check_id, int) or isinstance(check_id, bool):
        return None
    row = session.scalar(select(CheckRun).where(CheckRun.github_id == check_id))
    if row is None:
        return None
    job = row.job
    root = _root_delivery_id(job.delivery_id)
    original = session.get(Delivery, root)
    if original is None or original.payload is None:
        log.warning("[e: %s] cannot re-run %s: the original delivery or its payload is gone", root, row.name)
        return None
    if runtime is None:
        log.warning("[e: %s] cannot re-run %s without the relay's allowlist", root, row.name)
        return None
    try:
        original_payload = json.loads(original.payload)
    except ValueError:
        return None
    if not isinstance(original_payload, dict):
        return None
    info = describe(original.event, original_payload)
    routed = route(info, runtime.allowlist.get(), upstream_repo=runtime.settings.upstream_repo)
    targets = [t for t in routed.targets if t.repo.lower() == job.repo.lower()]
    if not targets:
        why = routed.ignored_reason or (f"not sent to {job.repo}: untrusted author" if routed.skipped
                                        else f"{job.repo} no longer receives this event")
        log.info("[e: %s] re-run of %s refused: %s", root, job.repo, why)
        return None
    taken = session.scalar(select(func.count(Delivery.id)).where(Delivery.id.like(f"{root}/rerun/%"))) or 0
    clock = getattr(runtime, "clock", None)
    now = clock() if callable(clock) else utcnow()  # the relay's clock, as intake stamps rows
    for n in range(taken + 1, taken + 1 + RERUN_ID_TRIES):
        new_id = f"{root}/rerun/{n}"
        drow = delivery_row(new_id, original.event, info, payload=original.payload,
                            payload_bytes=original.payload_bytes, now=now, targets=targets, reason=None,
                            sender=delivery.sender)
        try:
            with session.begin_nested():
                session.execute(insert(Delivery), drow)
                session.execute(insert(Dispatch), dispatch_rows(new_id, original.event, targets, now))
        except IntegrityError:  # another re-run took this number first: try the next
            continue
        dispatch = session.scalar(select(Dispatch).where(Dispatch.delivery_id == new_id))
        log.info("[e: %s] re-run of %s requested through check run %s", new_id, job.repo, check_id)
        return dispatch
    log.warning("[e: %s] re-run of %s not created: %d ids in a row were taken", root, job.repo, RERUN_ID_TRIES)
    return None


def downstream_of_check(name: str) -> str | None:
    """``owner/repo`` of a check named ``crcr/<owner>/<repo>/<workflow>/<job>``; None for other checks."""
    if not isinstance(name, str) or not name.startswith("crcr/"):
        return None
    parts = name[len("crcr/"):].split("/")
    if len(parts) < 3 or not parts[0] or not parts[1]:
        return None
    return f"{parts[0]}/{parts[1]}"


def _run_id_of(check: Any) -> int | None:
    raw = str((check or {}).get("external_id") or "").split(":")[0] if isinstance(check, dict) else ""
    return int(raw) if raw.isdigit() and len(raw) < 20 else None


def rerun_upstream_style(runtime: Any, event: str, payload: dict[str, Any]) -> list[str]:
    """CRCR's re-run: the downstream run itself is re-run through the Actions API.

    ``check_run`` rerequested: that run's failed jobs; ``check_suite`` rerequested: every
    distinct (repo, run) of the suite's crcr checks, all jobs. Only L3+ repos. Returns the
    repos re-run; a failure is logged (as CRCR, nothing else is retried).
    """
    from crcr.github.actions import already_running, rerun_failed_jobs, rerun_run, suite_check_runs

    allowlist = runtime.allowlist.get()
    app = runtime.github()
    if event == "check_run":
        check = payload.get("check_run")
        runs = [(downstream_of_check((check or {}).get("name", "")), _run_id_of(check))]
        rerun, what = rerun_failed_jobs, "failed jobs"
    else:
        suite = payload.get("check_suite")
        suite_id = suite.get("id") if isinstance(suite, dict) else None
        if not isinstance(suite_id, int) or isinstance(suite_id, bool):
            return []
        upstream = runtime.settings.upstream_repo
        listed = suite_check_runs(app.client_for_repo(upstream), upstream, suite_id)
        runs = list(dict.fromkeys((downstream_of_check(c.get("name", "")), _run_id_of(c)) for c in listed))
        rerun, what = rerun_run, "all jobs"
    done: list[str] = []
    for repo, run_id in runs:
        if repo is None or run_id is None:
            continue
        target = next((t for t in allowlist.targets if t.lower() == repo.lower()), None)
        if target is None or (allowlist.level_of(target) or 0) < 3:
            log.info("re-run of %s run %s ignored: not an L3+ repository", repo, run_id)
            continue
        try:
            rerun(app.client_for_repo(target), target, run_id)
            done.append(target)
            log.info("%s rerequested: re-ran %s of %s run %s", event, what, target, run_id)
        except CheckRunError as exc:
            if already_running(exc):
                log.info("%s rerequested: %s run %s is already running", event, target, run_id)
                continue
            log.warning("%s rerequested: re-run of %s run %s failed: %s", event, target, run_id, exc.message)
    return done


def on_check_run(session: Session, delivery: Delivery, runtime: _Runtime) -> Dispatch | None:
    """Intake's hook for ``check_run`` / ``check_suite`` events: a re-run was requested.

    Without a ``crcr:`` allowlist section (or with ``crcr: {rerun: upstream}``) it does
    what CRCR does (``rerun_upstream_style``, from a background thread: intake answers
    GitHub first). With ``crcr:`` (``rerun: dispatch``, the default there) it dispatches
    the upstream event again as a new delivery; it commits itself so the new dispatch is
    visible before a worker is woken for it.
    """
    if delivery is None or delivery.action not in ("rerequested", "requested_action"):
        return None
    if (delivery.repo or "").lower() != runtime.settings.upstream_repo.lower():
        return None  # as CRCR: only the upstream repository's checks (the App may see others')
    if getattr(runtime.allowlist.get(), "rerun", "upstream") == "upstream":
        try:
            payload = json.loads(delivery.payload or "{}")
        except ValueError:
            return None
        if isinstance(payload, dict):
            _in_background(lambda: rerun_upstream_style(runtime, delivery.event, payload))
        return None
    if delivery.event != "check_run":
        return None
    dispatch = rerun_for_check(session, delivery, runtime)
    if dispatch is None:
        return None
    session.commit()
    tasks = getattr(runtime, "tasks", None)
    if tasks is not None:
        tasks.enqueue([dispatch.id])
    return dispatch
