"""Counters of simulated work, and ``profile()`` which collects them per op.

Every kernel executes (or, for costing, merely enumerates) the tiles of its plan; each
tile carries its own cycles, bytes moved, sticks, MACs and scratchpad use. An op's
record is the sum over its tiles, except ``cycles`` (the op's latency: the busiest
core's sum, since cores run in parallel), ``tiles_per_core`` (the most tiles any core
ran) and ``peak_scratchpad_bytes`` (the largest tile footprint). Tiles are double
buffered: a tile costs max(compute, load) cycles, plus, once per core, the first tile's
load, which nothing hides.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class TileCost:
    """What one tile costs on the core that runs it."""

    core: int
    cycles: int
    bytes_moved: int
    sticks: int
    scratchpad_bytes: int
    macs: int = 0
    # the tile's load time; the first tile of a core cannot hide it behind compute
    dma_cycles: int = 0


@dataclass
class OpRecord:
    """Counters of one executed op (one aten call)."""

    op: str
    cycles: int = 0
    core_cycles: int = 0
    bytes_moved: int = 0
    sticks: int = 0
    macs: int = 0
    tiles: int = 0
    cores_used: int = 0
    tiles_per_core: int = 0
    peak_scratchpad_bytes: int = 0
    fallback: bool = False

    @classmethod
    def from_tiles(cls, op: str, tiles: Iterable[TileCost], *, extra_cycles: int = 0) -> OpRecord:
        rec = cls(op=op)
        per_core_cycles: dict[int, int] = {}
        per_core_tiles: dict[int, int] = {}
        for t in tiles:
            if t.core not in per_core_cycles:
                per_core_cycles[t.core] = t.dma_cycles  # prologue: the first load
            rec.tiles += 1
            rec.core_cycles += t.cycles
            rec.bytes_moved += t.bytes_moved
            rec.sticks += t.sticks
            rec.macs += t.macs
            rec.peak_scratchpad_bytes = max(rec.peak_scratchpad_bytes, t.scratchpad_bytes)
            per_core_cycles[t.core] = per_core_cycles.get(t.core, 0) + t.cycles
            per_core_tiles[t.core] = per_core_tiles.get(t.core, 0) + 1
        rec.cycles = max(per_core_cycles.values(), default=0) + extra_cycles
        rec.core_cycles += extra_cycles
        rec.cores_used = len(per_core_cycles)
        rec.tiles_per_core = max(per_core_tiles.values(), default=0)
        return rec

    def as_dict(self) -> dict[str, int | str | bool]:
        return asdict(self)


@dataclass
class Profile:
    """What ran on snpu inside one ``profile()`` block."""

    records: list[OpRecord] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        """Sums over every recorded op (cycles add up: ops run one after another)."""
        keys = ("cycles", "core_cycles", "bytes_moved", "sticks", "macs", "tiles")
        out = {k: sum(getattr(r, k) for r in self.records) for k in keys}
        out["ops"] = len(self.records)
        out["fallbacks"] = sum(1 for r in self.records if r.fallback)
        out["peak_scratchpad_bytes"] = max((r.peak_scratchpad_bytes for r in self.records), default=0)
        return out

    def by_op(self) -> dict[str, dict[str, int]]:
        """Per aten op: calls and summed counters, sorted by op name."""
        out: dict[str, dict[str, int]] = {}
        for r in self.records:
            row = out.setdefault(
                r.op, {"calls": 0, "cycles": 0, "bytes_moved": 0, "sticks": 0, "macs": 0, "tiles": 0}
            )
            row["calls"] += 1
            for k in ("cycles", "bytes_moved", "sticks", "macs", "tiles"):
                row[k] += getattr(r, k)
        return dict(sorted(out.items()))

    def as_dict(self) -> dict[str, object]:
        return {"totals": self.totals(), "by_op": self.by_op()}


_local = threading.local()
_fallback_counts: dict[str, int] = {}
_lock = threading.Lock()


def _stack() -> list[Profile]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def active() -> bool:
    """Whether a ``profile()`` is open on this thread (else per-op records are not built)."""
    return bool(getattr(_local, "stack", None))


def record(rec: OpRecord) -> None:
    """Hand a finished op's counters to every open ``profile()`` on this thread."""
    if rec.fallback:
        with _lock:
            _fallback_counts[rec.op] = _fallback_counts.get(rec.op, 0) + 1
    for prof in _stack():
        prof.records.append(rec)


def fallback_counts() -> dict[str, int]:
    """How many times each op fell back to the CPU in this process."""
    with _lock:
        return dict(sorted(_fallback_counts.items()))


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """Collect the counters of every snpu op run inside the block.

    >>> with runners.snpu.profile() as prof:
    ...     y = x @ w
    >>> prof.totals()["cycles"]
    """
    prof = Profile()
    stack = _stack()
    stack.append(prof)
    try:
        yield prof
    finally:
        stack.remove(prof)
