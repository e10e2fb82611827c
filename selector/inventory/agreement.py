"""How far a static inventory agrees with pytest's collection: Jaccard of test ids per file."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from crcr.contracts.inventory import Inventory


@dataclass(frozen=True)
class FileAgreement:
    file: str
    static: int
    collected: int
    both: int

    @property
    def jaccard(self) -> float:
        union = self.static + self.collected - self.both
        return self.both / union if union else 1.0


def agreement(static: Inventory, collected: Inventory) -> list[FileAgreement]:
    """Per upstream file: ids in each inventory, ids in both, Jaccard (files in either, sorted)."""
    a: dict[str, set[str]] = defaultdict(set)
    b: dict[str, set[str]] = defaultdict(set)
    for t in static.tests:
        a[t.file].add(t.id)
    for t in collected.tests:
        b[t.file].add(t.id)
    return [FileAgreement(f, len(a[f]), len(b[f]), len(a[f] & b[f])) for f in sorted(set(a) | set(b))]


def render(rows: list[FileAgreement]) -> str:
    out = [f"{'file':48} {'static':>8} {'collected':>9} {'both':>8} {'Jaccard':>7}"]
    for r in rows:
        out.append(f"{r.file:48} {r.static:8d} {r.collected:9d} {r.both:8d} {r.jaccard:7.3f}")
    return "\n".join(out)
