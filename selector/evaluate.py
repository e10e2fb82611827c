"""``crcr select evaluate``: how good the picks are, on cases with known failing tests.

A case (one JSON line) is a change and what it broke::

    {"id": "mut-softmax-dim", "kind": "mutation" | "real", "diff": "<unified diff>" | null,
     "paths": ["torch/nn/functional.py"], "text": "PR title and body",
     "failing_files": ["test/test_nn.py"], "failing_tests": ["test/test_nn.py::TestNN::test_x"],
     "source": "where the files and failing tests were read"}

For each ranking (every signal alone, all signals combined, a seeded random order and a
path-keyword-only order) and each budget share of the total test time, it reports:
change recall (share of cases with at least one failing file picked), file recall
(share of failing files picked, averaged over cases), selection rate (picked time over
total time) and APFD of the ranking (failing files found early, weighted by time).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selector.diffparse import parse_diff
from selector.errors import SelectorInputError
from selector.filepick import _breadth, pick_files
from selector.signals import DEFAULT_SIGNALS
from selector.signals.base import Change, Universe
from selector.signals.keywords import PathKeywords

SHARES = (0.25, 0.5)
RANDOM_SEEDS = 20


@dataclass
class Case:
    id: str
    kind: str
    change: Change
    failing_files: list[str]
    failing_tests: list[str] = field(default_factory=list)
    source: str = ""


def load_cases(path: Path) -> list[Case]:
    if not path.is_file():
        raise SelectorInputError(f"cases file {path} does not exist", hint="one JSON object per line; see docs/selector.md")
    cases: list[Case] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d: Any = json.loads(line)
            diffs = parse_diff(d["diff"]) if d.get("diff") else []
            change = Change.from_diffs(diffs, str(d.get("text") or ""), list(d.get("paths") or []))
            failing = sorted(set(d["failing_files"]))
            if not failing:
                raise ValueError("failing_files is empty")
            cases.append(Case(str(d["id"]), str(d.get("kind", "mutation")), change, failing,
                              sorted(set(d.get("failing_tests") or [])), str(d.get("source") or "")))
        except (ValueError, KeyError, TypeError) as exc:
            raise SelectorInputError(f"{path}:{n}: not a case ({exc})",
                                     hint="each line needs id, failing_files and a diff or paths") from None
    if not cases:
        raise SelectorInputError(f"{path} has no cases", hint="one JSON object per line")
    return cases


def _ranking(case: Case, universe: Universe, signals: tuple) -> list[str]:
    return pick_files(case.change, universe, signals=signals, fill=False).ranking


def _cut(order: list[str], durations: dict[str, float], budget: float) -> list[str]:
    out, spent = [], 0.0
    for f in order:
        if spent + durations[f] <= budget:
            out.append(f)
            spent += durations[f]
    return out


def _fill(ranked: list[str], universe: Universe, seed: int | None) -> list[str]:
    """The ranking, then every other file (seeded random order; ``None``: the pick's fill order)."""
    seen = set(ranked)
    rest = [f for f in universe.files if f not in seen]
    if seed is not None:
        random.Random(seed).shuffle(rest)
    else:
        rest.sort(key=lambda f: (-_breadth(f, universe), f))
    return ranked + rest


def apfd(order: list[str], failing: list[str], durations: dict[str, float]) -> float:
    """Cost-cognizant APFD: 1 - mean over failing files of the time spent before reaching them / total."""
    total = sum(durations[f] for f in order) or 1.0
    spent, at = 0.0, {}
    for f in order:
        at[f] = spent + durations[f] / 2  # reached halfway through running it
        spent += durations[f]
    found = [at[f] for f in failing if f in at]
    if not found:
        return 0.0
    missed = len(failing) - len(found)
    return 1.0 - (sum(found) + missed * total) / (len(failing) * total)


def _measure(orders: dict[str, list[str]], cases: list[Case], universe: Universe) -> dict[str, Any]:
    total = sum(universe.durations.values())
    out: dict[str, Any] = {}
    for share in SHARES:
        budget = total * share
        change_hits, recalls, rates = 0, [], []
        for c in cases:
            picked = set(_cut(orders[c.id], universe.durations, budget))
            failing = [f for f in c.failing_files if f in universe.durations]
            hit = [f for f in failing if f in picked]
            change_hits += bool(hit)
            recalls.append(len(hit) / len(failing) if failing else 0.0)
            rates.append(sum(universe.durations[f] for f in picked) / total)
        out[f"{share:g}"] = {"change_recall": round(change_hits / len(cases), 4),
                             "file_recall": round(sum(recalls) / len(cases), 4),
                             "selection_rate": round(sum(rates) / len(cases), 4)}
    out["apfd"] = round(sum(apfd(orders[c.id], c.failing_files, universe.durations) for c in cases) / len(cases), 4)
    return out


def evaluate(cases: list[Case], universe: Universe) -> dict[str, Any]:
    """Per kind of case: measures for each signal alone, combined, and both baselines."""
    report: dict[str, Any] = {"cases": len(cases), "files": len(universe.durations),
                              "total_s": round(sum(universe.durations.values()), 1), "kinds": {}}
    for kind in sorted({c.kind for c in cases}):
        group = [c for c in cases if c.kind == kind]
        rows: dict[str, Any] = {}
        rankings = {"combined": tuple(DEFAULT_SIGNALS)} | {s.name: (s,) for s in DEFAULT_SIGNALS}
        for name, sigs in rankings.items():
            # The pick fills its budget by breadth per second; alone, a signal's ranking is followed by a
            # seeded random order, so its row shows what the signal adds over the random baseline.
            ranked = {c.id: _ranking(c, universe, sigs) for c in group}
            if name == "combined":
                rows["combined"] = _measure({k: _fill(v, universe, None) for k, v in ranked.items()}, group, universe)
                name = "combined, random fill"
            rows[name] = _average([_measure({k: _fill(v, universe, seed) for k, v in ranked.items()}, group, universe)
                                   for seed in range(RANDOM_SEEDS)])
        kw = (PathKeywords(),)
        rows["baseline:path-keyword"] = _measure(
            {c.id: _fill(_ranking(c, universe, kw), universe, seed=0) for c in group}, group, universe)
        runs = [_measure({c.id: _fill([], universe, seed=s) for c in group}, group, universe) for s in range(RANDOM_SEEDS)]
        rows["baseline:random"] = _average(runs)
        report["kinds"][kind] = {"cases": len(group), "rankings": rows}
    return report


def _average(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in runs[0]:
        if isinstance(runs[0][key], dict):
            out[key] = {m: round(sum(r[key][m] for r in runs) / len(runs), 4) for m in runs[0][key]}
        else:
            out[key] = round(sum(r[key] for r in runs) / len(runs), 4)
    return out


def render_table(report: dict[str, Any]) -> str:
    lines = [f"{report['cases']} cases over {report['files']} files ({report['total_s']:.0f}s in all)"]
    for kind, block in report["kinds"].items():
        lines.append(f"\n{kind} ({block['cases']} cases)")
        head = f"{'ranking':24} " + " ".join(f"{m}@{s:<5}" for s in ("25%", "50%") for m in ("chg", "file", "rate"))
        lines.append(head + "  APFD")
        for name, row in block["rankings"].items():
            cells = []
            for share in ("0.25", "0.5"):
                r = row[share]
                cells += [f"{r['change_recall']:<9.3f}", f"{r['file_recall']:<10.3f}", f"{r['selection_rate']:<10.3f}"]
            lines.append(f"{name:24} " + " ".join(cells) + f"  {row['apfd']:.3f}")
    return "\n".join(lines) + "\n"
