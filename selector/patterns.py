"""Plan entries for one file: shared decisions as patterns, exceptions and agent decisions exact.

Patterns come from the rules (each rule proposes one for the tests sharing its decision);
they are written in reverse rule order, so where two match, the rule that decided wins.
Every test is then resolved with the plan contract's precedence and given an exact entry
wherever a pattern would say something else, so a plan never says what was not decided.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from crcr.contracts.inventory import InventoryTest
from crcr.contracts.plan import SOURCE_RANK, is_pattern, required_literals
from selector.cache import Decided
from selector.rules import DEFAULT_RULES

MIN_GROUP = 2
RULE_ORDER = {rule.name: i for i, rule in enumerate(DEFAULT_RULES)}


def _entry(test_id: str, d: Decided, with_fp: bool = True) -> dict[str, Any]:
    e: dict[str, Any] = {"id": test_id, "mode": d.mode, "reason": d.reason, "source": d.source}
    if d.evidence:
        e["evidence"] = dict(d.evidence)
    if with_fp:
        e["fingerprint"] = d.fingerprint
    if d.confidence:
        e["confidence"] = d.confidence
    return e


def build_entries(tests: list[InventoryTest], decided: dict[str, Decided], backend: str, upstream_file: str,
                  min_group: int = MIN_GROUP) -> list[dict[str, Any]]:
    """Entries for one file: shared rule patterns once, exceptions and agent decisions exactly."""
    groups: dict[tuple[str, str, str], list[InventoryTest]] = defaultdict(list)
    singles: list[InventoryTest] = []
    for t in tests:
        d = decided.get(t.id)
        if d is None:
            continue
        if d.source == "rules" and d.pattern and not d.evidence:
            groups[(d.pattern, d.mode, d.reason)].append(t)
        else:
            singles.append(t)
    patterns: list[dict[str, Any]] = []
    for (pattern, mode, reason), members in groups.items():
        if len(members) >= min_group:
            rule = decided[members[0].id].rule or ""
            patterns.append({"id": pattern, "mode": mode, "reason": reason, "source": "rules", "_rule": rule})
        else:
            singles.extend(members)
    # Among patterns of one source, the later entry wins: write them in reverse rule order,
    # so a test two patterns match resolves to the rule that decided it (the earlier one).
    patterns.sort(key=lambda e: (-RULE_ORDER.get(e["_rule"], 0), e["id"], e["reason"]))
    for e in patterns:
        del e["_rule"]
    exact = [_entry(t.relative_id, decided[t.id]) for t in sorted(singles, key=lambda t: t.id)]
    entries = patterns + exact
    return entries + _exceptions(entries, tests, decided, backend, upstream_file)


def _bounded_tokens(run: str) -> list[str]:
    """Tokens of a literal run that are whole tokens of any id it occurs in (bounded by _ or ::)."""
    parts = re.split(r"_|::", run)
    return [p for j, p in enumerate(parts) if p and 0 < j < len(parts) - 1]


def _exceptions(entries: list[dict[str, Any]], tests: list[InventoryTest], decided: dict[str, Decided],
                backend: str, upstream_file: str) -> list[dict[str, Any]]:
    """Exact entries for tests a pattern would resolve differently from their decision.

    Same precedence as ``PlanFile.resolve`` (source rank, exact over pattern, later wins),
    with an inverted index of id tokens so each pattern is tried only on ids that can match.
    """
    rels = [t.relative_id for t in tests]
    index: dict[str, set[int]] = defaultdict(set)
    for n, rel in enumerate(rels):
        for tok in re.split(r"_|::", rel):
            index[tok].add(n)
    exact: dict[str, tuple[int, int, int]] = {}
    matches: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for i, e in enumerate(entries):
        rank = SOURCE_RANK[e["source"]]
        if not is_pattern(e["id"]):
            exact[e["id"]] = (rank, 1, i)
            continue
        rx = re.compile(e["id"])
        runs = required_literals(e["id"])
        tokens = [tok for run in runs for tok in _bounded_tokens(run)]
        candidates = set.intersection(*(index.get(tok, set()) for tok in tokens)) if tokens else range(len(rels))
        for n in candidates:
            rel = rels[n]
            if all(run in rel for run in runs) and rx.fullmatch(rel):
                matches[n].append((rank, 0, i))
    extra = []
    for n, t in enumerate(tests):
        d = decided.get(t.id)
        if d is None:
            continue
        keys = list(matches.get(n, []))
        if rels[n] in exact:
            keys.append(exact[rels[n]])
        if keys:
            winner = entries[max(keys)[2]]
            if winner["mode"] == d.mode and winner["reason"] == d.reason:
                continue
        extra.append(_entry(rels[n], d))
    return sorted(extra, key=lambda e: e["id"])
