"""Re-running downstream workflow runs through the Actions API (what CRCR's re-run does).

- ``rerun_failed_jobs``: ``POST /repos/{o}/{r}/actions/runs/{id}/rerun-failed-jobs``
  (a check run's own "Re-run", or "Re-run failed checks");
- ``rerun_run``: ``POST /repos/{o}/{r}/actions/runs/{id}/rerun`` (every job: "Re-run all");
- ``suite_check_runs``: ``GET /repos/{o}/{r}/check-suites/{id}/check-runs`` (the App's
  check runs of one suite, paged).

GitHub answers 403 "... is already running" for a run that is re-running; that is not a
failure (``already_running``).
"""

from __future__ import annotations

from typing import Any

import requests
from github import Github, GithubException

from crcr.github.checks import CheckRunError, _wrap

__all__ = ["already_running", "rerun_failed_jobs", "rerun_run", "suite_check_runs"]


def already_running(exc: CheckRunError) -> bool:
    return "already running" in exc.message.lower()


def _post(gh: Github, url: str) -> None:
    try:
        gh.requester.requestJsonAndCheck("POST", url)
    except (GithubException, requests.exceptions.RequestException) as exc:
        raise _wrap(exc) from exc


def rerun_failed_jobs(gh: Github, repo: str, run_id: int) -> None:
    _post(gh, f"/repos/{repo}/actions/runs/{int(run_id)}/rerun-failed-jobs")


def rerun_run(gh: Github, repo: str, run_id: int) -> None:
    _post(gh, f"/repos/{repo}/actions/runs/{int(run_id)}/rerun")


def suite_check_runs(gh: Github, repo: str, suite_id: int, *, max_pages: int = 10) -> list[dict[str, Any]]:
    """Every check run of suite ``suite_id`` (``name`` and ``external_id`` are what callers read)."""
    out: list[dict[str, Any]] = []
    try:
        for page in range(1, max_pages + 1):
            _, data = gh.requester.requestJsonAndCheck(
                "GET", f"/repos/{repo}/check-suites/{int(suite_id)}/check-runs", parameters={"per_page": 100, "page": page})
            runs = data.get("check_runs") if isinstance(data, dict) else None
            if not isinstance(runs, list):
                break
            out += [r for r in runs if isinstance(r, dict)]
            if len(runs) < 100:
                break
    except (GithubException, requests.exceptions.RequestException) as exc:
        raise _wrap(exc) from exc
    return out
