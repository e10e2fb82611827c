"""``path-keyword``: a word of a changed path is a whole word of the test file's path.

The weakest signal, counted last: each keyword's score is how often it was right
(``Universe.keyword_weights``, e.g. measured by ``crcr select evaluate``), default 0.5.
Whole-word matching keeps ``torch/utils/data`` away from ``_softmax_backward_data``.
"""

from __future__ import annotations

import re

from selector.signals.base import Change, Hit, Signal, Universe

DEFAULT_WEIGHT = 0.5
STOP = frozenset({"test", "tests", "torch", "src", "aten", "native", "py", "cpp", "h", "cu", "cuh", "internal",
                  "testing", "common", "utils", "init", "the", "and", "csrc", "impl", "cpu", "cuda", "ops",
                  "functional", "util", "base", "core", "api", "python", "include", "lib", "tools", "yaml"})
_SPLIT = re.compile(r"[/._\-]")


def words(path: str) -> set[str]:
    return {w.lower() for w in _SPLIT.split(path) if len(w) > 2 and not w.isdigit()} - STOP


class PathKeywords(Signal):
    name = "path-keyword"
    weight = 1.0

    def score(self, change: Change, universe: Universe) -> dict[str, Hit]:
        changed: set[str] = set()
        for p in change.paths:
            if not p.startswith("test/"):
                changed |= words(p)
        if not changed:
            return {}
        out: dict[str, Hit] = {}
        for f in universe.files:
            hit = sorted(changed & words(f.removeprefix("test/")))
            if hit:
                best = max(hit, key=lambda w: (universe.keyword_weights.get(w, DEFAULT_WEIGHT), w))
                out[f] = Hit(universe.keyword_weights.get(best, DEFAULT_WEIGHT), f"path keyword {best!r}")
        return out
