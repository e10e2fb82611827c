"""Check runs on the upstream PR for downstream jobs (L3 with its device label, all L4).

Named ``crcr/<owner>/<repo>/<workflow>/<job>``, ``external_id`` = the downstream run
id, created in progress and completed with a summary (counts, failed tests, links,
verdict). The ``check_runs`` row is the desired state, committed with the callback;
pushing it to GitHub happens after the callback is answered (so a slow GitHub never
slows a downstream job), and a row GitHub refused stays ``synced = False`` until the
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

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from crcr.fileio import atomic_write_text
from crcr.github.checks import (
    CONCLUSIONS,
    MAX_SUMMARY_CHARS,
    CheckOutput,
    CheckRunError,
    create_check_run,
    update_check_run,
)
from crcr.store.deliveries import PENDING, Delivery, Dispatch
from crcr.store.jobs import COMPLETED, IN_PROGRESS, CheckRun, Job, ResultsUpload, utcnow

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


def push(session: Session, row: CheckRun, runtime: _Runtime) -> bool:
    """Send ``row``'s desired state to GitHub (create or update). True when GitHub took it.

    ``updated_at`` is the row's version: ``plan_check`` bumps it whenever the job moves.
    The outcome is written only if the version is still the one read here, so a push of
    an older state that finishes late never marks a newer plan as synced (the newer
    plan's own push follows). A created check's id is kept either way.
    """
    job = row.job
    seen = row.updated_at
    output = render(job, results=_latest_results(session, job))
    status = "completed" if job.state == COMPLETED else ("in_progress" if job.state == IN_PROGRESS else "queued")
    conclusion = conclusion_of(job) if status == "completed" else None
    # a button on finished, unsuccessful checks (GitHub's own "Re-run" stays available too)
    actions = [RERUN_BUTTON] if conclusion in ("failure", "timed_out", "cancelled", "action_required") else []
    same_version = (CheckRun.id == row.id) & (CheckRun.updated_at == seen)
    error: str | None = None
    try:
        if getattr(runtime.settings, "check_sink", "github") == "local":
            _write_local(runtime, row, status=status, conclusion=conclusion, output=output, actions=actions)
            if row.github_id is None:
                session.execute(update(CheckRun).where(CheckRun.id == row.id, CheckRun.github_id.is_(None))
                                .values(github_id=row.id, updated_at=CheckRun.updated_at))
        elif row.github_id is None:
            gh = runtime.github().client_for_repo(row.upstream_repo)
            new_id = create_check_run(
                gh, row.upstream_repo, name=row.name, head_sha=row.head_sha, status=status,
                external_id=job.run_id, details_url=_https(job.url), output=output, conclusion=conclusion,
                actions=actions,
            )
            session.execute(update(CheckRun).where(CheckRun.id == row.id, CheckRun.github_id.is_(None))
                            .values(github_id=new_id, updated_at=CheckRun.updated_at))
        else:
            gh = runtime.github().client_for_repo(row.upstream_repo)
            update_check_run(gh, row.upstream_repo, row.github_id, status=status, output=output,
                             details_url=_https(job.url), conclusion=conclusion, actions=actions)
    except CheckRunError as exc:
        error = exc.message
    except Exception as exc:  # auth/config problems: recorded, retried later, never a 5xx
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    if error is not None:
        log.warning("[e: %s] check run %s not pushed: %s", job.delivery_id, row.name, error)
        session.execute(update(CheckRun).where(same_version).values(last_error=error, updated_at=seen))
    else:
        session.execute(update(CheckRun).where(same_version).values(
            synced=True, last_error=None, status=status, conclusion=conclusion, updated_at=seen))
    session.refresh(row)
    return error is None


def _write_local(runtime: Any, row: CheckRun, *, status: str, conclusion: str | None, output: CheckOutput,
                 actions: list[dict[str, str]]) -> None:
    """The local check sink (``CRCR_CHECK_SINK=local``): the check run GitHub would get, as a JSON file."""
    record = {"id": row.id, "name": row.name, "repository": row.upstream_repo, "head_sha": row.head_sha,
              "status": status, "conclusion": conclusion, "external_id": row.job.run_id,
              "output": {"title": output.title, "summary": output.summary},
              "actions": actions, "job_id": row.job_id, "written_at": utcnow().isoformat()}
    atomic_write_text(local_check_path(runtime.settings.data_dir, row.id),
                      json.dumps(record, indent=1, sort_keys=True) + "\n")


def local_check_path(data_dir: Any, row_id: int) -> Any:
    return data_dir / "checks" / f"check-run-{int(row_id)}.json"


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
    """``plan_check`` then push at once (the caller commits)."""
    row = plan_check(session, job, runtime, force=force)
    if row is not None:
        push(session, row, runtime)
    return row


_row_locks: dict[int, threading.Lock] = {}
_row_locks_guard = threading.Lock()


def _lock_for(row_id: int) -> threading.Lock:
    """One lock per check row in this process: pushes of a row never overlap."""
    with _row_locks_guard:
        if len(_row_locks) > 10_000:  # rows are short-lived; drop idle locks wholesale
            for key in [k for k, lk in _row_locks.items() if not lk.locked()]:
                del _row_locks[key]
        return _row_locks.setdefault(row_id, threading.Lock())


def push_planned(runtime: Any, row_id: int) -> bool:
    """Push one planned row in its own session (run after the callback was answered).

    Pushes of one row are serialised (a per-process lock, and ``FOR UPDATE`` where the
    database has it) so two quick callbacks of a job cannot both create a check run.
    When GitHub took it, a few rows it refused earlier are retried too: an outage heals
    with the next callbacks even where no periodic ``sync_pending`` runs.
    """
    try:
        with _lock_for(row_id), runtime.sessions() as session:
            row = session.get(CheckRun, row_id, with_for_update=True, populate_existing=True)
            if row is None or row.synced:
                return row is not None
            ok = push(session, row, runtime)
            session.commit()
        if ok:
            with runtime.sessions() as session:
                sync_pending(session, runtime, limit=RETRY_ON_SUCCESS)
        return ok
    except Exception:  # storage trouble after the answer was sent: the row stays unsynced
        log.exception("check run %s not pushed", row_id)
        return False


def sync_pending(session: Session, runtime: _Runtime, *, limit: int = 100, min_age_s: float = 0.0) -> int:
    """Retry check rows GitHub did not take; returns how many went through (commits per row).

    A row whose push is under way elsewhere in this process is skipped, and each row is
    re-read under its lock, so a retry never duplicates a create. ``min_age_s`` leaves
    alone rows planned that recently (their own push, maybe in another process, is due).
    """
    query = select(CheckRun.id).where(CheckRun.synced.is_(False))
    if min_age_s > 0:
        query = query.where(CheckRun.updated_at < utcnow() - dt.timedelta(seconds=min_age_s))
    ids = session.scalars(query.order_by(CheckRun.id).limit(limit)).all()
    done = 0
    for row_id in ids:
        lock = _lock_for(row_id)
        if not lock.acquire(blocking=False):
            continue
        try:
            row = session.get(CheckRun, row_id, with_for_update=True, populate_existing=True)
            if row is not None and not row.synced and push(session, row, runtime):
                done += 1
            session.commit()
        finally:
            lock.release()
    return done


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


def rerun_for_check(session: Session, delivery: Delivery, runtime: _Runtime | None = None) -> Dispatch | None:
    """``check_run`` rerequested/requested_action on one of crcr's checks: dispatch that backend again.

    Creates delivery ``<original id>/rerun/<n>`` (n counts up per original) carrying the
    original upstream payload, and one pending dispatch to the job's repo. Returns the
    dispatch (the caller commits and wakes a worker), or None when the check is not crcr's
    or the original payload was pruned.
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
    prior = session.scalar(
        select(Dispatch).where(Dispatch.delivery_id == root, Dispatch.target == job.repo)
    )
    count = session.scalar(select(func.count(Delivery.id)).where(Delivery.id.like(f"{root}/rerun/%"))) or 0
    new_id = f"{root}/rerun/{count + 1}"
    session.add(Delivery(
        id=new_id, event=original.event, action=original.action, repo=original.repo,
        pr_number=original.pr_number, head_sha=original.head_sha, ref=original.ref,
        labels=list(original.labels or []), label=original.label, sender=delivery.sender,
        author_association=original.author_association, payload=original.payload,
        payload_bytes=original.payload_bytes,
    ))
    dispatch = Dispatch(
        delivery_id=new_id, target=job.repo,
        kind=prior.kind if prior is not None else "github",
        level=prior.level if prior is not None else (runtime.allowlist.get().level_of(job.repo) if runtime else 1) or 1,
        event_type=prior.event_type if prior is not None else original.event,
        state=PENDING,
    )
    session.add(dispatch)
    session.flush()
    log.info("[e: %s] re-run of %s requested through check run %s", new_id, job.repo, check_id)
    return dispatch


def on_check_run(session: Session, delivery: Delivery, runtime: _Runtime) -> Dispatch | None:
    """Intake's hook for ``check_run`` events: re-dispatch on ``rerequested`` / ``requested_action``.

    Commits itself so the new dispatch is visible before a worker is woken for it.
    """
    if delivery is None or delivery.action not in ("rerequested", "requested_action"):
        return None
    dispatch = rerun_for_check(session, delivery, runtime)
    if dispatch is None:
        return None
    session.commit()
    tasks = getattr(runtime, "tasks", None)
    if tasks is not None:
        tasks.enqueue([dispatch.id])
    return dispatch
