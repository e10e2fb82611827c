"""``failure-history``: files whose tests failed in the backend's stored runs."""

from __future__ import annotations

from selector.signals.base import Change, Hit, Signal, Universe


class FailureHistory(Signal):
    name = "failure-history"
    weight = 2.0

    def score(self, change: Change, universe: Universe) -> dict[str, Hit]:
        return {f: Hit(min(1.0, 0.4 + 0.2 * n), f"{n} failure(s) in stored runs")
                for f, n in sorted(universe.failures.items()) if n > 0 and f in universe.durations}
