"""Posting the report: an issue in the backend repo and/or a comment on the upstream PR.

Dry-run by default (it says what it would post). Guards, in order:

- a global kill switch: ``CRCR_TRIAGE_POSTING=off`` posts nothing, whatever the flags;
- only calls a person must act on are posted (revert, forward fix, skip in plan, infra
  ticket); flakes, recoveries and calls still waiting for reruns are not;
- once per (backend, suspect, kind): a ``triage_posts`` row is claimed *before* posting
  (its unique key makes a second claim fail), and released if the post fails;
- an upstream PR carrying the opt-out label (``CRCR_TRIAGE_OPT_OUT_LABEL``, default
  ``crcr/no-triage``) gets no comment.

crcr never reverts anything: a person reads the report and decides.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError

from crcr.errors import ExternalError, InputError
from crcr.store.triage import TriagePost
from triage.classify import Analysis

POSTED_ACTIONS = ("revert", "forward_fix", "skip_in_plan", "infra_ticket")
MAX_BODY_CHARS = 60_000  # GitHub's limit is 65,536
DEFAULT_OPT_OUT_LABEL = "crcr/no-triage"


@dataclass
class PostingConfig:
    dry_run: bool = True
    enabled: bool = True  # the global kill switch
    issue_repo: str | None = None
    comment_upstream: bool = False
    upstream_repo: str = "pytorch/pytorch"
    opt_out_label: str = DEFAULT_OPT_OUT_LABEL

    @classmethod
    def from_env(cls, **kwargs: Any) -> PostingConfig:
        switch = os.environ.get("CRCR_TRIAGE_POSTING", "on").strip().lower()
        return cls(enabled=switch not in ("off", "0", "false", "no"),
                   opt_out_label=os.environ.get("CRCR_TRIAGE_OPT_OUT_LABEL", DEFAULT_OPT_OUT_LABEL), **kwargs)


def _key(analysis: Analysis) -> str:
    if analysis.suspect is not None:
        return analysis.suspect.sha[:64]
    if analysis.kind == "infra" and analysis.infra:
        return f"infra:{analysis.infra[0].run.sha[:12]}"
    return f"{analysis.kind}:{(analysis.first_bad.sha[:12] if analysis.first_bad else '')}"


def title(analysis: Analysis) -> str:
    what = {"revert": "upstream commit breaks", "forward_fix": "upstream commit breaks",
            "skip_in_plan": "tests never passed on", "infra_ticket": "runner infrastructure failing for"}
    sha = f" at {analysis.suspect.sha[:12]}" if analysis.suspect else ""
    pr = f" (pytorch PR #{analysis.suspect.pr})" if analysis.suspect and analysis.suspect.pr else ""
    return f"crcr triage: {what.get(analysis.action, analysis.action)} {analysis.backend}{sha}{pr}"[:250]


def _claim(sessions: Any, backend: str, key: str, kind: str, target: str) -> bool:
    try:
        with sessions.begin() as s:
            s.add(TriagePost(backend=backend[:200], suspect=key, kind=kind, target=target[:300],
                             posted_at=dt.datetime.now(dt.UTC)))
        return True
    except IntegrityError:
        return False


def _release(sessions: Any, backend: str, key: str, kind: str) -> None:
    with sessions.begin() as s:
        s.execute(delete(TriagePost).where(TriagePost.backend == backend[:200], TriagePost.suspect == key,
                                           TriagePost.kind == kind))


def _record_url(sessions: Any, backend: str, key: str, kind: str, url: str | None) -> None:
    from sqlalchemy import update

    with sessions.begin() as s:
        s.execute(update(TriagePost).where(TriagePost.backend == backend[:200], TriagePost.suspect == key,
                                           TriagePost.kind == kind).values(url=(url or "")[:2000] or None))


def publish(analysis: Analysis, markdown: str, config: PostingConfig, *, sessions: Any = None,
            client_for_repo: Callable[[str], Any] | None = None) -> list[str]:
    """Post (or, in dry-run, describe) the report; returns one line per decision."""
    if analysis.action not in POSTED_ACTIONS:
        return [f"nothing to post: the call is {analysis.action.replace('_', ' ')}"]
    if not config.enabled:
        return ["posting is switched off (CRCR_TRIAGE_POSTING=off): nothing posted"]
    body = markdown if len(markdown) <= MAX_BODY_CHARS else markdown[:MAX_BODY_CHARS] + "\n\n... [report truncated]\n"
    plans: list[tuple[str, str]] = []
    if config.issue_repo:
        plans.append(("issue", config.issue_repo))
    if config.comment_upstream and analysis.action in ("revert", "forward_fix") and analysis.suspect and analysis.suspect.pr:
        plans.append(("comment", f"{config.upstream_repo}#{analysis.suspect.pr}"))
    if config.dry_run:
        return [f"dry-run: would open an issue in {t}: {title(analysis)}" if kind == "issue"
                else f"dry-run: would comment on {t}" for kind, t in plans] or ["dry-run: nowhere to post"]
    if sessions is None:
        raise InputError("posting needs the database, which remembers what was posted (one post per suspect)",
                         hint="run crcr triage report --post against the relay's database, or drop --post")
    if client_for_repo is None:
        from crcr.github import GitHubApp
        from crcr.settings import get_settings

        app = GitHubApp.from_settings(get_settings())
        client_for_repo = app.client_for_repo
    key = _key(analysis)
    lines = []
    for kind, target in plans:
        if not _claim(sessions, analysis.backend, key, kind, target):
            lines.append(f"already posted ({kind} for {key[:12]} on {analysis.backend}): not posting again")
            continue
        try:
            if kind == "issue":
                repo = client_for_repo(target).get_repo(target)
                issue = repo.create_issue(title=title(analysis), body=body)
                url = getattr(issue, "html_url", None)
                lines.append(f"opened issue {url or target}")
            else:
                repo_name, number = target.rsplit("#", 1)
                issue = client_for_repo(repo_name).get_repo(repo_name).get_issue(int(number))
                labels = {label.name for label in issue.labels}
                if config.opt_out_label in labels:
                    _release(sessions, analysis.backend, key, kind)
                    lines.append(f"{target} carries the opt-out label {config.opt_out_label!r}: no comment")
                    continue
                comment = issue.create_comment(body)
                url = getattr(comment, "html_url", None)
                lines.append(f"commented on {url or target}")
            _record_url(sessions, analysis.backend, key, kind, url)
        except Exception as exc:
            _release(sessions, analysis.backend, key, kind)
            raise ExternalError(f"posting the {kind} to {target} failed: {type(exc).__name__}",
                                hint="check the GitHub App's installation and permissions (issues: write); "
                                     "the next run will try again") from exc
    return lines
