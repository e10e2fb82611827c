"""``crcr select evaluate``: how good the picks are, on cases with known failing tests.

A case (one JSON line) is a change and what it broke::

    {"id": "mut-softmax-dim", "kind": "mutation" | "real", "diff": "<unified diff>" | null,
     "paths": ["torch/nn/functional.py"], "text": "PR title and body",
     "failing_files": ["test/test_nn.py"], "failing_tests": ["test/test_nn.py::TestNN::test_x"],
     "source": "where the files and failing tests were read",
     "subfolder": "nn" (optional: the torch subfolder of the change; else read from its first torch path),
     "split": "tune" | "held-out" (optional: which half a change to the pick may be tuned on),
     "reference_files": [...] (optional: the files whose outcome is known, e.g. the candidate files a mutation
                        case ran; default every file)}

For each ranking (every signal alone, all signals combined, a seeded random order, a
path-keyword-only order and the cheapest files first) and each budget share of the total test time, it reports:
change recall (share of cases with at least one failing file picked), file recall
(share of failing files picked, averaged over cases), selection rate (picked time over
total time) and APFD of the ranking (failing files found early, weighted by time); the
combined pick and both baselines also per torch subfolder and per split.

Path-keyword weights are learned from the cases themselves (``selector.keyword_weights``),
cross-fitted: a case of one split is ranked with weights learned from the other split
only (cases without a split fall in two halves by a hash of their id), so no case is
scored with weights that saw its own failing files.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selector.diffparse import parse_diff
from selector.errors import SelectorInputError
from selector.filepick import _breadth, pick_files
from selector.keyword_weights import learn
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
    subfolder: str = ""
    split: str = ""
    known_files: list[str] | None = None  # files whose outcome the case knows (None: all)


def subfolder_of(paths: list[str]) -> str:
    """The torch subfolder of a change: ``torch/nn/modules/module.py`` -> ``nn/modules``; ``torch/_tensor.py`` ->
    ``(top)``; a change outside torch/ -> its first folder."""
    for p in sorted(paths):
        if p.startswith("torch/"):
            parts = p.removeprefix("torch/").split("/")[:-1]
            return "/".join(parts[:2]) if parts else "(top)"
    return paths[0].split("/", 1)[0] if paths else "(none)"


def _half(case: Case) -> str:
    if case.split:
        return case.split
    return "a" if hashlib.sha256(case.id.encode()).digest()[0] % 2 else "b"


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
                              sorted(set(d.get("failing_tests") or [])), str(d.get("source") or ""),
                              str(d.get("subfolder") or subfolder_of(change.paths)), str(d.get("split") or ""),
                              sorted(set(d["reference_files"])) if d.get("reference_files") else None))
        except (ValueError, KeyError, TypeError) as exc:
            raise SelectorInputError(f"{path}:{n}: not a case ({exc})",
                                     hint="each line needs id, failing_files and a diff or paths") from None
    if not cases:
        raise SelectorInputError(f"{path} has no cases", hint="one JSON object per line")
    return cases


def _ranking(case: Case, universe: Universe, signals: tuple, weights: dict[str, float]) -> list[str]:
    kept = universe.keyword_weights
    universe.keyword_weights = weights
    try:
        return pick_files(case.change, universe, signals=signals, fill=False).ranking
    finally:
        universe.keyword_weights = kept


def cross_fitted_weights(cases: list[Case], universe: Universe) -> dict[str, dict[str, float]]:
    """Case id -> path-keyword weights learned only from the cases of the other half."""
    halves = sorted({_half(c) for c in cases})
    learned = {h: learn([(c.change.paths, c.failing_files, c.known_files) for c in cases if _half(c) != h],
                        universe.files)
               for h in halves}
    return {c.id: learned[_half(c)] for c in cases}


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


GROUPED = ("combined", "baseline:random", "baseline:path-keyword", "baseline:cheapest-first")  # the rows shown per subfolder and split


def evaluate(cases: list[Case], universe: Universe) -> dict[str, Any]:
    """Per kind of case: measures for each signal alone, combined, and both baselines; the combined pick and
    both baselines per torch subfolder and per split."""
    report: dict[str, Any] = {"cases": len(cases), "files": len(universe.durations),
                              "total_s": round(sum(universe.durations.values()), 1), "kinds": {},
                              "keyword_weights": "cross-fitted: each half of the cases ranked with weights "
                                                 "learned from the other half"}
    weights = cross_fitted_weights(cases, universe)
    for kind in sorted({c.kind for c in cases}):
        group = [c for c in cases if c.kind == kind]
        orders: dict[str, list[dict[str, list[str]]]] = {}
        rankings = {"combined": tuple(DEFAULT_SIGNALS)} | {s.name: (s,) for s in DEFAULT_SIGNALS}
        for name, sigs in rankings.items():
            # The pick fills its budget by breadth per second; alone, a signal's ranking is followed by a
            # seeded random order, so its row shows what the signal adds over the random baseline.
            ranked = {c.id: _ranking(c, universe, sigs, weights[c.id]) for c in group}
            if name == "combined":
                orders["combined"] = [{k: _fill(v, universe, None) for k, v in ranked.items()}]
                name = "combined, random fill"
            orders[name] = [{k: _fill(v, universe, seed) for k, v in ranked.items()} for seed in range(RANDOM_SEEDS)]
        kw = (PathKeywords(),)
        orders["baseline:path-keyword"] = [{c.id: _fill(_ranking(c, universe, kw, weights[c.id]), universe, seed=0)
                                            for c in group}]
        orders["baseline:random"] = [{c.id: _fill([], universe, seed=s) for c in group} for s in range(RANDOM_SEEDS)]
        # No signal at all, cheapest files first: what ranking by cost alone buys under a time budget.
        cheapest = sorted(universe.files, key=lambda f: (universe.durations[f], f))
        orders["baseline:cheapest-first"] = [{c.id: cheapest for c in group}]

        block: dict[str, Any] = {"cases": len(group), "rankings": _rows(orders, group, universe)}
        for field_name, key in (("subfolders", lambda c: c.subfolder), ("splits", lambda c: c.split)):
            values = sorted({key(c) for c in group if key(c)})
            block[field_name] = {v: {"cases": sum(key(c) == v for c in group),
                                     "rankings": _rows(orders, [c for c in group if key(c) == v], universe, GROUPED)}
                                 for v in values}
        report["kinds"][kind] = block
    return report


def _rows(orders: dict[str, list[dict[str, list[str]]]], subset: list[Case], universe: Universe,
          names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Measures of each named ranking (every one by default) on a subset of the cases, averaged over its orders."""
    return {n: _average([_measure(o, subset, universe) for o in orders[n]]) for n in (names or tuple(orders))}


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
        for field_name, title in (("splits", "split"), ("subfolders", "torch subfolder")):
            groups = block.get(field_name) or {}
            if not groups:
                continue
            lines.append(f"\n{kind} by {title}: file recall @25% / @50% / APFD")
            lines.append(f"{title:22} {'cases':>5}  " + "  ".join(f"{n.removeprefix('baseline:'):>20}" for n in GROUPED))
            for name, g in groups.items():
                cells = [f"{r['0.25']['file_recall']:.2f} / {r['0.5']['file_recall']:.2f} / {r['apfd']:.2f}"
                         for r in (g["rankings"][n] for n in GROUPED)]
                lines.append(f"{name:22} {g['cases']:>5}  " + "  ".join(f"{c:>20}" for c in cells))
    return "\n".join(lines) + "\n"
