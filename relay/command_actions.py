"""Executing ``/ci`` commands and approval labels (parsing is relay/commands.py).

Intake stores every ``issue_comment`` and ``labeled`` delivery, then calls
``on_delivery``, which queues ``crcr.commands.handle`` for a worker (or runs it on a
background thread when this process has no task queue). The task:

1. reads the comment (created, on a PR of the upstream repo, not from a bot), parses
   its commands and stores them (``commands`` rows, unique per comment id and
   position: a redelivered comment stops here);
2. reacts ``eyes``; checks the commenter (write/maintain/admin through the API,
   cached, or the trusted list), and re-reads the PR head SHA from GitHub;
3. executes each command, stores its outcome, reacts ``rocket`` (all done) or
   ``confused``, and writes one reply comment (edited in place) where there is
   something to say: status, select, help, refusals and errors.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from crcr.github.comments import (
    GitHubCallError,
    add_labels,
    add_reaction,
    collaborator_permission,
    pull_head_sha,
)
from crcr.store.commands import DONE, FAILED, INVALID, RECEIVED, REFUSED, Command
from crcr.store.deliveries import Delivery
from relay import approval, job_actions, select_preview
from relay.commands import USAGE, Parsed, parse_comment
from relay.replies import help_text, inert, upsert_comment
from relay.trust import LOGIN_RE, Permission, PermissionCache, role_from_api

log = logging.getLogger("crcr.relay.commands")

HANDLE_TASK = "crcr.commands.handle"
OPEN_TO_ALL = {"help"}  # harmless, answered in the one edited reply


def register(runtime: Any) -> Any:
    """Put ``crcr.commands.handle`` on ``runtime.huey`` (worker.register_tasks calls this)."""
    return runtime.huey.task(name=HANDLE_TASK)(lambda delivery_id: handle(runtime, delivery_id))


def on_delivery(runtime: Any, delivery_id: str, event: str, info: Any) -> None:
    """Intake's hook: queue PR comments and labels for ``handle`` (never raises, never waits on GitHub)."""
    if event == "issue_comment" and (info.action != "created" or info.pr_number is None):
        return  # edited/deleted comments and comments on issues are not commands
    if event == "pull_request":
        trust = runtime.allowlist.get().trust
        if info.action != "labeled" or not trust.gating or info.label != trust.approval_label:
            return  # only the approval label matters here (ciflow labels go to relay.checks)
    task = getattr(runtime.tasks, "commands_task", None) if runtime.tasks is not None else None
    try:
        if task is not None:
            task(delivery_id)
            runtime.wakeup.notify(1)
            return
    except Exception:
        log.warning("could not queue delivery %s; handling it in this process", delivery_id, exc_info=True)
    thread = threading.Thread(target=handle, args=(runtime, delivery_id), name="crcr-command", daemon=True)
    _background[:] = [t for t in _background if t.is_alive()] + [thread]
    thread.start()


_background: list[threading.Thread] = []


def wait_for_background(timeout_s: float = 30.0) -> bool:
    for t in list(_background):
        t.join(timeout_s)
    return not any(t.is_alive() for t in _background)


def handle(runtime: Any, delivery_id: str) -> list[str]:
    """Execute the commands (or the approval label) of one stored delivery; returns outcomes."""
    try:
        with runtime.sessions() as s:
            delivery = s.get(Delivery, delivery_id)
            if delivery is None or delivery.payload is None:
                return []
            event, action, label, sender = delivery.event, delivery.action, delivery.label, delivery.sender
            pr, payload_text = delivery.pr_number, delivery.payload
        payload = json.loads(payload_text)
        if not isinstance(payload, dict):
            return []
        if event == "issue_comment":
            return handle_comment(runtime, delivery_id, payload)
        if event == "pull_request" and action == "labeled" and pr is not None:
            return handle_label(runtime, pr, label, sender)
    except Exception:  # a bug must not kill the worker; the delivery stays stored
        log.exception("command delivery %s failed", delivery_id)
    return []


# -- who may ---------------------------------------------------------------------------------
def permissions(runtime: Any) -> PermissionCache:
    cache = getattr(runtime, "_permission_cache", None)
    if cache is None:
        def fetch(repo: str, login: str) -> str:
            gh = runtime.github().client_for_repo(repo)
            return role_from_api(collaborator_permission(gh, repo, login))

        cache = PermissionCache(fetch)
        runtime._permission_cache = cache
    return cache


def check_permission(runtime: Any, login: str) -> Permission:
    trust = runtime.allowlist.get().trust
    try:
        return permissions(runtime).check(runtime.settings.upstream_repo, login, trust)
    except GitHubCallError as exc:
        log.warning("permission of %s not known: %s", login, exc.message)
        return Permission(login, "unknown", False)


# -- approval by label ----------------------------------------------------------------------------
def handle_label(runtime: Any, pr: int, label: str | None, sender: str | None) -> list[str]:
    trust = runtime.allowlist.get().trust
    if not trust.gating or label != trust.approval_label or not sender:
        return []
    if not check_permission(runtime, sender).allowed:
        log.info("PR #%s: approval label added by %s, who lacks write permission: ignored", pr, sender)
        return ["refused"]
    gh = runtime.github().client_for_repo(runtime.settings.upstream_repo)
    head = pull_head_sha(gh, runtime.settings.upstream_repo, pr)
    result = approval.release(runtime, pr, head, via="label")
    log.info("PR #%s approved by label from %s: released %s for %s", pr, sender, result.released, head[:12])
    return ["done"]


# -- comments ------------------------------------------------------------------------------
@dataclass
class Context:
    runtime: Any
    gh: Any
    pr: int
    login: str
    comment_id: int
    permission: Permission | None = None
    _head: str | None = None
    replies: list[str] = field(default_factory=list)

    def head(self) -> str:
        """The PR head SHA as GitHub has it now (read once per comment)."""
        if self._head is None:
            self._head = pull_head_sha(self.gh, self.runtime.settings.upstream_repo, self.pr)
        return self._head


def _comment_fields(runtime: Any, payload: dict[str, Any]) -> tuple[int, int, str, str] | None:
    if payload.get("action") != "created":
        return None
    issue, comment = payload.get("issue"), payload.get("comment")
    repo = (payload.get("repository") or {}).get("full_name") if isinstance(payload.get("repository"), dict) else None
    if not isinstance(issue, dict) or "pull_request" not in issue or not isinstance(comment, dict):
        return None  # a comment on an issue
    if not isinstance(repo, str) or repo.lower() != runtime.settings.upstream_repo.lower():
        return None
    user = comment.get("user") if isinstance(comment.get("user"), dict) else {}
    login, cid, number, body = user.get("login"), comment.get("id"), issue.get("number"), comment.get("body")
    if user.get("type") == "Bot" or not isinstance(login, str) or login.endswith("[bot]"):
        return None  # crcr's own replies (and other bots) never run commands
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**62 for v in (cid, number)):
        return None
    return cid, number, login[:100], body if isinstance(body, str) else ""


def handle_comment(runtime: Any, delivery_id: str, payload: dict[str, Any]) -> list[str]:
    fields = _comment_fields(runtime, payload)
    if fields is None:
        return []
    comment_id, pr, login, body = fields
    parsed = parse_comment(body)
    if not parsed:
        return []
    now = runtime.clock()
    upstream = runtime.settings.upstream_repo
    rows = [{"comment_id": comment_id, "position": i, "delivery_id": delivery_id, "repo": upstream, "pr_number": pr,
             "commenter": login, "command": p.name if p.valid else "invalid", "args": list(p.args), "outcome": RECEIVED,
             "created_at": now, "updated_at": now} for i, p in enumerate(parsed)]
    try:
        with runtime.write_lock, runtime.engine.begin() as conn:
            conn.execute(insert(Command), rows)
    except IntegrityError:
        log.info("comment %s on PR #%s was already handled", comment_id, pr)
        return []
    return _execute_comment(runtime, comment_id, pr, login, parsed, set(range(len(parsed))))


def _set(runtime: Any, comment_id: int, positions: set[int] | None, **values: Any) -> None:
    stmt = update(Command).where(Command.comment_id == comment_id)
    if positions is not None:
        stmt = stmt.where(Command.position.in_(sorted(positions)))
    with runtime.write_lock, runtime.engine.begin() as conn:
        conn.execute(stmt.values(updated_at=runtime.clock(), **values))


def _execute_comment(runtime: Any, comment_id: int, pr: int, login: str, parsed: list[Parsed],
                     positions: set[int]) -> list[str]:
    """Run the stored, not yet executed commands (``positions``) of one comment and answer."""
    upstream = runtime.settings.upstream_repo
    try:
        gh = runtime.github().client_for_repo(upstream)
    except Exception as exc:  # no App configured, or not installed upstream: say so in the stored outcome
        why = f"cannot talk to GitHub: {getattr(exc, 'message', None) or type(exc).__name__}"[:500]
        log.warning("comment %s on PR #%s not executed: %s", comment_id, pr, why)
        _set(runtime, comment_id, positions, outcome=FAILED, detail=why)
        return [FAILED] * len(positions)
    _react(gh, upstream, comment_id, "eyes")
    ctx = Context(runtime, gh, pr, login, comment_id)
    outcomes = []
    for position, p in enumerate(parsed):
        if position not in positions:
            continue
        outcome, detail = _execute(ctx, p)
        outcomes.append(outcome)
        runtime.metrics.commands.labels(p.name if p.valid else "invalid", outcome).inc()
        _set(runtime, comment_id, {position}, outcome=outcome, detail=detail[:4000], head_sha=ctx._head,
             permission=ctx.permission.role if ctx.permission else None)
    log.info("PR #%s comment %s by %s: %s", pr, comment_id, login, ", ".join(outcomes))
    _react(gh, upstream, comment_id, "rocket" if all(o == DONE for o in outcomes) else "confused")
    if ctx.replies:
        who = inert(login, 40) if LOGIN_RE.match(login) else "a commenter"
        text = f"Answer to comment {comment_id} by {who}:\n\n" + "\n\n---\n\n".join(ctx.replies)
        upsert_comment(runtime, gh, pr, "reply", text)
    return outcomes


STALE_AFTER = dt.timedelta(minutes=10)  # longer than any command takes (a select preview: 2 min per backend)


def sweep(runtime: Any, *, stale_after: dt.timedelta = STALE_AFTER, limit: int = 20) -> int:
    """Resume commands whose task was lost (a worker killed mid-way): rows still ``received``
    long after they were stored. Each comment is claimed by bumping ``updated_at`` in one
    conditional UPDATE, so two sweepers never both resume it. Returns how many comments."""
    cutoff = runtime.clock() - stale_after
    with runtime.sessions() as s:
        stale = list(s.execute(select(Command.comment_id, Command.delivery_id).where(
            Command.outcome == RECEIVED, Command.updated_at < cutoff).distinct().limit(limit)).all())
    resumed = 0
    for comment_id, delivery_id in stale:
        with runtime.write_lock, runtime.engine.begin() as conn:
            claimed = conn.execute(update(Command).where(
                Command.comment_id == comment_id, Command.outcome == RECEIVED, Command.updated_at < cutoff)
                .values(updated_at=runtime.clock())).rowcount
        if not claimed:
            continue
        with runtime.sessions() as s:
            delivery = s.get(Delivery, delivery_id)
            positions = set(s.scalars(select(Command.position).where(Command.comment_id == comment_id,
                                                                     Command.outcome == RECEIVED)))
            payload_text = delivery.payload if delivery is not None else None
        fields = _comment_fields(runtime, json.loads(payload_text)) if payload_text else None
        if fields is None:  # the payload was pruned: nothing to resume from
            _set(runtime, comment_id, None, outcome=FAILED, detail="lost before it ran; the comment is gone")
            continue
        log.info("resuming comment %s (its task was lost)", comment_id)
        _execute_comment(runtime, comment_id, fields[1], fields[2], parse_comment(fields[3]), positions)
        resumed += 1
    return resumed


def _react(gh: Any, repo: str, comment_id: int, content: str) -> None:
    try:
        add_reaction(gh, repo, comment_id, content)
    except GitHubCallError as exc:
        log.warning("reaction %s on comment %s not added: %s", content, comment_id, exc.message)


def _execute(ctx: Context, p: Parsed) -> tuple[str, str]:
    """Run one command; returns (outcome, detail) and adds what to say to ``ctx.replies``."""
    if not p.valid:
        valid = ", ".join(f"`{u}`" for u in USAGE.values())
        ctx.replies.append(f"Not run: {p.error}. Valid commands: {valid}.\n\n{help_text()}")
        return INVALID, p.error or "invalid"
    if p.name == "help":
        ctx.replies.append(help_text())
        return DONE, "help shown"
    if ctx.permission is None:
        ctx.permission = check_permission(ctx.runtime, ctx.login)
    if not ctx.permission.allowed:
        repo = ctx.runtime.settings.upstream_repo
        role = "could not be read" if ctx.permission.role == "unknown" else f"is {inert(ctx.permission.role, 20)}"
        ctx.replies.append(
            f"Sorry, `/ci {p.name}` needs write, maintain or admin permission on {repo} (or a place on the "
            f"relay's trusted list); the commenter's permission {role}. A maintainer can run it for you.")
        return REFUSED, f"permission {ctx.permission.role}"
    allow = ctx.runtime.allowlist.get()
    targets, unknown = resolve_backends(allow, p.args)
    if unknown:
        names = ", ".join(f"`{n}`" for n in valid_backend_names(allow))
        ctx.replies.append(f"Not run: `/ci {p.name}`: unknown backend `{inert(unknown[0], 60)}`. "
                           f"Valid backends: {names}.")
        return INVALID, f"unknown backend {unknown[0][:100]}"
    try:
        return _run(ctx, p, allow, targets)
    except GitHubCallError as exc:
        ctx.replies.append(f"`/ci {p.name}` failed: {inert(exc.message, 200)}. Try again later.")
        return FAILED, exc.message


def _run(ctx: Context, p: Parsed, allow: Any, targets: set[str] | None) -> tuple[str, str]:
    head = ctx.head()
    if p.name == "run":
        result = approval.release(ctx.runtime, ctx.pr, head, targets=targets, via="comment")
        if result.released:
            trust = allow.trust
            if targets is None and trust.gating:
                try:  # the approval stays visible on the PR until someone removes the label
                    add_labels(ctx.gh, ctx.runtime.settings.upstream_repo, ctx.pr, [trust.approval_label])
                except GitHubCallError as exc:
                    log.warning("PR #%s: approval label not added: %s", ctx.pr, exc.message)
            return DONE, f"released {', '.join(result.released)} for {head}"
        ctx.replies.append(f"`/ci run`: nothing is waiting for approval on {head[:12]}"
                           + (" for the named backends" if targets else "") + ". To run failed jobs again use `/ci retry`.")
        return DONE, f"nothing held for {head}"
    if p.name == "retry":
        done, without_check, refused = job_actions.retry_failed(ctx.runtime, ctx.pr, head, targets, ctx.login,
                                                                ctx.comment_id)
        if without_check or refused or not done:
            parts = [f"re-ran {', '.join(done)}" if done else f"nothing re-run on {head[:12]}"]
            if without_check:
                parts.append(f"no check run to re-run for {', '.join(without_check)} (only L3 with their label and L4 have one)")
            if refused:
                parts.append(f"not re-run: {', '.join(refused)} (the event no longer routes there)")
            ctx.replies.append("`/ci retry`: " + "; ".join(parts) + ".")
        return DONE, f"re-ran {', '.join(done) or 'nothing'}"
    if p.name == "cancel":
        summary = job_actions.cancel(ctx.runtime, ctx.gh, ctx.pr, targets, ctx.login)
        if summary.errors:
            ctx.replies.append("`/ci cancel`: " + summary.describe())
            return FAILED, summary.describe()
        return DONE, summary.describe()
    if p.name == "status":
        ctx.replies.append(job_actions.status_table(ctx.runtime, ctx.pr, head))
        return DONE, "status shown"
    if p.name == "select":
        text, ok = select_preview.preview(ctx.runtime, ctx.gh, ctx.pr, head, targets)
        ctx.replies.append(text)
        return (DONE if ok else FAILED), text[:500]
    return INVALID, "unreachable"


# -- naming backends ------------------------------------------------------------------------------
def valid_backend_names(allow: Any) -> list[str]:
    return sorted({*allow.devices(), *(t.repo for t in allow)})


def resolve_backends(allow: Any, args: tuple[str, ...]) -> tuple[set[str] | None, list[str]]:
    """Backend names -> target repos (None: all); device names cover their L3 repos, and a
    repo may be named by its repo part when that is unique. Returns (repos, unknown names)."""
    if not args:
        return None, []
    repos = {t.repo.lower(): t.repo for t in allow}
    short: dict[str, list[str]] = {}
    for t in allow:
        short.setdefault(t.repo.split("/", 1)[1].lower(), []).append(t.repo)
    devices = {d.lower(): rs for d, rs in allow.devices().items()}
    out: set[str] = set()
    unknown: list[str] = []
    for a in args:
        key = a.lower()
        if key in repos:
            out.add(repos[key])
        elif key in devices:
            out.update(devices[key])
        elif len(short.get(key, [])) == 1:
            out.add(short[key][0])
        else:
            unknown.append(a)
    return out, unknown


def commands_of(session: Any, *, pr: int | None = None, limit: int = 50) -> list[Command]:
    q = select(Command).order_by(Command.id.desc()).limit(limit)
    if pr is not None:
        q = q.where(Command.pr_number == pr)
    return list(session.scalars(q))
