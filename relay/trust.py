"""Who is trusted: PR authors (trust gating) and commenters (``/ci`` commands).

Configured under the allowlist's ``crcr.trust`` key (docs/configuration.md)::

    crcr:
      trust:
        gating: true                    # default: on when a crcr: section exists
        untrusted_associations: [FIRST_TIME_CONTRIBUTOR, FIRST_TIMER, NONE]
        trusted_users: [alice]          # may run commands without repo permission
        approval_label: crcr/ok-to-test # the visible approval on a PR
        permission_cache_s: 60

A plain CRCR allowlist (no ``crcr:`` key) has gating off: every PR goes everywhere,
as upstream does. With gating on, a PR whose ``author_association`` is untrusted goes
only to targets with ``untrusted: true`` until it carries the approval label; the
other targets are stored as ``awaiting`` dispatches (relay/approval.py).

Commenters need write, maintain or admin on the upstream repository, read through
``GET /repos/{o}/{r}/collaborators/{user}/permission`` and cached for
``permission_cache_s``, or a name in ``trusted_users``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crcr.errors import ConfigError

DEFAULT_UNTRUSTED = ("FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE")
DEFAULT_APPROVAL_LABEL = "crcr/ok-to-test"
TRUST_KEYS = {"gating", "untrusted_associations", "trusted_users", "approval_label", "permission_cache_s"}
LOGIN_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")  # GitHub logins (bots end in [bot]: never trusted here)
WRITE_ROLES = frozenset({"admin", "maintain", "write"})


@dataclass(frozen=True)
class TrustConfig:
    gating: bool = False
    untrusted_associations: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_UNTRUSTED))
    trusted_users: frozenset[str] = frozenset()  # lower-case logins
    approval_label: str = DEFAULT_APPROVAL_LABEL
    permission_cache_s: float = 60.0

    def author_untrusted(self, association: str | None, labels: list[str] | None) -> bool:
        """True when gating holds this PR back: untrusted author and no approval label on it."""
        if not self.gating:
            return False
        if (association or "").upper() not in self.untrusted_associations:
            return False
        return self.approval_label not in (labels or [])

    def trusted_user(self, login: str | None) -> bool:
        return bool(login) and login.lower() in self.trusted_users  # type: ignore[union-attr]


def _bad(where: str, what: str) -> ConfigError:
    return ConfigError(f"allowlist crcr.trust{where}: {what}", hint="see docs/configuration.md#trust-gating-and-ci-commands")


def parse_trust(spec: Any, *, has_crcr_section: bool, legacy_untrusted: Any = None) -> TrustConfig:
    """``crcr.trust`` of the allowlist (``legacy_untrusted``: the older ``crcr.untrusted_associations``)."""
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise _bad("", "expected a mapping")
    unknown = sorted(set(spec) - TRUST_KEYS)
    if unknown:
        raise _bad("", f"unknown keys {unknown}; known: {sorted(TRUST_KEYS)}")
    gating = spec.get("gating", has_crcr_section)
    if not isinstance(gating, bool):
        raise _bad(".gating", "must be true or false")
    assoc = spec.get("untrusted_associations", legacy_untrusted if legacy_untrusted is not None else list(DEFAULT_UNTRUSTED))
    if not isinstance(assoc, list) or not all(isinstance(a, str) for a in assoc):
        raise _bad(".untrusted_associations", "expected a list of author_association values")
    users = spec.get("trusted_users", [])
    if not isinstance(users, list) or not all(isinstance(u, str) and LOGIN_RE.match(u) for u in users):
        raise _bad(".trusted_users", "expected a list of GitHub logins")
    label = spec.get("approval_label", DEFAULT_APPROVAL_LABEL)
    if not isinstance(label, str) or not 1 <= len(label) <= 50 or label.startswith("ciflow/crcr/"):
        raise _bad(".approval_label", "expected a label name of 1..50 characters (not a ciflow/crcr/ label)")
    ttl = spec.get("permission_cache_s", 60)
    if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 0 <= ttl <= 3600:
        raise _bad(".permission_cache_s", "expected seconds between 0 and 3600")
    return TrustConfig(gating=gating, untrusted_associations=frozenset(a.upper() for a in assoc),
                       trusted_users=frozenset(u.lower() for u in users), approval_label=label,
                       permission_cache_s=float(ttl))


@dataclass(frozen=True)
class Permission:
    """What a commenter may do: ``role`` as GitHub names it (or ``trusted-list``)."""

    login: str
    role: str
    allowed: bool


class PermissionCache:
    """Commenter permissions on the upstream repo, asked of GitHub and kept briefly.

    ``fetch(repo, login)`` returns GitHub's ``role_name`` (or ``permission``); it may
    raise, in which case nothing is cached and the caller refuses politely.
    """

    def __init__(self, fetch: Callable[[str, str], str], *, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[str, float]] = {}
        self.lookups = 0  # API calls made (tests and metrics)

    def check(self, repo: str, login: str, trust: TrustConfig) -> Permission:
        if trust.trusted_user(login):
            return Permission(login, "trusted-list", True)
        if not LOGIN_RE.match(login or ""):  # bots ("name[bot]") and odd names never get write access here
            return Permission(login, "none", False)
        key = (repo.lower(), login.lower())
        now = self._clock()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and now - hit[1] < trust.permission_cache_s:
            role = hit[0]
        else:
            role = self._fetch(repo, login)
            self.lookups += 1
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[key] = (role, now)
        return Permission(login, role, role in WRITE_ROLES)


def role_from_api(body: Any) -> str:
    """GitHub's answer to the permission endpoint: ``role_name`` is exact (maintain, triage),
    ``permission`` folds maintain into write and triage into read."""
    if not isinstance(body, dict):
        return "none"
    role = body.get("role_name") if isinstance(body.get("role_name"), str) else None
    perm = body.get("permission") if isinstance(body.get("permission"), str) else None
    if role in WRITE_ROLES or perm in ("admin", "write"):
        return role if role in WRITE_ROLES else perm  # type: ignore[return-value]
    return (role or perm or "none")[:20]
