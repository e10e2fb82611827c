"""``repository_dispatch`` through PyGithub, with failures sorted into retriable or not.

One call is one HTTP attempt (PyGithub's own retries are off). The outcome tells the
caller when to try again: ``Retry-After`` and GitHub's rate-limit headers win over the
caller's backoff.
"""

from __future__ import annotations

import time
from typing import Any

import requests
from github import GithubException

from crcr.github import GitHubApp


class DispatchFailure(Exception):
    """One failed attempt: ``retriable`` says whether another attempt can help."""

    def __init__(self, message: str, retriable: bool, status: int | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retriable = retriable
        self.status = status
        self.retry_after_s = retry_after_s


def _retry_after(headers: dict[str, Any] | None, now: float) -> float | None:
    if not headers:
        return None
    h = {str(k).lower(): v for k, v in headers.items()}
    ra = h.get("retry-after")
    if ra is not None:
        try:
            return max(0.0, float(ra))
        except ValueError:
            return None
    if str(h.get("x-ratelimit-remaining", "")) == "0" and h.get("x-ratelimit-reset"):
        try:
            return max(0.0, float(h["x-ratelimit-reset"]) - now)
        except ValueError:
            return None
    return None


def classify(exc: BaseException, *, now: float | None = None) -> DispatchFailure:
    """Turn an exception from PyGithub/requests into a ``DispatchFailure``."""
    now = time.time() if now is None else now
    if isinstance(exc, DispatchFailure):
        return exc
    if isinstance(exc, GithubException):
        status = exc.status
        data = exc.data if isinstance(exc.data, dict) else {}
        msg = str(data.get("message") or exc.message or "")[:300]
        retry_after = _retry_after(exc.headers, now)
        rate_limited = status == 429 or (status == 403 and (retry_after is not None or "rate limit" in msg.lower()))
        if rate_limited:
            return DispatchFailure(f"GitHub rate limit ({status}): {msg}", True, status, retry_after or 60.0)
        if status >= 500:
            return DispatchFailure(f"GitHub answered {status}: {msg}", True, status, retry_after)
        if status == 401:
            return DispatchFailure(f"GitHub refused the token (401): {msg}", True, status, retry_after)
        if status == 404:
            return DispatchFailure(
                f"GitHub answered 404: the repository does not exist or the App is not installed on it ({msg})",
                False, status)
        return DispatchFailure(f"GitHub refused the dispatch ({status}): {msg}", False, status)
    if isinstance(exc, requests.exceptions.Timeout):
        return DispatchFailure(f"timed out talking to GitHub: {type(exc).__name__}", True)
    if isinstance(exc, requests.exceptions.RequestException | ConnectionError | OSError):
        return DispatchFailure(f"connection to GitHub failed: {type(exc).__name__}: {str(exc)[:200]}", True)
    return DispatchFailure(f"unexpected error: {type(exc).__name__}: {str(exc)[:200]}", True)


def send_repository_dispatch(app: GitHubApp, repo: str, event_type: str, client_payload: dict[str, Any]) -> None:
    """POST /repos/{repo}/dispatches once; raise ``DispatchFailure`` on any failure."""
    try:
        gh = app.client_for_repo(repo)
        # Repository.create_repository_dispatch returns only `status == 204` and hides the
        # status and Retry-After we need, so call the same endpoint through PyGithub's
        # requester, which raises GithubException (status, headers, body) on >= 400.
        gh.requester.requestJsonAndCheck(
            "POST", f"/repos/{repo}/dispatches", input={"event_type": event_type, "client_payload": client_payload})
    except Exception as exc:
        failure = classify(exc)
        if failure.status == 401:
            app.forget(repo)  # the next attempt mints a fresh token
        raise failure from exc
