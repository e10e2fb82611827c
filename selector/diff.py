"""``crcr select diff OLD NEW``: per test, which modes a plan change flips and why (Markdown)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from crcr.contracts.inventory import Inventory
from crcr.contracts.plan import Decision, Plan

MAX_ROWS = 200


@dataclass(frozen=True)
class Flip:
    test_id: str
    old: Decision
    new: Decision


def plan_flips(old: Plan, new: Plan, test_ids: list[str]) -> list[Flip]:
    flips = []
    for tid in sorted(test_ids):
        a, b = old.resolve(tid), new.resolve(tid)
        if (a.mode, a.reason) != (b.mode, b.reason):
            flips.append(Flip(tid, a, b))
    return flips


def entry_ids(plan: Plan) -> list[str]:
    """Without an inventory, the tests a plan names exactly (patterns are compared as entries)."""
    ids = set()
    for pf in plan:
        for e in pf.tests:
            ids.add(f"{pf.upstream.file}::{e.id}")
    return sorted(ids)


def _cell(text: str, limit: int = 160) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_markdown(flips: list[Flip], tests_compared: int, title: str = "Plan change") -> str:
    lines = [f"### {title}", ""]
    if not flips:
        lines.append(f"No test changes mode or reason ({tests_compared} tests compared).")
        return "\n".join(lines) + "\n"
    counts = Counter(f"{f.old.mode} → {f.new.mode}" for f in flips)
    lines.append(f"{len(flips)} of {tests_compared} tests change: "
                 + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ".")
    lines += ["", "| test | mode | why (new) | source |", "|---|---|---|---|"]
    for f in flips[:MAX_ROWS]:
        mode = f.new.mode if f.old.mode == f.new.mode else f"{f.old.mode} → **{f.new.mode}**"
        lines.append(f"| `{_cell(f.test_id, 120)}` | {mode} | {_cell(f.new.reason)} | {f.old.source} → {f.new.source} |")
    if len(flips) > MAX_ROWS:
        lines.append(f"| … | | {len(flips) - MAX_ROWS} more not shown | |")
    return "\n".join(lines) + "\n"


def diff_plans(old: Plan, new: Plan, inventory: Inventory | None = None) -> tuple[list[Flip], int]:
    ids = [t.id for t in inventory.tests] if inventory else sorted(set(entry_ids(old)) | set(entry_ids(new)))
    return plan_flips(old, new, ids), len(ids)
