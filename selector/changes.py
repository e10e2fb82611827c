"""Where a pick's change comes from: a diff file, a dispatch payload, or a PR read from GitHub.

GitHub is read through PyGithub (the project's one GitHub seam): the PR's title and
body, and its files with their patches, page by page (GitHub lists at most 3,000
files; a file whose patch GitHub leaves out still counts by its path). The PR text is
data: signals look names up in it, nothing in it is obeyed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from selector.diffparse import MAX_DIFF_BYTES, parse_diff
from selector.errors import SelectorInputError
from selector.signals.base import Change

MAX_TEXT_BYTES = 1_000_000
MAX_FILES = 3000  # GitHub's own cap on a PR's file list


def change_from_diff(path: Path, text: str = "") -> Change:
    if not path.is_file():
        raise SelectorInputError(f"diff {path} does not exist", hint="write one with: git diff BASE...HEAD > pr.diff")
    if path.stat().st_size > MAX_DIFF_BYTES:
        raise SelectorInputError(f"diff {path} is larger than {MAX_DIFF_BYTES // (1024 * 1024)} MiB",
                                 hint="pass a diff of one PR: git diff BASE...HEAD > pr.diff")
    return Change.from_diffs(parse_diff(path.read_text(encoding="utf-8", errors="replace")), text[:MAX_TEXT_BYTES])


def pr_from_event(path: Path) -> tuple[str, int, str]:
    """(repo, PR number, title + body) from a dispatch payload (``client_payload``) or a raw webhook body."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SelectorInputError(f"cannot read the event {path}: {exc}",
                                 hint="pass the dispatch payload JSON the relay sent (client_payload)") from None
    if isinstance(data, dict) and isinstance(data.get("client_payload"), dict):
        data = data["client_payload"]
    if isinstance(data, dict) and isinstance(data.get("payload"), dict):
        data = data["payload"]
    pr = data.get("pull_request") if isinstance(data, dict) else None
    repo = (data.get("repository") or {}).get("full_name") if isinstance(data, dict) else None
    if not isinstance(pr, dict) or not isinstance(pr.get("number"), int) or not isinstance(repo, str):
        raise SelectorInputError(f"the event {path} is not about a pull request (no pull_request.number / repository)",
                                 hint="pick for a push with --diff, or pass a pull_request event's payload")
    text = f"{pr.get('title') or ''}\n{pr.get('body') or ''}"
    return repo, pr["number"], text[:MAX_TEXT_BYTES]


def change_from_github(client: Any, repo: str, number: int, *, known_text: str | None = None) -> Change:
    """The PR's changed files (paginated) and text, read with a PyGithub client."""
    from github import GithubException

    try:
        pull = client.get_repo(repo).get_pull(number)
        text = known_text if known_text is not None else f"{pull.title or ''}\n{pull.body or ''}"
        chunks: list[str] = []
        paths: list[str] = []
        for i, f in enumerate(pull.get_files()):
            if i >= MAX_FILES:
                break
            paths.append(f.filename)
            if f.patch:
                old = f.previous_filename or f.filename
                chunks.append(f"diff --git a/{old} b/{f.filename}\n--- a/{old}\n+++ b/{f.filename}\n{f.patch}\n")
    except GithubException as exc:
        msg = exc.data.get("message") if isinstance(exc.data, dict) else str(exc.data)
        raise SelectorInputError(f"GitHub answered {exc.status} reading {repo}#{number}: {msg}",
                                 hint="check the PR number and repository, and CRCR_GITHUB_TOKEN for private repos") from None
    except OSError as exc:
        raise SelectorInputError(f"cannot reach GitHub: {exc}",
                                 hint="check CRCR_GITHUB_API_URL and the network") from None
    diffs = parse_diff("".join(chunks))
    return Change.from_diffs(diffs, text[:MAX_TEXT_BYTES], extra_paths=paths)


def github_client(base_url: str, token: str | None) -> Any:
    """A PyGithub client with crcr's rules; anonymous when no token is set (public repositories)."""
    from github import Auth, Github

    from crcr.github.auth import NO_RETRY_KWARGS

    auth = Auth.Token(token) if token else None
    return Github(auth=auth, base_url=base_url.rstrip("/"), timeout=15, lazy=True, **NO_RETRY_KWARGS)
