"""Does a commit exist in a repository? (``GET /repos/{o}/{r}/commits/{sha}``)."""

from __future__ import annotations

import re

import requests
from github import Github, GithubException

_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")


def commit_exists(gh: Github, repo: str, sha: str) -> bool | None:
    """True/False when GitHub answered; None when it could not (5xx, rate limit, network).

    GitHub answers 404 for an unknown SHA and 422 for one that is not a commit.
    The SHA is validated first so untrusted input never shapes the URL.
    """
    if not _SHA.match(sha):
        return False
    try:
        commit = gh.get_repo(repo).get_commit(sha)
        return bool(commit.raw_data.get("sha"))  # raw_data forces the GET a lazy client defers
    except GithubException as exc:
        if exc.status in (404, 422):
            return False
        return None
    except requests.exceptions.RequestException:
        return None
