"""Check runs on the upstream repository through PyGithub (the App's installation client).

One call is one HTTP request (the client has PyGithub's retries off); failures surface
as ``CheckRunError`` with a reason the caller records on the check-run row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests
from github import Github, GithubException

MAX_SUMMARY_CHARS = 65535
MAX_TEXT_CHARS = 65535
MAX_TITLE_CHARS = 255
CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out")


class CheckRunError(Exception):
    """GitHub refused or could not be reached; ``retriable`` says whether trying later may help."""

    def __init__(self, message: str, retriable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.retriable = retriable


@dataclass(frozen=True)
class CheckOutput:
    title: str
    summary: str
    text: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"title": self.title[:MAX_TITLE_CHARS], "summary": self.summary[:MAX_SUMMARY_CHARS]}
        if self.text:
            out["text"] = self.text[:MAX_TEXT_CHARS]
        return out


def _wrap(exc: Exception) -> CheckRunError:
    if isinstance(exc, GithubException):
        data = exc.data if isinstance(exc.data, dict) else {}
        msg = str(data.get("message") or "")[:300]
        return CheckRunError(f"GitHub answered {exc.status}: {msg}", retriable=exc.status >= 500 or exc.status in (401, 403, 429))
    return CheckRunError(f"cannot reach GitHub: {type(exc).__name__}", retriable=True)


def create_check_run(
    gh: Github,
    repo: str,
    *,
    name: str,
    head_sha: str,
    status: str,
    external_id: str,
    details_url: str | None,
    output: CheckOutput,
    conclusion: str | None = None,
    actions: list[dict[str, str]] | None = None,
) -> int:
    """``POST /repos/{repo}/check-runs``; returns the check run id."""
    kwargs: dict[str, Any] = {
        "name": name,
        "head_sha": head_sha,
        "status": status,
        "external_id": external_id,
        "output": output.as_dict(),
    }
    if details_url:
        kwargs["details_url"] = details_url
    if status == "completed":
        kwargs["conclusion"] = conclusion or "neutral"
    if actions:
        kwargs["actions"] = actions
    try:
        run = gh.get_repo(repo).create_check_run(**kwargs)
    except (GithubException, requests.exceptions.RequestException) as exc:
        raise _wrap(exc) from exc
    return int(run.id)


def update_check_run(
    gh: Github,
    repo: str,
    check_run_id: int,
    *,
    status: str,
    output: CheckOutput,
    details_url: str | None = None,
    conclusion: str | None = None,
    actions: list[dict[str, str]] | None = None,
) -> None:
    """``PATCH /repos/{repo}/check-runs/{id}`` (no GET first: the client is lazy)."""
    kwargs: dict[str, Any] = {"status": status, "output": output.as_dict()}
    if details_url:
        kwargs["details_url"] = details_url
    if status == "completed":
        kwargs["conclusion"] = conclusion or "neutral"
    if actions is not None:
        kwargs["actions"] = actions
    try:
        gh.get_repo(repo).get_check_run(int(check_run_id)).edit(**kwargs)
    except (GithubException, requests.exceptions.RequestException) as exc:
        raise _wrap(exc) from exc
