"""``crcr select explain TEST_ID``: what the plan says about one test, and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crcr.contracts.plan import SOURCE_RANK, Plan, split_test_id


def explain(plan: Plan, test_id: str, history: Path | None = None, max_history: int = 10) -> dict[str, Any]:
    """Mode, reason, source, the deciding entry and what it shadows, evidence, and run history."""
    decision = plan.resolve(test_id)
    file, rel = split_test_id(test_id)
    out: dict[str, Any] = {
        "test": test_id,
        "mode": decision.mode,
        "reason": decision.reason,
        "source": decision.source,
        "plan_file": str(plan.paths.get(file)) if file in plan.paths else None,
        "entry": decision.entry_id,
        "evidence": decision.entry.evidence.model_dump(exclude_none=True) if decision.entry and decision.entry.evidence else None,
        "proposal": decision.entry.proposal if decision.entry else None,
        "fingerprint": decision.entry.fingerprint if decision.entry else None,
        "also_matching": [],
        "history": [],
    }
    pf = plan.files.get(file)
    if pf is not None:
        for entry in pf.tests:
            matches = entry.id == rel or (entry.regex is not None and entry.regex.fullmatch(rel))
            if matches and entry is not decision.entry:
                out["also_matching"].append({"entry": entry.id, "mode": entry.mode, "source": entry.source,
                                             "outranked": SOURCE_RANK[entry.source] <= SOURCE_RANK.get(decision.source, 0)})
    if history is not None and history.is_file():
        rows = []
        with history.open(encoding="utf-8") as fh:
            for line in fh:
                if test_id in line:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if row.get("id") == test_id:
                        rows.append(row)
        out["history"] = rows[-max_history:]
    return out


def render_text(info: dict[str, Any]) -> str:
    lines = [
        info["test"],
        f"  mode:     {info['mode']}",
        f"  reason:   {info['reason']}",
        f"  source:   {info['source']}",
    ]
    if info["entry"]:
        lines.append(f"  entry:    {info['entry']}  ({info['plan_file']})")
    if info.get("proposal"):
        lines.append(f"  proposal: {info['proposal']} (a person must apply it)")
    if info["evidence"]:
        lines.append("  evidence: " + ", ".join(f"{k}={v}" for k, v in info["evidence"].items()))
    for m in info["also_matching"]:
        lines.append(f"  also matches: {m['entry']} -> {m['mode']} ({m['source']}, outranked)")
    if info["history"]:
        lines.append("  history:")
        for h in info["history"]:
            lines.append(f"    {h.get('run')}: {h.get('outcome')}" + (f" ({h['error']})" if h.get("error") else ""))
    return "\n".join(lines)
