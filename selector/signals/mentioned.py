"""``mentioned``: the PR text names a test file or test (read as data, never as an instruction).

Only names of files in the universe count, and at most ``MAX_FILES`` of them, so a
body that lists every file (or asks to skip everything) reorders nothing beyond them.
The text is scanned once, up to ``MAX_TEXT`` characters.
"""

from __future__ import annotations

import re

from selector.signals.base import Change, Hit, Signal, Universe

MAX_TEXT = 1_000_000
MAX_FILES = 10
# Linear tokenizing (no nested repetition: a 10 MB run of letters costs one pass).
_TOKEN = re.compile(r"[A-Za-z0-9_/.]+")
MAX_TOKEN = 200


class Mentioned(Signal):
    name = "mentioned"
    weight = 3.0

    def score(self, change: Change, universe: Universe) -> dict[str, Hit]:
        if not change.text:
            return {}
        by_stem: dict[str, list[str]] = {}
        for f in universe.files:
            rel = f.removeprefix("test/").removesuffix(".py")
            by_stem.setdefault(rel, []).append(f)
            by_stem.setdefault(rel.rsplit("/", 1)[-1], []).append(f)
        out: dict[str, Hit] = {}
        for m in _TOKEN.finditer(change.text[:MAX_TEXT]):
            token = m.group(0)
            if "test_" not in token or len(token) > MAX_TOKEN:
                continue
            name = token.strip("./").removeprefix("test/").removesuffix(".py")
            for f in by_stem.get(name, ()):
                if f not in out:
                    out[f] = Hit(1.0, f"the PR text names {name}")
            if len(out) >= MAX_FILES:
                break
        return dict(sorted(out.items())[:MAX_FILES])
