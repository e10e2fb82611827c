"""Pick signals: each one small class behind ``selector.signals.base.Signal``.

Counted in this order (the order only matters for reading; scores add up):
edited-test, op-touched, import-graph, coverage, mentioned, failure-history, path-keyword.
"""

from __future__ import annotations

from selector.signals.base import Change, Hit, Signal, Universe
from selector.signals.coverage import CoverageSignal
from selector.signals.edited import EditedTests
from selector.signals.history import FailureHistory
from selector.signals.imports import ImportGraphSignal
from selector.signals.keywords import PathKeywords
from selector.signals.mentioned import Mentioned
from selector.signals.ops import OpsTouched

DEFAULT_SIGNALS: tuple[Signal, ...] = (EditedTests(), OpsTouched(), ImportGraphSignal(), CoverageSignal(), Mentioned(),
                                       FailureHistory(), PathKeywords())
SIGNAL_NAMES = tuple(s.name for s in DEFAULT_SIGNALS)

__all__ = ["DEFAULT_SIGNALS", "SIGNAL_NAMES", "Change", "Hit", "Signal", "Universe"]
