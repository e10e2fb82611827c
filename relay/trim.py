"""Fit a ``client_payload`` under GitHub's 64 KB limit, deterministically.

The largest removable value goes first (ties: the smaller JSON pointer first), and is
replaced by ``null`` so array indexes and the other pointers stay valid. Fields a
downstream needs to know what happened (action, numbers, SHAs, refs, repo names,
labels, sender) are never removed; neither are their ancestors. The removed pointers
(RFC 6901, relative to ``client_payload``) are listed in ``crcr_trimmed``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from crcr.contracts.dispatch import MAX_CLIENT_PAYLOAD_BYTES

# pointers below /payload that identify the event; kept whatever their size
PROTECTED = (
    "/action", "/number", "/ref", "/before", "/after", "/label/name",
    "/pull_request/number", "/pull_request/head/sha", "/pull_request/head/ref",
    "/pull_request/head/repo/full_name", "/pull_request/base/sha", "/pull_request/base/ref",
    "/pull_request/user/login", "/pull_request/author_association", "/pull_request/merged",
    "/pull_request/labels", "/repository/full_name", "/sender/login", "/head_commit/id",
)


def encoded_size(obj: Any) -> int:
    """Bytes of ``obj`` as an HTTP client sends it (``json.dumps`` defaults, ASCII-escaped)."""
    return len(json.dumps(obj).encode("utf-8"))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _protected_set() -> set[str]:
    keep = set()
    for p in PROTECTED:
        parts = p.split("/")[1:]
        for i in range(1, len(parts) + 1):
            keep.add("/payload/" + "/".join(parts[:i]))
    keep.add("/payload")
    return keep


_KEEP = _protected_set()


def _sizes(node: Any, pointer: str, out: list[tuple[int, str, Any, Any]], parent: Any, key: Any) -> int:
    """Post-order walk collecting (size, pointer, parent, key) of every removable value."""
    if isinstance(node, dict):
        size = 2 + sum(len(json.dumps(k)) + 2 + _sizes(v, f"{pointer}/{_escape(str(k))}", out, node, k) + 2
                       for k, v in node.items())
    elif isinstance(node, list):
        size = 2 + sum(_sizes(v, f"{pointer}/{i}", out, node, i) + 2 for i, v in enumerate(node))
    else:
        size = len(json.dumps(node))
    if node is not None and pointer not in _KEEP and not (
        # a protected pointer's subtree is kept whole (e.g. the labels list)
        any(pointer.startswith(k + "/") for k in _KEEP_LEAVES)
    ):
        out.append((size, pointer, parent, key))
    return size


_KEEP_LEAVES = tuple("/payload" + p for p in PROTECTED)


def trim_client_payload(client_payload: dict[str, Any], limit: int = MAX_CLIENT_PAYLOAD_BYTES
                        ) -> tuple[dict[str, Any], list[str]]:
    """Return (payload that fits in ``limit`` bytes, pointers removed). Input is not modified."""
    if encoded_size(client_payload) <= limit:
        return client_payload, []
    cp = copy.deepcopy(client_payload)
    removed: list[str] = []
    cp["crcr_trimmed"] = removed
    while encoded_size(cp) > limit:
        candidates: list[tuple[int, str, Any, Any]] = []
        _sizes(cp.get("payload"), "/payload", candidates, None, None)
        candidates = [c for c in candidates if c[2] is not None and c[0] > 4]
        if not candidates:
            break  # only protected fields are left; the caller reports what is still too big
        _size, pointer, parent, key = min(candidates, key=lambda c: (-c[0], c[1]))
        parent[key] = None
        removed.append(pointer)
    return cp, removed
