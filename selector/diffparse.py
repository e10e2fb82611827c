"""Unified diffs (``git diff``) parsed into what pick needs: files, hunks, changed text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@ ?(.*)$")
MAX_DIFF_BYTES = 64 * 1024 * 1024


@dataclass
class Hunk:
    start: int
    length: int
    context: str  # the function header git shows after @@
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    edited_defs: set[str] = field(default_factory=set)  # functions enclosing a changed line
    _last_def: str | None = None


@dataclass
class FileDiff:
    path: str
    hunks: list[Hunk] = field(default_factory=list)

    def changed_text(self) -> list[str]:
        return [h.context for h in self.hunks] + [line for h in self.hunks for line in h.added + h.removed]


def parse_diff(text: str) -> list[FileDiff]:
    files: list[FileDiff] = []
    current: FileDiff | None = None
    hunk: Hunk | None = None
    old_path = None
    for line in text.splitlines():
        if line.startswith("diff --git "):
            current, hunk, old_path = None, None, None
            continue
        if line.startswith("--- "):
            old_path = line[4:].strip()
            old_path = old_path[2:] if old_path.startswith("a/") else old_path
            continue
        if line.startswith("+++ "):
            path = line[4:].strip()
            path = path[2:] if path.startswith("b/") else path
            if path == "/dev/null" and old_path:
                path = old_path
            current = FileDiff(path)
            files.append(current)
            hunk = None
            continue
        m = _HUNK.match(line)
        if m and current is not None:
            hunk = Hunk(int(m.group(1)), int(m.group(2) or 1), m.group(3))
            d = _DEF.match(m.group(3))
            hunk._last_def = d.group(1) if d else None
            current.hunks.append(hunk)
            continue
        if hunk is None:
            continue
        body = line[1:]
        d = _DEF.match(body)
        if d:
            hunk._last_def = d.group(1)
        if line.startswith("+"):
            hunk.added.append(body)
        elif line.startswith("-"):
            hunk.removed.append(body)
        else:
            continue
        if hunk._last_def:
            hunk.edited_defs.add(hunk._last_def)
    return files
