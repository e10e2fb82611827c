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


def plan_line(results: RunResults) -> str:
    """``planned 450 (98 by a file's default), unplanned 12 (skipped: --unplanned skip), run 430``."""
    counts = results.run.plan_counts
    ran = results.ran()
    if counts is None:
        return f"run {ran} of {len(results.tests)} tests (no plan counts recorded)"
    planned = f"planned {counts.planned}" + (f" ({counts.by_default} by a file's default)" if counts.by_default else "")
    if counts.unplanned and counts.planned == 0 and counts.unplanned_policy == "run" and not results.run.plan_digest:
        unplanned = f"unplanned {counts.unplanned} (no --plan: every collected test runs)"
    elif counts.unplanned:
        files = ", ".join(list(counts.unplanned_files)[:3]) + (", ..." if len(counts.unplanned_files) > 3 else "")
        verb = "run" if counts.unplanned_policy == "run" else "skipped"
        unplanned = f"unplanned {counts.unplanned} ({verb} under --unplanned {counts.unplanned_policy}: {files})"
    else:
        unplanned = "unplanned 0"
    line = f"{planned}, {unplanned}, run {ran}"
    if ran == 0 and results.tests:
        line += " - nothing ran, so the run is not green"
    return line
