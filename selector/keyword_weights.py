"""Path-keyword weights learned from how often each keyword was right.

On cases with known failing files, a keyword ``w`` of a changed (non-test) path that is a
whole word of a candidate test file's path is *right* for that file when the file failed.
Its weight is the smoothed share of right matches (precision), pulled towards the pooled
precision of all keywords when a keyword was seen rarely::

    weight(w) = (right(w) + STRENGTH * pooled) / (matched(w) + STRENGTH)

The pooled precision is stored under ``"*"`` and stands for keywords never seen. A
keyword that matches forty files when one of them fails gets about 1/40; one that always
points at the failing file gets close to 1.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from selector.errors import SelectorInputError
from selector.signals.keywords import words

STRENGTH = 2.0
POOLED = "*"
VERSION = 1


def changed_words(paths: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for p in paths:
        if not p.startswith("test/"):
            out |= words(p)
    return out


def learn(cases: Iterable[tuple[list[str], list[str], list[str] | None]], files: Iterable[str]) -> dict[str, float]:
    """Keyword -> weight from (changed paths, failing files, files whose outcome is known) over the candidate
    test files. Only a file whose outcome the case knows can make a keyword right or wrong: a mutation case
    ran a fixed set of upstream files, and a keyword that matches only files outside it learns nothing there
    (``None``: every file's outcome is known, as in upstream CI)."""
    file_words = {f: words(f.removeprefix("test/")) for f in sorted(files)}
    right: Counter[str] = Counter()
    matched: Counter[str] = Counter()
    for paths, failing, known in cases:
        changed = changed_words(paths)
        bad = set(failing)
        seen = set(known) if known is not None else None
        for f, fw in file_words.items():
            if seen is not None and f not in seen:
                continue
            for w in changed & fw:
                matched[w] += 1
                right[w] += f in bad
    total = sum(matched.values())
    if not total:
        return {}
    pooled = sum(right.values()) / total
    out = {w: max(1e-4, round((right[w] + STRENGTH * pooled) / (matched[w] + STRENGTH), 4)) for w in sorted(matched)}
    out[POOLED] = max(1e-4, round(pooled, 4))
    return out


def save(path: Path, weights: dict[str, float], learned_from: str) -> None:
    from crcr.fileio import atomic_write_text

    data = {"version": VERSION, "learned_from": learned_from, "strength": STRENGTH, "weights": weights}
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def load(path: Path) -> dict[str, float]:
    """The weights of a file written by ``save``; an unreadable file is an input error, never a traceback."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
        weights = data["weights"]
        if data.get("version") != VERSION or not isinstance(weights, dict):
            raise ValueError(f"version {data.get('version')!r}")
        out = {str(k): float(v) for k, v in weights.items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SelectorInputError(f"keyword weights {path}: not readable ({exc})",
                                 hint="write them with crcr select evaluate --write-keyword-weights") from None
    if any(not 0.0 <= v <= 1.0 for v in out.values()):
        raise SelectorInputError(f"keyword weights {path}: weights must lie in [0, 1]")
    return out
