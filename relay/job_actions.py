"""What ``/ci retry``, ``/ci cancel`` and ``/ci status`` do to a PR's jobs.

``retry_failed`` goes through ``relay.checks.on_check_run``, the hook a check run's
re-run button reaches through intake (one path, not two): for each backend whose newest jobs on
the head SHA include a failed one, the failed job's crcr check run is "re-requested"
on the commenter's behalf. ``cancel`` marks open jobs cancelled (their checks say so),
cancels open and held dispatches, and cancels the known downstream runs through the
Actions API. ``status_table`` is each backend's latest job for the head SHA.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update

from crcr.github.comments import GitHubCallError, cancel_run
from crcr.store.deliveries import AWAITING, CANCELLED, OPEN_STATES, Delivery, Dispatch
from crcr.store.jobs import COMPLETED, CheckRun, Job
from relay import checks
from relay.replies import inert

log = logging.getLogger("crcr.relay.commands")

FAILED = ("failure", "timed_out", "cancelled", "action_required")


def _newest_per_repo(jobs: list[Job]) -> dict[str, list[Job]]:
    """Each repo's jobs of its newest delivery (a re-run's jobs replace the original's)."""
    newest: dict[str, str] = {}
    for j in sorted(jobs, key=lambda j: j.id, reverse=True):
        newest.setdefault(j.repo, j.delivery_id)
    out: dict[str, list[Job]] = {}
    for j in jobs:
        if newest[j.repo] == j.delivery_id:
            out.setdefault(j.repo, []).append(j)
    return out


def retry_failed(runtime: Any, pr: int, head: str, targets: set[str] | None, login: str,
                 comment_id: int) -> tuple[list[str], list[str], list[str]]:
    """Re-run backends with a failed job on ``head``; returns (re-run, failed without a check,
    refused by the re-run path: routing no longer sends the event there)."""
    done: list[str] = []
    without_check: list[str] = []
    not_rerun: list[str] = []
    upstream = runtime.settings.upstream_repo
    upstream_style = getattr(runtime.allowlist.get(), "rerun", "dispatch") == "upstream"
    # no runtime.write_lock here: on_check_run commits and enqueues, and an immediate queue
    # sends (and takes that lock) inside the call
    with runtime.sessions() as s:
        jobs = list(s.scalars(select(Job).where(Job.pr_number == pr, Job.head_sha == head)))
        for repo, group in sorted(_newest_per_repo(jobs).items()):
            if targets is not None and repo not in targets:
                continue
            failed = [j for j in group if j.state == COMPLETED and checks.conclusion_of(j) in FAILED]
            if not failed:
                continue
            row = s.scalar(select(CheckRun).where(CheckRun.job_id.in_([j.id for j in failed]),
                                                  CheckRun.github_id.is_not(None)).limit(1))
            if row is None:
                without_check.append(repo)
                continue
            # the same request GitHub sends when someone presses the check's re-run button, handed
            # to the same hook intake calls for it (crcr's new dispatch, or CRCR's Actions re-run)
            request = Delivery(
                id=f"comment-{comment_id}", event="check_run", action="rerequested", repo=upstream, pr_number=pr,
                head_sha=head, labels=[], sender=login, payload_bytes=0,
                payload=json.dumps({"action": "rerequested", "check_run": {
                    "id": row.github_id, "name": row.name, "head_sha": head,
                    "external_id": f"{row.job.run_id}:{pr}", "pull_requests": [{"number": pr}]},
                    "repository": {"full_name": upstream}, "sender": {"login": login}}))
            dispatch = checks.on_check_run(s, request, runtime)  # commits and enqueues itself
            if dispatch is None and upstream_style:
                done.append(repo)  # CRCR's way: the downstream run is re-run in the background
            elif dispatch is None:
                not_rerun.append(repo)
            else:
                done.append(repo)
    return done, without_check, not_rerun


@dataclass
class CancelSummary:
    jobs: int = 0
    dispatches: int = 0
    runs_cancelled: list[str] = field(default_factory=list)
    runs_finished: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"{self.jobs} open job(s) marked cancelled", f"{self.dispatches} dispatch(es) not yet sent cancelled",
                 f"downstream runs cancelled: {', '.join(self.runs_cancelled) or 'none'}"]
        if self.runs_finished:
            parts.append(f"already finished: {', '.join(self.runs_finished)}")
        if self.errors:
            parts.append(f"could not cancel: {'; '.join(self.errors)}")
        return "; ".join(parts) + "."


def cancel(runtime: Any, gh: Any, pr: int, targets: set[str] | None, login: str) -> CancelSummary:
    """Cancel the PR's open jobs, unsent dispatches and known downstream runs."""
    out = CancelSummary()
    upstream = runtime.settings.upstream_repo
    now = runtime.clock()
    runs: list[tuple[str, str]] = []
    check_rows: list[int] = []
    with runtime.write_lock, runtime.sessions() as s:
        q = select(Job).where(Job.pr_number == pr, Job.state != COMPLETED)
        for job in s.scalars(q):
            if targets is not None and job.repo not in targets:
                continue
            job.state, job.conclusion, job.completed_at = COMPLETED, "cancelled", now
            out.jobs += 1
            if re.fullmatch(r"\d{1,20}", job.run_id or ""):
                runs.append((job.repo, job.run_id))
            row = checks.plan_check(s, job, runtime)
            if row is not None:
                check_rows.append(row.id)
        delivered = select(Delivery.id).where(Delivery.pr_number == pr, func.lower(Delivery.repo) == upstream.lower())
        stmt = update(Dispatch).where(Dispatch.delivery_id.in_(delivered),
                                      Dispatch.state.in_((*OPEN_STATES, AWAITING)))
        if targets is not None:
            stmt = stmt.where(Dispatch.target.in_(sorted(targets)))
        out.dispatches = s.execute(stmt.values(state=CANCELLED, updated_at=now, claimed_until=None,
                                               last_error=f"cancelled by /ci cancel from {login[:100]}")).rowcount
        s.commit()
    for repo, run_id in dict.fromkeys(runs):
        try:
            client = runtime.github().client_for_repo(repo)
            (out.runs_cancelled if cancel_run(client, repo, int(run_id)) else out.runs_finished).append(f"{repo}#{run_id}")
        except GitHubCallError as exc:
            out.errors.append(f"{repo}#{run_id}: {exc.message}")
        except Exception as exc:  # no installation on that repo, no App configured
            out.errors.append(f"{repo}#{run_id}: {type(exc).__name__}")
    if check_rows:
        checks.push_in_background(runtime, check_rows)
    return out


def _age(ts: dt.datetime | None) -> str:
    return ts.strftime("%Y-%m-%d %H:%M UTC") if ts else ""


def status_table(runtime: Any, pr: int, head: str) -> str:
    """Markdown: each allowlisted backend's latest job (or dispatch) for the head SHA."""
    allow = runtime.allowlist.get()
    upstream = runtime.settings.upstream_repo
    with runtime.sessions() as s:
        jobs = list(s.scalars(select(Job).where(Job.pr_number == pr, Job.head_sha == head).order_by(Job.id.desc())))
        rows = list(s.execute(select(Dispatch.target, Dispatch.state).join(Delivery, Dispatch.delivery_id == Delivery.id)
                              .where(Delivery.pr_number == pr, Delivery.head_sha == head,
                                     func.lower(Delivery.repo) == upstream.lower())
                              .order_by(Dispatch.id.desc())).all())
    lines = [f"Status for head {head[:12]}:", "", "| backend | level | job | state | result |", "|---|---|---|---|---|"]
    for t in allow:
        job = next((j for j in jobs if j.repo == t.repo), None)
        if job is not None:
            link = checks._https(job.url)
            name = inert(f"{job.workflow_name or '?'}/{job.job_name}", 80)
            result = checks.conclusion_of(job) if job.state == COMPLETED else ""
            lines.append(f"| {t.repo} | L{t.level} | {f'[{name}]({link})' if link else name} | {job.state} | {result} |")
            continue
        state = next((st for target, st in rows if target == t.repo), None)
        shown = {"awaiting": "awaiting approval", None: "not dispatched"}.get(state, f"dispatch {state}")
        lines.append(f"| {t.repo} | L{t.level} |  | {shown} |  |")
    return "\n".join(lines)
