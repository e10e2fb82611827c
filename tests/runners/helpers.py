"""Helpers for the runners' tests: call the real ``crcr`` CLI in-process, read pytest's counts."""

from __future__ import annotations

import re
from pathlib import Path

from crcr.cli.main import main

FIXTURE_TREE = Path(__file__).resolve().parent.parent / "fixtures" / "pytorch_tree"


def crcr(*args: str) -> int:
    """Run ``crcr ARGS``; return its exit status (0 when it returns normally)."""
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


_COUNT = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)")


def summary_counts(log: Path) -> dict[str, int]:
    """The counts of pytest's own final summary line(s) in a pytest log (summed over restarts)."""
    totals: dict[str, int] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if re.search(r" in [\d.]+s", line) and _COUNT.search(line):
            for number, word in _COUNT.findall(line):
                key = "error" if word.startswith("error") else word
                totals[key] = totals.get(key, 0) + int(number)
    return totals

