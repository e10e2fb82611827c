"""Reading results back: summaries for the terminal and the callback's failed-test list."""

from __future__ import annotations

from crcr.contracts.callback import MAX_FAILED_TESTS
from crcr.contracts.results import RunResults


def summary_line(results: RunResults) -> str:
    """``12 passed, 1 failed, 3 skipped ...`` in pytest's order, zero counts left out."""
    counts = results.counts()
    order = ("failed", "error", "passed", "flaky", "skipped", "xfailed", "xpassed")
    parts = [f"{counts[o]} {o}" for o in order if counts.get(o)]
    return ", ".join(parts) if parts else "no tests ran"


def failed_test_ids(results: RunResults, limit: int = MAX_FAILED_TESTS) -> list[str]:
    """Ids of failed, errored and strict-xpassed tests, at most ``limit`` (the callback's cap)."""
    return [t.id for t in results.failed()][:limit]
