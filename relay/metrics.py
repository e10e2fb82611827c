"""Prometheus metrics of the relay (served on ``/metrics``).

Each app gets its own ``CollectorRegistry`` (tests build many apps in one process);
the callbacks module increments ``callbacks`` through ``request.app.state.metrics``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class RelayMetrics:
    """The relay's counters; one instance per app or worker process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.deliveries = Counter("crcr_deliveries", "Webhook deliveries received, by event and outcome",
                                  ["event", "outcome"], registry=r)
        self.dispatches = Counter("crcr_dispatches", "Dispatch attempts, by kind and result",
                                  ["kind", "result"], registry=r)
        self.dispatch_failures = Counter("crcr_dispatch_failures", "Failed dispatch attempts, by reason",
                                         ["reason"], registry=r)
        self.dispatch_latency = Histogram("crcr_dispatch_latency_seconds",
                                          "From webhook received to dispatch sent", buckets=LATENCY_BUCKETS,
                                          registry=r)
        self.intake_batch = Histogram("crcr_intake_batch_deliveries",
                                      "Deliveries stored per intake transaction (group commit)",
                                      buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=r)
        self.callbacks = Counter("crcr_callbacks", "Callbacks received, by outcome", ["outcome"], registry=r)
        self.queue_depth = Gauge("crcr_queue_depth", "Tasks waiting in the queue", registry=r)
        self.dispatch_rows = Gauge("crcr_dispatch_rows", "Dispatch rows by state", ["state"], registry=r)
        # trust gating and /ci commands (relay/approval.py, relay/command_actions.py); the rows
        # waiting right now are crcr_dispatch_rows{state="awaiting"}
        self.held = Counter("crcr_held_targets", "Targets an untrusted PR was held back from (awaiting approval)",
                            registry=r)
        self.approvals = Counter("crcr_approvals", "Held targets released by approval, by how", ["via"], registry=r)
        self.commands = Counter("crcr_commands", "PR comment commands, by command and outcome",
                                ["command", "outcome"], registry=r)
        self._collectors: list[Callable[[], None]] = []
        self._delivery_children: dict[tuple[str, str], Any] = {}

    def delivery(self, event: str, outcome: str) -> Any:
        """``deliveries.labels(event, outcome)``, kept: the lookup and its lock cost the hot path ~3 us."""
        child = self._delivery_children.get((event, outcome))
        if child is None:
            child = self._delivery_children[(event, outcome)] = self.deliveries.labels(event, outcome)
        return child

    def on_collect(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` (which sets gauges) each time /metrics is scraped."""
        self._collectors.append(fn)

    def render(self) -> bytes:
        for fn in self._collectors:
            try:
                fn()
            except Exception:  # noqa: S110 - a gauge that cannot be read must not break the scrape
                pass
        return generate_latest(self.registry)
