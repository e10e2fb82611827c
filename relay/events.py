"""What a webhook is and who should receive it.

``describe`` pulls the fields crcr stores out of a payload (defensively: the payload
is untrusted and may lack anything). ``route`` decides, from the allowlist, which
targets get a dispatch row, or why the event is ignored:

- ``pull_request`` opened / reopened / synchronize / closed: every target whose
  event and path filters accept it (a PR webhook carries no file list, so path
  filters never drop PR events; see docs/relay.md);
- ``pull_request`` labeled with ``ciflow/crcr/<device>``: no dispatch (as CRCR); the
  label creates or backfills that device's check runs (``relay.checks.on_device_label``);
- ``push``: every target, path filters applied to the commits' added/modified/removed;
- everything else (other actions, other labels, other events): recorded as ignored.

With trust gating on (any ``crcr:`` section; a plain CRCR allowlist dispatches every
author, as CRCR does), PRs whose author is untrusted (``author_association`` in
``untrusted_associations``) and that do not carry the approval label go only to
targets that opt in with ``untrusted: true``; the others are ``skipped`` (intake
stores them as ``awaiting`` approval, relay/approval.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_core import SchemaValidator, ValidationError
from pydantic_core import core_schema as cs

from relay.allowlist import Allowlist, Target

PR_ACTIONS = ("opened", "reopened", "synchronize", "closed")
LABEL_PREFIX = "ciflow/crcr/"
MERGED_LABEL = "Merged"  # PyTorch's merge bot closes PRs without a native merge and adds this label


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _str(v: Any, limit: int) -> str | None:
    return v[:limit] if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and -(2**31) < v < 2**31 else None


@dataclass
class EventInfo:
    event: str
    action: str | None = None
    repo: str | None = None
    pr_number: int | None = None
    head_sha: str | None = None
    ref: str | None = None
    labels: list[str] = field(default_factory=list)
    label: str | None = None
    sender: str | None = None
    author_association: str | None = None
    changed_paths: list[str] | None = None  # None: not known from the payload

    @property
    def merged(self) -> bool:
        """Landed, natively or by PyTorch's merge bot (closed + ``Merged`` label)."""
        return self.action == "closed" and MERGED_LABEL in self.labels


def describe(event: str, payload: dict[str, Any]) -> EventInfo:
    """The stored fields of a webhook; missing or odd-typed fields become None."""
    info = EventInfo(event=event[:64])
    info.action = _str(payload.get("action"), 64)
    info.repo = _str(_get(payload, "repository", "full_name"), 200)
    info.sender = _str(_get(payload, "sender", "login"), 100)
    pr = payload.get("pull_request") if event == "pull_request" else None
    if event == "pull_request" and isinstance(pr, dict):
        info.pr_number = _int(pr.get("number")) or _int(payload.get("number"))
        info.head_sha = _str(_get(pr, "head", "sha"), 64)
        info.ref = _str(_get(pr, "head", "ref"), 255)
        labels = pr.get("labels")
        if isinstance(labels, list):
            info.labels = [n[:255] for n in (_get(x, "name") for x in labels) if isinstance(n, str)][:100]
        info.author_association = _str(pr.get("author_association"), 40)
        info.label = _str(_get(payload, "label", "name"), 255)
    elif event == "push":
        info.head_sha = _str(payload.get("after"), 64)
        info.ref = _str(payload.get("ref"), 255)
        commits = payload.get("commits")
        if isinstance(commits, list):
            paths: set[str] = set()
            for c in commits:
                for key in ("added", "modified", "removed"):
                    for p in _get(c, key) or []:
                        if isinstance(p, str):
                            paths.add(p)
            # GitHub lists at most 2048 commits (and trims file lists): unknown beyond that
            info.changed_paths = sorted(paths) if len(commits) < 2048 else None
    elif event in ("issue_comment", "check_run"):
        issue = payload.get("issue")
        info.pr_number = _int(_get(issue, "number")) if isinstance(issue, dict) and "pull_request" in issue else None
        info.head_sha = _str(_get(payload, "check_run", "head_sha"), 64)
    return info


def _fields(**nested: Any) -> dict[str, Any]:
    """A JSON object schema: each name optional, read as any JSON (``None``) or as a nested object."""
    return cs.typed_dict_schema({
        name: cs.typed_dict_field(cs.any_schema() if sub is None else _fields(**sub), required=False)
        for name, sub in nested.items()
    })


# Everything ``describe`` reads, and nothing else (tests/relay/test_routing_view.py holds them together)
_ROUTING_VALIDATOR = SchemaValidator(_fields(
    action=None, number=None, after=None, ref=None, commits=None,
    repository={"full_name": None}, sender={"login": None}, label={"name": None},
    pull_request={"number": None, "head": {"sha": None, "ref": None}, "labels": None, "author_association": None},
    issue={"number": None, "pull_request": None}, check_run={"head_sha": None},
))


def routing_view(body: bytes) -> dict[str, Any] | None:
    """The fields of a JSON webhook body that ``describe`` reads, or None (the caller parses it whole).

    A 23 KB ``pull_request`` payload is ~600 JSON values, of which routing reads about
    ten: pydantic-core's parser validates the whole document but builds Python objects
    only for these (10 us instead of orjson's 25 us, and far fewer objects to free). It
    answers only for a body the full parser would accept with the same values: anything
    it refuses (not JSON, not an object, one of the read fields an object of the wrong
    shape, a lone surrogate, nesting deeper than 200, any other
    encoding than UTF-8) returns None and goes to the full parser, which gives the
    answer it always gave. ``describe(event, routing_view(body))`` equals
    ``describe(event, json.loads(body))`` whenever the view is not None.
    """
    try:
        return _ROUTING_VALIDATOR.validate_json(body)
    except ValidationError:
        return None


@dataclass
class Route:
    targets: list[Target]
    ignored_reason: str | None = None
    skipped: list[str] = field(default_factory=list)  # targets left out for an untrusted author
    device: str | None = None  # the device of a ciflow/crcr/<device> label


def route(info: EventInfo, allow: Allowlist, *, upstream_repo: str) -> Route:
    """Which targets get a dispatch row for this event (or why none)."""
    if info.event not in ("pull_request", "push"):
        return Route([], f"event {info.event!r} is not dispatched")
    if info.repo is not None and info.repo.lower() != upstream_repo.lower():
        return Route([], f"event from {info.repo}, not from the upstream repository {upstream_repo}")
    if info.repo is None:
        return Route([], "payload names no repository")
    device = None
    if info.event == "pull_request":
        if info.action == "labeled":
            if not info.label or not info.label.startswith(LABEL_PREFIX):
                return Route([], f"label {info.label!r} is not a {LABEL_PREFIX}<device> label")
            device = info.label[len(LABEL_PREFIX):]
            if not allow.devices().get(device):
                return Route([], f"no L3 repository is registered for device {device!r}", device=device)
            # as CRCR: the label only creates or backfills check runs (relay.checks), never a second run
            return Route([], f"label {info.label} creates or backfills check runs only (no dispatch)", device=device)
        elif info.action in PR_ACTIONS:
            candidates = list(allow)
        else:
            return Route([], f"pull_request action {info.action!r} is not forwarded")
    else:  # push
        candidates = list(allow)
    chosen = [t for t in candidates if t.wants_event(info.event, info.action) and t.wants_paths(info.changed_paths)]
    skipped: list[str] = []
    # trust gating (relay/trust.py): off for a plain CRCR allowlist; the approval label lifts it
    if info.event == "pull_request" and allow.trust.author_untrusted(info.author_association, info.labels):
        skipped = [t.repo for t in chosen if not t.untrusted]
        chosen = [t for t in chosen if t.untrusted]
    if not chosen:
        if skipped:
            why = f"author is untrusted ({info.author_association}); no target opts in to untrusted code"
        else:
            why = "no allowlisted target accepts this event (event or path filters)"
        return Route([], why, skipped=skipped, device=device)
    return Route(chosen, None, skipped=skipped, device=device)
