"""A local git clone of upstream as a source of diffs and commit trees (``crcr downstream --upstream-git``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from crcr.errors import InputError


def _git(repo: Path, *args: str) -> bytes:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True).stdout
    except FileNotFoundError as exc:
        raise InputError("git is not installed", hint="install git (apt-get install -y git)") from exc
    except subprocess.CalledProcessError as exc:
        msg = exc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        raise InputError(f"git {args[0]} in {repo} failed: {msg[0][:300]}",
                         hint="is the commit in that clone? fetch it first") from exc


def has_commit(repo: Path, sha: str) -> bool:
    try:
        _git(repo, "cat-file", "-e", f"{sha}^{{commit}}")
    except InputError:
        return False
    return True


def diff(repo: Path, base: str, head: str) -> str:
    """``git diff base...head`` (what GitHub shows as a PR's or a push's changes)."""
    return _git(repo, "diff", f"{base}...{head}").decode("utf-8", "replace")


def export(repo: Path, sha: str, dest: Path) -> None:
    """The tree of ``sha`` written under ``dest`` (what a CI checkout of that commit holds)."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = _git(repo, "archive", "--format=tar", sha)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
