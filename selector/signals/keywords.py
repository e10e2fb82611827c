"""``path-keyword``: a word of a changed path is a whole word of the test file's path.

The weakest signal, counted last: each keyword's score is how often it was right
(``Universe.keyword_weights``, learned by ``selector.keyword_weights`` from cases with known
failing files); a keyword never seen scores the pooled precision (``"*"``), and 0.5 when
no weights were learned at all.
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
        learned = universe.keyword_weights
        default = learned.get("*", DEFAULT_WEIGHT)
        out: dict[str, Hit] = {}
        for f in universe.files:
            hit = sorted(changed & words(f.removeprefix("test/")))
            if hit:
                best = max(hit, key=lambda w: (learned.get(w, default), w))
                weight = learned.get(best, default)
                if weight > 0:
                    how = "right" if best in learned else "pooled, keyword not seen"
                    out[f] = Hit(min(1.0, weight), f"path keyword {best!r} ({how} {weight:.0%} of the time)")
        return out
