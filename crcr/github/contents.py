"""Read a file named by a ``https://github.com/<owner>/<repo>/blob/<ref>/<path>`` URL.

That is how PyTorch configures its allowlist and ``ci_providers.yml``; CRCR reads such a
URL through the REST contents API (``GET /repos/{owner}/{repo}/contents/{path}?ref=``,
unauthenticated), not as the HTML page the URL shows in a browser. The API base is
crcr's GitHub seam (``CRCR_GITHUB_API_URL``), so GHES and the test server work too.
"""

from __future__ import annotations

import math
import re
from urllib.parse import unquote, urlparse

import requests
from github import Github, GithubException

from crcr.github.auth import NO_RETRY_KWARGS

_PART = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def parse_blob_url(url: str) -> tuple[str, str, str] | None:
    """``(owner/repo, ref, path)`` of a github.com blob URL, or None when ``url`` is not one."""
    parsed = urlparse(url)
    parts = [unquote(p) for p in parsed.path.split("/") if p]
    if parsed.scheme not in ("http", "https") or parsed.netloc != "github.com" or len(parts) < 5 \
            or parts[2] != "blob":
        return None
    owner, repo, _blob, ref, *path = parts
    if not _PART.match(owner) or not _PART.match(repo) or any(p in ("..", ".") for p in path):
        return None
    return f"{owner}/{repo}", ref, "/".join(path)


class ContentsError(Exception):
    """The file could not be read; ``str()`` says why (never a token: none is used)."""


def read_blob_url(url: str, *, api_url: str, timeout_s: float = 10.0) -> str:
    """The text of the file a blob URL names, read through the contents API."""
    parsed = parse_blob_url(url)
    if parsed is None:
        raise ContentsError(f"{url} is not https://github.com/<owner>/<repo>/blob/<ref>/<path>")
    repo, ref, path = parsed
    gh = Github(base_url=api_url.rstrip("/"), timeout=max(1, math.ceil(timeout_s)), lazy=True, **NO_RETRY_KWARGS)
    try:
        found = gh.get_repo(repo).get_contents(path, ref=ref)
    except GithubException as exc:
        raise ContentsError(f"GitHub answered {exc.status} for {repo}/{path}@{ref}") from exc
    except requests.exceptions.RequestException as exc:
        raise ContentsError(f"cannot reach GitHub for {repo}/{path}@{ref}: {type(exc).__name__}") from exc
    if isinstance(found, list):
        raise ContentsError(f"{repo}/{path}@{ref} is a directory, not a file")
    try:
        return found.decoded_content.decode("utf-8")
    except (UnicodeDecodeError, AssertionError, TypeError) as exc:
        raise ContentsError(f"{repo}/{path}@{ref} is not UTF-8 text") from exc
