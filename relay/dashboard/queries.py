"""What the dashboard shows, read from the store as plain dicts (the JSON twins are these)."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import threading
from collections import OrderedDict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from crcr.store.deliveries import Delivery, Dispatch
from crcr.store.jobs import COMPLETED, CheckRun, Job, ResultsUpload
from crcr.store.triage import RerunRequest, TriagePost

PAGE_ROWS = 50
_SCAN = 4  # deliveries read per grid row asked for (a PR has several: opened, synchronize, labeled)


def cell_state(job: Job | None, dispatch: Dispatch | None) -> str:
    """One word per cell, also its colour: success, failure, running, queued, dead, none."""
    if job is not None:
        if job.state == COMPLETED:
            c = (job.conclusion or "").lower()
            if c == "success":
                return "success"
            if c in ("failure", "timed_out", "cancelled", "startup_failure") or (job.failed or 0) > 0:
                return "failure"
            return "neutral"
        return "running"
    if dispatch is not None:
        return {"dead": "dead", "sent": "running"}.get(dispatch.state, "queued")
    return "none"


def _row_key(d: Delivery) -> tuple[str, str]:
    return ("pr", str(d.pr_number)) if d.event == "pull_request" and d.pr_number is not None else ("commit", d.head_sha or d.id)


def _grouped_page(session: Session, query: Any, key: Any, *, page: int, rows: int,
                  keep: Any = None) -> tuple[list[tuple[Any, list[Any]]], bool]:
    """Rows of ``query`` (newest first) grouped by ``key``, read in chunks until enough
    distinct groups exist for ``page``: the groups of that page in first-seen order, and
    whether a later page has any. ``keep`` drops rows that belong to no group."""
    wanted = page * rows
    groups: dict[Any, list[Any]] = {}
    offset, chunk = 0, wanted * _SCAN
    while len(groups) < wanted + 1:
        batch = session.scalars(query.offset(offset).limit(chunk)).all()
        for item in batch:
            if keep is None or keep(item):
                groups.setdefault(key(item), []).append(item)
        if len(batch) < chunk:
            break
        offset += chunk
    ordered = list(groups.items())
    return ordered[(page - 1) * rows: wanted], len(ordered) > wanted


def grid(session: Session, *, page: int = 1, rows: int = PAGE_ROWS) -> dict[str, Any]:
    """Recent PRs and trunk commits (newest first) x backends, ``rows`` per page."""
    page, rows = max(1, page), max(1, min(rows, 200))
    # newest deliveries first, read in pages until enough distinct rows (uses the received_at index)
    chosen, has_next = _grouped_page(
        session, select(Delivery).where(Delivery.event.in_(("pull_request", "push")), Delivery.status == "accepted")
        .order_by(Delivery.received_at.desc(), Delivery.id.desc()), _row_key, page=page, rows=rows)
    delivery_ids = [d.id for _, ds in chosen for d in ds]
    dispatches = session.scalars(select(Dispatch).where(Dispatch.delivery_id.in_(delivery_ids))).all() if delivery_ids else []
    jobs = session.scalars(select(Job).where(Job.delivery_id.in_(delivery_ids))).all() if delivery_ids else []
    backends = sorted({x.target for x in dispatches} | {j.repo for j in jobs})
    by_delivery_target: dict[tuple[str, str], Dispatch] = {(x.delivery_id, x.target): x for x in dispatches}
    newest_job: dict[tuple[str, str], Job] = {}
    for j in sorted(jobs, key=lambda j: j.id):
        newest_job[(j.delivery_id, j.repo)] = j
    out_rows = []
    for (kind, key), ds in chosen:
        newest = ds[0]  # deliveries are newest first
        cells = {}
        for b in backends:
            # the newest delivery of this row that reached the backend decides the cell
            job = next((newest_job[(d.id, b)] for d in ds if (d.id, b) in newest_job), None)
            dispatch = next((by_delivery_target[(d.id, b)] for d in ds if (d.id, b) in by_delivery_target), None)
            state = cell_state(job, dispatch)
            cells[b] = {"state": state, "job_id": job.id if job else None,
                        "dispatch_state": dispatch.state if dispatch else None,
                        "passed": job.passed if job else None, "failed": job.failed if job else None,
                        "href": f"/dashboard/jobs/{job.id}" if job else None}
        out_rows.append({"kind": kind, "key": key, "pr_number": newest.pr_number, "head_sha": newest.head_sha,
                         "ref": newest.ref, "event": newest.event, "action": newest.action,
                         "received_at": newest.received_at.isoformat() if newest.received_at else None,
                         "href": f"/dashboard/pr/{key}" if kind == "pr" else None, "cells": cells})
    return {"page": page, "rows_per_page": rows, "has_next": has_next, "backends": backends,
            "rows": out_rows}


def _job_dict(session: Session, job: Job) -> dict[str, Any]:
    check = session.scalar(select(CheckRun).where(CheckRun.job_id == job.id))
    upload = session.scalar(select(ResultsUpload).where(ResultsUpload.job_id == job.id).order_by(ResultsUpload.id.desc()).limit(1))
    return {"id": job.id, "delivery_id": job.delivery_id, "repo": job.repo, "run_id": job.run_id,
            "run_attempt": job.run_attempt, "job_name": job.job_name, "workflow_name": job.workflow_name,
            "state": job.state, "conclusion": job.conclusion, "cell": cell_state(job, None),
            "event_type": job.event_type, "head_sha": job.head_sha, "pr_number": job.pr_number,
            "passed": job.passed, "failed": job.failed, "skipped": job.skipped,
            "queue_time_s": job.queue_time_s, "execution_time_s": job.execution_time_s,
            "failed_tests": list(job.failed_tests or []), "triage_verdict": job.triage_verdict,
            "check_run": None if check is None else {"name": check.name, "status": check.status,
                                                    "conclusion": check.conclusion, "synced": check.synced,
                                                    "last_error": check.last_error},
            "results": None if upload is None else {"id": upload.id, "counts": upload.counts, "device": upload.device,
                                                    "upstream_sha": upload.upstream_sha, "size_bytes": upload.size_bytes}}


def job_page(session: Session, job_id: int, *, max_tests: int = 2000) -> dict[str, Any] | None:
    job = session.get(Job, job_id)
    if job is None:
        return None
    out = _job_dict(session, job)
    upload = session.scalar(select(ResultsUpload).where(ResultsUpload.job_id == job.id).order_by(ResultsUpload.id.desc()).limit(1))
    tests: list[dict[str, Any]] = []
    if upload is not None:
        try:
            body = json.loads(gzip.decompress(upload.body_gz))
            for t in (body.get("tests") or [])[:max_tests]:
                tests.append({"id": t.get("id"), "outcome": t.get("outcome"), "duration_s": t.get("duration_s"),
                              "plan_mode": t.get("plan_mode"), "plan_reason": t.get("plan_reason"),
                              "error_class": t.get("error_class"), "message": (t.get("message") or "")[:300]})
        except (OSError, ValueError):
            tests = []
    out["tests"] = tests
    return out


def _body_of(upload: ResultsUpload | None) -> dict[str, Any]:
    if upload is None:
        return {}
    try:
        body = json.loads(gzip.decompress(upload.body_gz))
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _tests_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    tests = body.get("tests")
    return [t for t in tests if isinstance(t, dict)] if isinstance(tests, list) else []


PLAN_HISTORY_UPLOADS = 10  # results uploads the backend page reads for plan changes and proposals
MAX_CHANGED_TESTS = 50


def _decisions(body: dict[str, Any]) -> dict[str, tuple[Any, Any, Any]]:
    return {str(t.get("id")): (t.get("plan_mode"), t.get("plan_reason"), t.get("plan_source"))
            for t in _tests_of(body) if t.get("id")}


def plan_changes(uploads: list[tuple[ResultsUpload, dict[str, Any]]]) -> dict[str, Any]:
    """The plan versions the backend's uploads ran with (``run.plan_digest``, oldest first),
    and at each change of version the tests whose recorded mode, reason or source changed
    (among tests both uploads ran)."""
    versions: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    previous: tuple[ResultsUpload, dict[str, Any]] | None = None
    for upload, body in uploads:
        run = body.get("run") if isinstance(body.get("run"), dict) else {}
        digest = run.get("plan_digest") if isinstance(run.get("plan_digest"), str) else None
        seen = {"results_upload": upload.id, "job_id": upload.job_id, "upstream_sha": upload.upstream_sha,
                "received_at": _iso(upload.received_at)}
        if versions and versions[-1]["plan_digest"] == digest:
            versions[-1]["uploads"] += 1
            versions[-1]["last_seen"] = seen
        else:
            versions.append({"plan_digest": digest, "uploads": 1, "first_seen": seen, "last_seen": seen})
            if previous is not None:
                old, new = _decisions(previous[1]), _decisions(body)
                changed = [{"test": tid, "before": {"mode": old[tid][0], "reason": old[tid][1], "source": old[tid][2]},
                            "after": {"mode": new[tid][0], "reason": new[tid][1], "source": new[tid][2]}}
                           for tid in sorted(set(old) & set(new)) if old[tid] != new[tid]]
                changes.append({"from_digest": versions[-2]["plan_digest"], "to_digest": digest, "at": seen,
                                "tests_compared": len(set(old) & set(new)), "tests_changed": len(changed),
                                "changed": changed[:MAX_CHANGED_TESTS]})
        previous = (upload, body)
    return {"uploads_read": len(uploads), "versions": list(reversed(versions)), "changes": list(reversed(changes)),
            "source": f"plan_digest and per-test plan_mode/plan_reason/plan_source of the newest {len(uploads)} "
                      "results uploads of this backend"}


def _reason_key(reason: Any) -> str:
    """``[dtype-support] snpu does not support dtype complex128`` -> ``[dtype-support]``: one row per rule."""
    text = str(reason or "(no reason)")
    if text.startswith("[") and "]" in text:
        return text[: text.index("]") + 1]
    return text[:120]


class DerivedCache:
    """What a backend page derives from a set of stored uploads (they never change once
    stored), kept per (backend, upload ids) for one relay process and its store."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._items: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> dict[str, Any] | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: tuple[Any, ...], value: dict[str, Any]) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)


def backend_page(session: Session, repo: str, *, jobs: int = 50, refine: Any = None,
                 cache: DerivedCache | None = None) -> dict[str, Any]:
    """A backend's recent jobs; from its newest results upload, its plan by mode and reason;
    from its newest PLAN_HISTORY_UPLOADS uploads, the plan's recent changes and (with
    ``refine``, the selector's ``refine.proposals`` that crcr.cli installs) what
    ``crcr select refine`` would propose from them."""
    recent = session.scalars(select(Job).where(Job.repo == repo).order_by(Job.id.desc()).limit(jobs)).all()
    ids = session.scalars(select(ResultsUpload.id).where(ResultsUpload.repo == repo)
                          .order_by(ResultsUpload.id.desc()).limit(PLAN_HISTORY_UPLOADS)).all()
    key = (repo, tuple(ids), refine is not None)
    derived = cache.get(key) if cache is not None else None
    if derived is None:  # uploads never change once stored: what they yield is kept per set of uploads
        newest = session.scalars(select(ResultsUpload).where(ResultsUpload.id.in_(ids))
                                 .order_by(ResultsUpload.id.desc())).all() if ids else []
        uploads = [(u, _body_of(u)) for u in reversed(newest)]  # oldest first
        derived = {"plan_rows": _plan_rows(uploads[-1][1]) if uploads else [],
                   "upload": None if not newest else {"results_upload": newest[0].id, "job_id": newest[0].job_id,
                                                      "upstream_sha": newest[0].upstream_sha},
                   "plan_changes": plan_changes(uploads), "refinement": _refinement(uploads, refine)}
        if cache is not None:
            cache.put(key, derived)
    states: dict[str, int] = {}
    for j in recent:
        cell = cell_state(j, None)
        states[cell] = states.get(cell, 0) + 1
    return {"repo": repo, "jobs": [{"id": j.id, "cell": cell_state(j, None), "event_type": j.event_type,
                                    "head_sha": j.head_sha, "pr_number": j.pr_number, "job_name": j.job_name,
                                    "passed": j.passed, "failed": j.failed, "href": f"/dashboard/jobs/{j.id}"}
                                   for j in recent],
            "job_states": states,
            "plan_from_results": None if derived["upload"] is None else {**derived["upload"],
                                                                         "rows": derived["plan_rows"]},
            "plan_changes": derived["plan_changes"],
            "refinement": derived["refinement"]}


def _plan_rows(body: dict[str, Any]) -> list[dict[str, Any]]:
    summary: dict[tuple[str, str], dict[str, Any]] = {}
    for t in _tests_of(body):
        mode = str(t.get("plan_mode") or "unplanned")
        key = (mode, _reason_key(t.get("plan_reason")))
        row = summary.setdefault(key, {"mode": mode, "reason": key[1], "tests": 0, "outcomes": {}, "example": t.get("plan_reason")})
        row["tests"] += 1
        outcome = str(t.get("outcome"))
        row["outcomes"][outcome] = row["outcomes"].get(outcome, 0) + 1
    return sorted(summary.values(), key=lambda r: (r["mode"], -r["tests"], r["reason"]))


def _refinement(uploads: list[tuple[ResultsUpload, dict[str, Any]]], refine: Any) -> dict[str, Any]:
    if refine is None:
        return {"available": False, "proposals": [], "reviewer_conflicts": [],
                "note": "this relay process was started without the selector (crcr serve installs it)"}
    bodies = [body for _, body in uploads if body]
    try:
        out = dict(refine(bodies))
    except Exception as exc:  # an upload the results contract refuses: say so, keep the page
        return {"available": True, "proposals": [], "reviewer_conflicts": [],
                "note": f"the stored results could not be read as crcr results: {str(exc)[:300]}"}
    out["available"] = True
    out["source"] = (f"crcr select refine --dry-run over the newest {len(bodies)} results uploads of this backend, "
                     "against the plan as those runs recorded it")
    return out


def pr_page(session: Session, number: int) -> dict[str, Any]:
    deliveries = session.scalars(select(Delivery).where(Delivery.pr_number == number, Delivery.event == "pull_request")
                                 .order_by(Delivery.received_at.desc()).limit(200)).all()
    ids = [d.id for d in deliveries]
    dispatches = session.scalars(select(Dispatch).where(Dispatch.delivery_id.in_(ids))).all() if ids else []
    jobs = session.scalars(select(Job).where(Job.delivery_id.in_(ids)).order_by(Job.id)).all() if ids else []
    return {
        "pr_number": number,
        "deliveries": [{"id": d.id, "action": d.action, "head_sha": d.head_sha, "ref": d.ref, "status": d.status,
                        "ignored_reason": d.ignored_reason, "received_at": d.received_at.isoformat() if d.received_at else None}
                       for d in deliveries],
        "dispatches": [{"id": x.id, "delivery_id": x.delivery_id, "target": x.target, "kind": x.kind, "state": x.state,
                        "attempts": x.attempts, "last_error": x.last_error} for x in dispatches],
        "jobs": [_job_dict(session, j) for j in jobs],
    }


# --- triage verdicts -----------------------------------------------------------------------

_HEX_SHA = re.compile(r"[0-9a-f]{7,64}")


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    """SQLite hands back naive datetimes; the store writes UTC."""
    return value.replace(tzinfo=dt.UTC) if value is not None and value.tzinfo is None else value


def _parse_time(text: Any) -> dt.datetime | None:
    try:
        return _aware(dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")))
    except ValueError:
        return None


def _verdict_key(job: Job) -> tuple[str, str]:
    # triage attaches one verdict to every failing trunk job it explains: same backend and
    # same verdict body is one row, however many jobs carry it
    return job.repo, json.dumps(job.triage_verdict, sort_keys=True, separators=(",", ":"), default=str)


def _upstream_links(verdict: dict[str, Any], upstream_repo: str) -> dict[str, Any]:
    sus = verdict.get("suspected_upstream") if isinstance(verdict.get("suspected_upstream"), dict) else {}
    commit, pr = sus.get("commit"), sus.get("pr")
    commit_ok = isinstance(commit, str) and _HEX_SHA.fullmatch(commit) is not None
    pr_ok = isinstance(pr, int) and not isinstance(pr, bool) and pr > 0
    return {"commit": commit, "pr": pr, "reason": sus.get("reason"),
            # links only for values that are what they claim (a SHA, a PR number): the text is untrusted
            "commit_url": f"https://github.com/{upstream_repo}/commit/{commit}" if commit_ok else None,
            "pr_url": f"https://github.com/{upstream_repo}/pull/{pr}" if pr_ok else None}


def _rerun_dict(r: RerunRequest, job: Job | None) -> dict[str, Any]:
    return {"id": r.id, "sha": r.sha, "reason": r.reason, "state": r.state,
            "requested_at": _iso(r.requested_at), "dispatched_at": _iso(r.dispatched_at),
            "delivery_id": r.delivery_id, "error": r.error,
            "job_id": job.id if job else None, "job_cell": cell_state(job, None) if job else None,
            "job_href": f"/dashboard/jobs/{job.id}" if job else None}


def _iso(value: dt.datetime | None) -> str | None:
    value = _aware(value)
    return value.isoformat() if value is not None else None


def _post_matches(post: TriagePost, suspect: Any, shas: list[str]) -> bool:
    """``triage.posting`` keys a post by the suspect SHA, or ``infra:<sha12>`` /
    ``<kind>:<first bad sha12>`` when there is none: match either against the verdict."""
    if isinstance(suspect, str) and suspect and post.suspect == suspect[:64]:
        return True
    _, _, short = post.suspect.partition(":")
    return bool(short) and any(s.startswith(short) for s in shas)


def triage_page(session: Session, *, page: int = 1, rows: int = PAGE_ROWS, backend: str | None = None,
                upstream_repo: str = "pytorch/pytorch") -> dict[str, Any]:
    """Triage verdicts found on jobs (newest job first), one row per (backend, verdict),
    with the jobs carrying it, the rerun requests made for it and the reports posted.

    A rerun request belongs to the backend's verdict analysed at or after it was requested
    (the analysis it fed), the newest verdict keeping the later ones; verdicts only on
    other pages still bound that window, so a request is listed under one verdict."""
    page, rows = max(1, page), max(1, min(rows, 200))
    query = select(Job).where(Job.triage_verdict.isnot(None))
    if backend:
        query = query.where(Job.repo == backend)
    chosen, has_next = _grouped_page(session, query.order_by(Job.id.desc()), _verdict_key, page=page, rows=rows,
                           keep=lambda j: isinstance(j.triage_verdict, dict) and bool(j.triage_verdict))  # JSON null: none
    backends = sorted({repo for (repo, _), _ in chosen})
    reruns: dict[str, list[RerunRequest]] = {}
    posts: dict[str, list[TriagePost]] = {}
    windows: dict[str, list[dt.datetime]] = {}
    for b in backends:
        reruns[b] = list(session.scalars(select(RerunRequest).where(RerunRequest.backend == b).order_by(RerunRequest.id)))
        posts[b] = list(session.scalars(select(TriagePost).where(TriagePost.backend == b).order_by(TriagePost.id)))
        # every verdict time of the backend bounds the windows (not only this page's)
        times: set[dt.datetime | None] = set()
        for v in session.scalars(select(Job.triage_verdict).where(Job.repo == b, Job.triage_verdict.isnot(None))):
            if isinstance(v, dict):
                times.add(_parse_time(v.get("analyzed_at")))
        windows[b] = sorted(t for t in times if t is not None)
    rerun_deliveries = [r.delivery_id for rs in reruns.values() for r in rs if r.delivery_id]
    rerun_jobs: dict[str, Job] = {}
    if rerun_deliveries:
        for j in session.scalars(select(Job).where(Job.delivery_id.in_(rerun_deliveries)).order_by(Job.id)):
            rerun_jobs[j.delivery_id] = j  # the newest job of the rerun's delivery
    out_rows = []
    for (repo, _), jobs in chosen:
        verdict = jobs[0].triage_verdict or {}
        analyzed = _parse_time(verdict.get("analyzed_at"))
        earlier = [t for t in windows.get(repo, []) if analyzed is not None and t < analyzed]
        newest = not [t for t in windows.get(repo, []) if analyzed is not None and t > analyzed]
        mine = []
        for r in reruns.get(repo, []):
            at = _aware(r.requested_at)
            if analyzed is None or at is None:
                continue
            after_previous = not earlier or at > earlier[-1]
            if after_previous and (at <= analyzed or newest):
                mine.append(_rerun_dict(r, rerun_jobs.get(r.delivery_id or "")))
        suspect = _upstream_links(verdict, upstream_repo)
        shas = sorted({j.head_sha for j in jobs if j.head_sha})
        reports = [{"kind": p.kind, "target": p.target, "posted_at": _iso(p.posted_at), "suspect": p.suspect,
                    "url": p.url if isinstance(p.url, str) and p.url.startswith("https://") else None}
                   for p in posts.get(repo, []) if _post_matches(p, suspect["commit"], shas)]
        out_rows.append({
            "key": f"{jobs[0].id}", "backend": repo, "category": verdict.get("category"),
            "confidence": verdict.get("confidence"), "summary": verdict.get("summary"),
            "analyzed_at": verdict.get("analyzed_at"), "reproduced_on_retry": verdict.get("reproduced_on_retry"),
            "analyzer": verdict.get("analyzer"), "suspected_upstream": suspect,
            "evidence": verdict.get("evidence") or [],
            "jobs": [{"id": j.id, "head_sha": j.head_sha, "event_type": j.event_type, "cell": cell_state(j, None),
                      "job_name": j.job_name, "href": f"/dashboard/jobs/{j.id}"} for j in jobs],
            "reruns": mine, "reports": reports,
            "backend_href": f"/dashboard/backends/{repo}"})
    return {"page": page, "rows_per_page": rows, "has_next": has_next, "backend": backend,
            "upstream_repo": upstream_repo, "rows": out_rows}
