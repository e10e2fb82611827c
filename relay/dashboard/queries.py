"""What the dashboard shows, read from the store as plain dicts (the JSON twins are these)."""

from __future__ import annotations

import gzip
import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from crcr.store.deliveries import Delivery, Dispatch
from crcr.store.jobs import COMPLETED, CheckRun, Job, ResultsUpload

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


def grid(session: Session, *, page: int = 1, rows: int = PAGE_ROWS) -> dict[str, Any]:
    """Recent PRs and trunk commits (newest first) x backends, ``rows`` per page."""
    page, rows = max(1, page), max(1, min(rows, 200))
    wanted = page * rows
    # newest deliveries first, read in pages until enough distinct rows (uses the received_at index)
    keys: dict[tuple[str, str], list[Delivery]] = {}
    offset, chunk = 0, wanted * _SCAN
    while len(keys) < wanted + 1:
        batch = session.scalars(
            select(Delivery).where(Delivery.event.in_(("pull_request", "push")), Delivery.status == "accepted")
            .order_by(Delivery.received_at.desc(), Delivery.id.desc()).offset(offset).limit(chunk)).all()
        for d in batch:
            keys.setdefault(_row_key(d), []).append(d)
        if len(batch) < chunk:
            break
        offset += chunk
    ordered = list(keys.items())
    chosen = ordered[(page - 1) * rows: page * rows]
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
    return {"page": page, "rows_per_page": rows, "has_next": len(ordered) > page * rows, "backends": backends,
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


def _results_of(upload: ResultsUpload | None) -> list[dict[str, Any]]:
    if upload is None:
        return []
    try:
        body = json.loads(gzip.decompress(upload.body_gz))
    except (OSError, ValueError):
        return []
    tests = body.get("tests") if isinstance(body, dict) else None
    return [t for t in tests or [] if isinstance(t, dict)]


def _reason_key(reason: Any) -> str:
    """``[dtype-support] snpu does not support dtype complex128`` -> ``[dtype-support]``: one row per rule."""
    text = str(reason or "(no reason)")
    if text.startswith("[") and "]" in text:
        return text[: text.index("]") + 1]
    return text[:120]


def backend_page(session: Session, repo: str, *, jobs: int = 50) -> dict[str, Any]:
    """A backend's recent jobs and, from its newest results upload, its plan by mode and reason."""
    recent = session.scalars(select(Job).where(Job.repo == repo).order_by(Job.id.desc()).limit(jobs)).all()
    upload = session.scalar(select(ResultsUpload).where(ResultsUpload.repo == repo)
                            .order_by(ResultsUpload.id.desc()).limit(1))
    summary: dict[tuple[str, str], dict[str, Any]] = {}
    for t in _results_of(upload):
        mode = str(t.get("plan_mode") or "unplanned")
        key = (mode, _reason_key(t.get("plan_reason")))
        row = summary.setdefault(key, {"mode": mode, "reason": key[1], "tests": 0, "outcomes": {}, "example": t.get("plan_reason")})
        row["tests"] += 1
        outcome = str(t.get("outcome"))
        row["outcomes"][outcome] = row["outcomes"].get(outcome, 0) + 1
    plan = sorted(summary.values(), key=lambda r: (r["mode"], -r["tests"], r["reason"]))
    states: dict[str, int] = {}
    for j in recent:
        cell = cell_state(j, None)
        states[cell] = states.get(cell, 0) + 1
    return {"repo": repo, "jobs": [{"id": j.id, "cell": cell_state(j, None), "event_type": j.event_type,
                                    "head_sha": j.head_sha, "pr_number": j.pr_number, "job_name": j.job_name,
                                    "passed": j.passed, "failed": j.failed, "href": f"/dashboard/jobs/{j.id}"}
                                   for j in recent],
            "job_states": states,
            "plan_from_results": None if upload is None else {"results_upload": upload.id, "job_id": upload.job_id,
                                                              "upstream_sha": upload.upstream_sha, "rows": plan}}


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
