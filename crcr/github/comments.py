"""PR conversation calls through PyGithub's requester: comments, reactions, labels,
collaborator permission, the PR head, and cancelling Actions runs.

One call is one HTTP request (the client has PyGithub's retries off). Failures raise
``GitHubCallError`` carrying GitHub's status (None when GitHub could not be reached).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests
from github import Github, GithubException

REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")


class GitHubCallError(Exception):
    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _call(gh: Github, verb: str, url: str, body: dict[str, Any] | None = None,
          headers: dict[str, str] | None = None) -> Any:
    try:
        _headers, data = gh.requester.requestJsonAndCheck(verb, url, input=body, headers=headers)
    except GithubException as exc:
        data = exc.data if isinstance(exc.data, dict) else {}
        raise GitHubCallError(f"GitHub answered {exc.status}: {str(data.get('message') or '')[:200]}",
                              exc.status) from exc
    except requests.exceptions.RequestException as exc:
        raise GitHubCallError(f"cannot reach GitHub: {type(exc).__name__}", None) from exc
    return data


def create_comment(gh: Github, repo: str, number: int, body: str) -> int:
    """``POST /repos/{repo}/issues/{number}/comments``; returns the comment id."""
    data = _call(gh, "POST", f"/repos/{repo}/issues/{int(number)}/comments", {"body": body})
    return int(data["id"])


def edit_comment(gh: Github, repo: str, comment_id: int, body: str) -> None:
    """``PATCH /repos/{repo}/issues/comments/{id}`` (404 when someone deleted it)."""
    _call(gh, "PATCH", f"/repos/{repo}/issues/comments/{int(comment_id)}", {"body": body})


def add_reaction(gh: Github, repo: str, comment_id: int, content: str) -> None:
    """``POST /repos/{repo}/issues/comments/{id}/reactions`` (200 when it was already there)."""
    if content not in REACTIONS:
        raise ValueError(f"not a GitHub reaction: {content}")
    _call(gh, "POST", f"/repos/{repo}/issues/comments/{int(comment_id)}/reactions", {"content": content})


def add_labels(gh: Github, repo: str, number: int, labels: list[str]) -> None:
    """``POST /repos/{repo}/issues/{number}/labels`` (creates the label in the repo if needed)."""
    _call(gh, "POST", f"/repos/{repo}/issues/{int(number)}/labels", {"labels": labels})


def collaborator_permission(gh: Github, repo: str, login: str) -> dict[str, Any]:
    """``GET /repos/{repo}/collaborators/{login}/permission``: ``permission`` and ``role_name``."""
    try:
        return _call(gh, "GET", f"/repos/{repo}/collaborators/{quote(login, safe='')}/permission")
    except GitHubCallError as exc:
        if exc.status == 404:  # not a user GitHub knows, or not visible to the App: no permission
            return {"permission": "none", "role_name": "none"}
        raise


def pull_head_sha(gh: Github, repo: str, number: int) -> str:
    """The PR's current head SHA (``GET /repos/{repo}/pulls/{number}``)."""
    data = _call(gh, "GET", f"/repos/{repo}/pulls/{int(number)}")
    sha = (data.get("head") or {}).get("sha") if isinstance(data, dict) else None
    if not isinstance(sha, str) or not sha:
        raise GitHubCallError("GitHub's pull request answer has no head SHA", 200)
    return sha


def pull_diff(gh: Github, repo: str, number: int) -> str:
    """The PR's unified diff (``GET /repos/{repo}/pulls/{number}`` with the diff media type)."""
    data = _call(gh, "GET", f"/repos/{repo}/pulls/{int(number)}", headers={"Accept": "application/vnd.github.diff"})
    if isinstance(data, dict) and isinstance(data.get("data"), str):  # PyGithub wraps a non-JSON body
        return data["data"]
    if isinstance(data, str):
        return data
    raise GitHubCallError("GitHub's diff answer was not text", 200)


def cancel_run(gh: Github, repo: str, run_id: int) -> bool:
    """``POST /repos/{repo}/actions/runs/{id}/cancel``: True when GitHub took it (202),
    False when the run had already finished (409)."""
    try:
        _call(gh, "POST", f"/repos/{repo}/actions/runs/{int(run_id)}/cancel")
    except GitHubCallError as exc:
        if exc.status == 409:
            return False
        raise
    return True
