"""On-call pings: when an L3/L4 backend's check on a PR fails, one marked comment on the
PR mentions that repo's on-calls from the allowlist; later failures edit it in place.

The comment lists every crcr check failing on the PR's newest failing head SHA, each
with its on-calls, so one comment per PR stays the whole picture.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from sqlalchemy import select

from crcr.store.jobs import COMPLETED, CheckRun, Job
from relay import checks
from relay.replies import upsert_comment

log = logging.getLogger("crcr.relay.oncall")

PING_CONCLUSIONS = ("failure", "timed_out")
HANDLE_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:/[A-Za-z0-9._-]{1,100})?$")  # user or org/team


def push_and_ping(runtime: Any, row_id: int) -> None:
    """After a callback: push the check run, then ping on-calls if it failed (never raises)."""
    checks.push_planned(runtime, row_id)
    try:
        ping_for_check(runtime, row_id)
    except Exception:
        log.exception("on-call ping for check row %s failed", row_id)


def ping_for_check(runtime: Any, row_id: int) -> int | None:
    """Write or update the PR's on-call comment if ``row_id``'s job failed; returns the comment id.

    With ``CRCR_CHECK_SINK=local`` (crcr demo, a relay without a GitHub App) check runs
    go to files and there is no PR to comment on: pings are skipped (a DEBUG line).
    """
    if getattr(runtime.settings, "check_sink", "github") == "local":
        log.debug("check sink is local: no on-call ping for check row %s", row_id)
        return None
    allow = runtime.allowlist.get()
    with runtime.sessions() as s:
        row = s.get(CheckRun, row_id)
        if row is None:
            return None
        job = row.job
        if job.state != COMPLETED or checks.conclusion_of(job) not in PING_CONCLUSIONS or job.pr_number is None:
            return None
        if allow.level_of(job.repo) not in (3, 4):
            return None
        pr, head = job.pr_number, job.head_sha
        failing = s.execute(select(Job, CheckRun).join(CheckRun, CheckRun.job_id == Job.id)
                            .where(Job.pr_number == pr, Job.head_sha == head, Job.state == COMPLETED)
                            .order_by(Job.repo, Job.id)).all()
        lines: dict[str, list[str]] = {}
        for j, c in failing:
            if checks.conclusion_of(j) in PING_CONCLUSIONS and allow.level_of(j.repo) in (3, 4):
                link = checks._https(j.url)
                lines.setdefault(j.repo, []).append(f"[{c.name}]({link})" if link else c.name)
    if not any(allow.oncalls(r) for r in lines):
        return None
    body = [f"crcr: backend checks failed on head {head[:12]}. On-calls, please take a look:", ""]
    for repo, names in lines.items():
        handles = " ".join(f"@{h}" for h in allow.oncalls(repo) if HANDLE_RE.match(h)) or "(no on-call listed)"
        body.append(f"- **{repo}** (L{allow.level_of(repo)}): {', '.join(names[:10])}; on-call: {handles}")
    gh = runtime.github().client_for_repo(runtime.settings.upstream_repo)
    return upsert_comment(runtime, gh, pr, "oncall", "\n".join(body))
