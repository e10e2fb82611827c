"""Fingerprints: short stable hashes of normalised source.

Normalisation goes through the AST (``ast.dump`` without positions), so reformatting,
comments and line moves never change a fingerprint, while any change to code does.
The same function hashes both PyTorch versions of an upgrade, so digests compare.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable

DIGEST_CHARS = 16


def digest(*parts: str | bytes) -> str:
    """A short hex digest of ``parts`` (order matters, boundaries are kept)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:DIGEST_CHARS]


def normalised(node: ast.AST) -> str:
    """Source-independent text of a node: no positions, no comments, no layout."""
    return ast.dump(node, annotate_fields=True, include_attributes=False)


def node_fingerprint(node: ast.AST) -> str:
    return digest(normalised(node))


def combine(parts: Iterable[str | None]) -> str:
    """Fingerprint of a test from its source and OpInfo fingerprints (missing parts count as empty)."""
    return digest(*[p or "" for p in parts])
