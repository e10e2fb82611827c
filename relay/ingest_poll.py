"""Ingest without a GitHub App on the upstream repo: poll it and feed the relay's intake.

A backend team that cannot install an App on pytorch/pytorch runs ``crcr ingest poll
--repo pytorch/pytorch``. Each round:

- ``GET /repos/{repo}/pulls?state=open&sort=updated&direction=desc&per_page=100`` (the
  most recently updated open PRs): a PR not seen before becomes a ``pull_request``
  ``opened`` delivery, a new head SHA a ``synchronize``;
- ``GET /repos/{repo}/branches/{branch}``: a new trunk head becomes a ``push``
  delivery, its file list from ``GET /repos/{repo}/compare/{old}...{new}``.

Requests are conditional (``If-None-Match`` with the last ``ETag``: an unchanged list
answers 304, which GitHub does not count against the rate limit). When
``X-RateLimit-Remaining`` falls to ``min_remaining`` (or GitHub answers a rate-limit
403/429) the round stops and says until when to wait. Deliveries go to the relay's own
``POST /webhook``, signed with its webhook secret, with deterministic ids
(``poll:<repo>:pr:<n>:<sha>``, ``poll:<repo>:push:<sha>``): a round repeated after a
crash is answered ``duplicate`` and dispatches nothing twice. State (ETags, PR heads,
trunk head) is saved to a JSON file after every delivery, so polling resumes where it
stopped. The first round only records what is open (``backfill`` dispatches it too).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from crcr.fileio import atomic_write_text

log = logging.getLogger("crcr.relay.ingest")


@dataclass
class PollState:
    etags: dict[str, str] = field(default_factory=dict)
    prs: dict[str, str] = field(default_factory=dict)  # PR number -> head SHA already delivered
    trunk: str | None = None
    primed: bool = False

    @classmethod
    def load(cls, path: Path) -> PollState:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(etags=dict(data.get("etags", {})), prs=dict(data.get("prs", {})),
                       trunk=data.get("trunk"), primed=bool(data.get("primed")))
        except (OSError, ValueError, AttributeError):
            return cls()

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(asdict(self), indent=1, sort_keys=True) + "\n")


@dataclass
class RoundReport:
    delivered: list[str] = field(default_factory=list)  # delivery ids the relay took (accepted/held/ignored)
    duplicates: int = 0
    not_modified: int = 0
    recorded: int = 0  # seen on the first round without backfill
    wait_until: float | None = None  # rate limit: do not call GitHub before this unix time
    error: str | None = None


class RateLimited(Exception):
    def __init__(self, reset: float) -> None:
        super().__init__(f"rate limited until {reset}")
        self.reset = reset


class Poller:
    """One upstream repo polled into one relay; ``poll_once`` is a round."""

    def __init__(self, repo: str, *, github: httpx.Client, relay: httpx.Client, secret: bytes, state_path: Path,
                 branch: str = "main", backfill: bool = False, min_remaining: int = 100,
                 clock: Callable[[], float] = time.time) -> None:
        self.repo, self.github, self.relay, self.secret = repo, github, relay, secret
        self.state_path, self.branch, self.backfill = state_path, branch, backfill
        self.min_remaining, self.clock = min_remaining, clock
        self.state = PollState.load(state_path)

    # -- GitHub ------------------------------------------------------------------------------
    def _get(self, path: str, key: str | None, report: RoundReport, params: dict[str, Any] | None = None) -> Any:
        """A (conditional) GET; None when unchanged (304). Raises RateLimited."""
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if key and key in self.state.etags:
            headers["If-None-Match"] = self.state.etags[key]
        resp = self.github.get(path, params=params, headers=headers)
        remaining, reset = resp.headers.get("x-ratelimit-remaining"), resp.headers.get("x-ratelimit-reset")
        reset_at = float(reset) if reset and reset.isdigit() else self.clock() + 60
        if resp.status_code in (403, 429) and (remaining == "0" or resp.headers.get("retry-after")):
            retry = resp.headers.get("retry-after")
            raise RateLimited(self.clock() + float(retry) if retry and retry.isdigit() else reset_at)
        if remaining is not None and remaining.isdigit() and int(remaining) <= self.min_remaining:
            report.wait_until = reset_at  # finish with this answer, then wait for the reset
        if resp.status_code == 304:
            report.not_modified += 1
            return None
        resp.raise_for_status()
        if key and resp.headers.get("etag"):
            self.state.etags[key] = resp.headers["etag"]
        return resp.json()

    # -- the relay -------------------------------------------------------------------------------
    def _deliver(self, event: str, delivery_id: str, payload: dict[str, Any], report: RoundReport) -> bool:
        body = json.dumps(payload, separators=(",", ":")).encode()
        sig = "sha256=" + hmac.new(self.secret, body, hashlib.sha256).hexdigest()
        resp = self.relay.post("/webhook", content=body, headers={
            "X-GitHub-Event": event, "X-GitHub-Delivery": delivery_id, "X-Hub-Signature-256": sig,
            "Content-Type": "application/json", "User-Agent": "crcr-ingest-poll"})
        if resp.status_code not in (200, 202):
            report.error = f"the relay answered {resp.status_code} for {delivery_id}: {resp.text[:200]}"
            return False
        if resp.json().get("status") == "duplicate":
            report.duplicates += 1
        else:
            report.delivered.append(delivery_id)
        return True

    def _repository(self) -> dict[str, Any]:
        owner, name = self.repo.split("/", 1)
        return {"full_name": self.repo, "name": name, "owner": {"login": owner}}

    # -- a round --------------------------------------------------------------------------------
    def poll_once(self) -> RoundReport:
        report = RoundReport()
        first = not self.state.primed
        try:
            self._poll_prs(report, first)
            if report.error is None and report.wait_until is None:
                self._poll_trunk(report, first)
        except RateLimited as exc:
            report.wait_until = exc.reset
        except httpx.HTTPError as exc:
            report.error = f"GitHub: {type(exc).__name__}: {str(exc)[:200]}"
        if report.error is None:
            self.state.primed = True
        self.state.save(self.state_path)
        return report

    def _poll_prs(self, report: RoundReport, first: bool) -> None:
        pulls = self._get(f"/repos/{self.repo}/pulls", "pulls", report,
                          params={"state": "open", "sort": "updated", "direction": "desc", "per_page": 100})
        for pr in reversed(pulls or []):  # oldest update first
            number, sha = pr.get("number"), (pr.get("head") or {}).get("sha")
            if not isinstance(number, int) or not isinstance(sha, str):
                continue
            known = self.state.prs.get(str(number))
            if known == sha:
                continue
            if first and not self.backfill:
                self.state.prs[str(number)] = sha
                report.recorded += 1
                continue
            action = "opened" if known is None else "synchronize"
            payload = {"action": action, "number": number, "pull_request": pr, "repository": self._repository(),
                       "sender": pr.get("user") or {}}
            if not self._deliver("pull_request", f"poll:{self.repo}:pr:{number}:{sha}", payload, report):
                return
            self.state.prs[str(number)] = sha
            self.state.save(self.state_path)

    def _poll_trunk(self, report: RoundReport, first: bool) -> None:
        branch = self._get(f"/repos/{self.repo}/branches/{self.branch}", "trunk", report)
        sha = ((branch or {}).get("commit") or {}).get("sha")
        if not isinstance(sha, str) or sha == self.state.trunk:
            return
        old = self.state.trunk
        if old is None and first and not self.backfill:
            self.state.trunk = sha
            report.recorded += 1
            return
        files: list[dict[str, Any]] = []
        commits: list[dict[str, Any]] = []
        if old is not None:
            compare = self._get(f"/repos/{self.repo}/compare/{old}...{sha}", None, report) or {}
            files = [f for f in compare.get("files") or [] if isinstance(f, dict)]
            commits = [c for c in compare.get("commits") or [] if isinstance(c, dict)]
        by_status: dict[str, list[str]] = {"added": [], "modified": [], "removed": []}
        for f in files:
            kind = {"added": "added", "removed": "removed"}.get(f.get("status"), "modified")
            if isinstance(f.get("filename"), str):
                by_status[kind].append(f["filename"])
        entries = [{"id": c.get("sha"), "message": (c.get("commit") or {}).get("message", ""),
                    "added": [], "modified": [], "removed": []} for c in commits] or [
            {"id": sha, "message": "", "added": [], "modified": [], "removed": []}]
        entries[-1].update(by_status)  # the compare's files, on the newest commit
        payload = {"ref": f"refs/heads/{self.branch}", "before": old or "0" * 40, "after": sha,
                   "repository": self._repository(), "commits": entries, "head_commit": entries[-1],
                   "pusher": {"name": "crcr-ingest-poll"}, "sender": {"login": "crcr-ingest-poll"}}
        if self._deliver("push", f"poll:{self.repo}:push:{sha}", payload, report):
            self.state.trunk = sha
