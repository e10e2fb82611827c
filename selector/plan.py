"""``crcr select plan``: classify an inventory and write one plan file per upstream file.

Rules decide first; the agent decides what they leave; the writer groups decisions
that share a rule pattern into one entry and verifies, with the one resolver in
``crcr.contracts.plan``, that every test resolves to what was decided (adding exact
exceptions where a pattern over-reaches). A cache in the data directory keyed by
fingerprints and input digests makes re-planning an unchanged inventory cheap: a test
whose fingerprint and context are unchanged keeps its decision, and a file whose
inputs and bytes are unchanged is not rewritten.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crcr.contracts.inventory import Inventory, InventoryTest
from crcr.contracts.plan import SOURCE_RANK, Plan, is_pattern, plan_path_for
from crcr.fileio import atomic_write_text
from selector.agent.base import Agent, Usage
from selector.agent.tools import Tools
from selector.capabilities import Capabilities
from selector.disabled import DisabledTests
from selector.fingerprint import digest
from selector.planfiles import merge_plan_text, write_plan_file
from selector.rules import DEFAULT_RULES, RULES_VERSION, RuleContext, classify

CACHE_VERSION = "1"
MIN_GROUP = 2
RULE_ORDER = {rule.name: i for i, rule in enumerate(DEFAULT_RULES)}


@dataclass
class Decided:
    mode: str
    reason: str
    source: str  # rules | agent
    fingerprint: str
    rule: str | None = None
    pattern: str | None = None
    confidence: str | None = None
    evidence: dict[str, str] | None = None


@dataclass
class PlanReport:
    tests: int = 0
    files: int = 0
    files_written: int = 0
    files_unchanged: int = 0
    entries: int = 0
    pattern_entries: int = 0
    reused: int = 0
    classified: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    by_mode: dict[str, int] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0


class DecisionCache:
    """Decisions by test id and fingerprint, plus per-file input/output digests."""

    def __init__(self, path: Path, context: str) -> None:
        self.path = path
        self.context = context
        self.decisions: dict[str, dict[str, Any]] = {}
        self.files: dict[str, dict[str, str]] = {}
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if data.get("version") == CACHE_VERSION and data.get("context") == context:
                    self.decisions = data.get("decisions", {})
                    self.files = data.get("files", {})
            except (OSError, json.JSONDecodeError):
                pass  # a broken cache is only a slower run

    def get(self, test: InventoryTest) -> Decided | None:
        hit = self.decisions.get(test.id)
        if hit and hit.get("fingerprint") == test.fingerprint:
            return Decided(**hit)
        return None

    def put(self, test_id: str, decided: Decided) -> None:
        self.decisions[test_id] = asdict(decided)

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps(
            {"version": CACHE_VERSION, "context": self.context, "decisions": self.decisions, "files": self.files},
            sort_keys=True, separators=(",", ":"),
        ))


def _code_digest(agent: Agent) -> str:
    """The deciding code itself: editing a rule or the agent invalidates cached decisions."""
    import inspect

    from selector import rules

    parts = [Path(rules.__file__).read_bytes()]
    agent_file = inspect.getsourcefile(type(agent))
    if agent_file:
        parts.append(Path(agent_file).read_bytes())
    return digest(*parts)


def context_digest(caps: Capabilities, disabled: DisabledTests | None, agent: Agent) -> str:
    disabled_digest = hashlib.sha256(disabled.path.read_bytes()).hexdigest()[:16] if disabled else "-"
    model = getattr(agent, "model", "")
    return digest(CACHE_VERSION, RULES_VERSION, _code_digest(agent), caps.digest, disabled_digest, agent.name, model)


def classify_tests(tests: list[InventoryTest], ctx: RuleContext, agent: Agent, tools: Tools,
                   cache: DecisionCache | None = None, report: PlanReport | None = None,
                   progress: Callable[[int], None] | None = None) -> dict[str, Decided]:
    """Rules, then the agent for the rest; cached decisions are reused by fingerprint."""
    report = report or PlanReport()
    decided: dict[str, Decided] = {}
    undecided: list[InventoryTest] = []
    for test in tests:
        hit = cache.get(test) if cache else None
        if hit is not None:
            decided[test.id] = hit
            report.reused += 1
            continue
        rd = classify(test, ctx)
        if rd is None:
            undecided.append(test)
            continue
        decided[test.id] = Decided(rd.mode, rd.reason, "rules", test.fingerprint, rd.rule, rd.pattern, None, rd.evidence)
        report.classified += 1
        if progress:
            progress(1)
    if undecided:
        answers, usage = agent.decide(undecided, tools)
        report.usage.add(usage)
        fallback: list[InventoryTest] = [t for t in undecided if t.id not in answers]
        if fallback and agent.name != "offline":
            from selector.agent.offline import OfflineAgent

            more, _ = OfflineAgent().decide(fallback, tools)
            answers.update(more)
        for test in undecided:
            a = answers.get(test.id)
            if a is None:
                continue
            decided[test.id] = Decided(a.mode, a.reason, "agent", test.fingerprint, None, None, a.confidence)
            report.classified += 1
            if progress:
                progress(1)
    if cache:
        for tid, d in decided.items():
            cache.put(tid, d)
    return decided


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


def _literal_runs(pattern: str) -> list[str]:
    """Literal stretches every match must contain (outside groups, escapes undone).

    Conservative: anything inside a group, a class, or before a quantifier is dropped,
    and a top-level alternation gives no runs at all (every id is then a candidate).
    """
    runs, cur, depth, i = [], "", 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if depth == 0 and not nxt.isalnum():
                cur += nxt
            else:
                runs.append(cur)
                cur = ""
            i += 2
            continue
        if c == "|" and depth == 0:
            return []
        if c in "([":
            depth += 1
        if c in ".*+?()[]{}|^$" or depth:
            if c in "*?{" and cur:
                cur = cur[:-1]  # the quantified character is optional
            runs.append(cur)
            cur = ""
        else:
            cur += c
        if c in ")]":
            depth = max(0, depth - 1)
        i += 1
    runs.append(cur)
    return [r for r in runs if r]


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
        runs = _literal_runs(e["id"])
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


def write_plan(inv: Inventory, decided: dict[str, Decided], out_dir: Path, backend: str,
               cache: DecisionCache | None = None, report: PlanReport | None = None,
               progress: Callable[[int], None] | None = None) -> PlanReport:
    report = report or PlanReport()
    by_file: dict[str, list[InventoryTest]] = defaultdict(list)
    for t in inv.tests:
        by_file[t.file].append(t)
    for file in sorted(by_file):
        tests = sorted(by_file[file], key=lambda t: t.id)
        path = plan_path_for(out_dir, file)
        rel = str(path.relative_to(out_dir.resolve()))
        header = {"backend": backend, "upstream": {"file": file, "torch": inv.torch_version, "git": inv.torch_git}}
        inputs = digest(json.dumps(header, sort_keys=True),
                        *[f"{t.id}\0{json.dumps(asdict(decided[t.id]), sort_keys=True)}" for t in tests if t.id in decided])
        existing = path.read_bytes() if path.is_file() else None
        cached = cache.files.get(rel) if cache else None
        report.files += 1
        if (cached and existing is not None and cached.get("inputs") == inputs
                and cached.get("output") == hashlib.sha256(existing).hexdigest()):
            report.files_unchanged += 1
            if progress:
                progress(1)
            continue
        entries = build_entries(tests, decided, backend, file)
        report.entries += len(entries)
        report.pattern_entries += sum(1 for e in entries if is_pattern(e["id"]))
        base = existing.decode("utf-8") if existing is not None else None
        if cached and existing is not None and cached.get("output") == hashlib.sha256(existing).hexdigest():
            # Nobody edited the file since the bot wrote it: render it fresh (canonical order, and
            # no round-trip parse of a large file), exactly as a first plan would.
            base = None
        text = merge_plan_text(base, header, entries, str(path))
        data = text.encode("utf-8")
        if data != existing:
            write_plan_file(path, text)
            report.files_written += 1
        else:
            report.files_unchanged += 1
        if cache:
            cache.files[rel] = {"inputs": inputs, "output": hashlib.sha256(data).hexdigest()}
        if progress:
            progress(1)
    return report


def _state_path(data_dir: Path, backend: str, out_dir: Path) -> Path:
    return data_dir / "selector" / f"plan-state-{backend}-{digest(str(out_dir.resolve()))}.json"


def _files_digest(out_dir: Path) -> str:
    h = hashlib.sha256()
    if out_dir.is_dir():
        for p in sorted(out_dir.rglob("*.yaml")):
            h.update(str(p.relative_to(out_dir)).encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def up_to_date(inventory_digest: str, context: str, backend: str, out_dir: Path, data_dir: Path) -> bool:
    """True when the last plan used this very inventory and context and its files are untouched.

    The check reads only digests (no inventory parsing, no classification), which is what
    makes re-planning an unchanged inventory cheap.
    """
    state = _state_path(data_dir, backend, out_dir)
    try:
        data = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return (data.get("inventory") == inventory_digest and data.get("context") == context
            and data.get("files") == _files_digest(out_dir))


def record_state(inventory_digest: str, context: str, backend: str, out_dir: Path, data_dir: Path) -> None:
    atomic_write_text(_state_path(data_dir, backend, out_dir), json.dumps(
        {"inventory": inventory_digest, "context": context, "files": _files_digest(out_dir)}, sort_keys=True))


def seed_cache(cache: DecisionCache, previous: Plan, tests: list[InventoryTest], keep: set[str], ctx: RuleContext) -> int:
    """Carry the previous plan's bot decisions for unchanged tests into the cache (an upgrade on a
    machine without the cache must not re-evaluate them). A rules decision is matched to its rule
    again so its pattern survives; an agent decision is kept as written."""
    from crcr.contracts.plan import PlanFile

    # The bot's own layer of each file (a reviewer entry on top does not hide what the bot said).
    bot_files = {f: PlanFile(backend=pf.backend, upstream=pf.upstream, defaults=pf.defaults,
                             tests=[e for e in pf.tests if e.source in ("rules", "agent")])
                 for f, pf in previous.files.items()}
    seeded = 0
    for t in tests:
        if t.id not in keep or cache.get(t) is not None or t.file not in bot_files:
            continue
        d = bot_files[t.file].resolve(t.relative_id)
        if d.source not in ("rules", "agent"):
            continue
        rd = classify(t, ctx) if d.source == "rules" else None
        if rd is not None and (rd.mode, rd.reason) == (d.mode, d.reason):
            cache.put(t.id, Decided(rd.mode, rd.reason, "rules", t.fingerprint, rd.rule, rd.pattern, None, rd.evidence))
        else:
            conf = d.entry.confidence if d.entry else None
            cache.put(t.id, Decided(d.mode, d.reason, d.source, t.fingerprint, None, None, conf))
        seeded += 1
    return seeded


def run_plan(inv: Inventory, *, backend: str, out_dir: Path, caps: Capabilities, disabled: DisabledTests | None,
             agent: Agent, tools: Tools, data_dir: Path | None,
             progress: Callable[[str, int, int], None] | None = None,
             keep: tuple[Plan, set[str]] | None = None) -> PlanReport:
    """``progress(phase, advance, total)`` is called as tests are classified and files written."""
    """Classify and write; the whole ``crcr select plan``."""
    start = time.perf_counter()
    report = PlanReport(tests=len(inv.tests))
    cache = None
    ctx = RuleContext(caps=caps, disabled=disabled)
    if data_dir is not None or keep is not None:
        cache_path = (data_dir or out_dir) / "selector" / f"plan-cache-{backend}-{digest(str(out_dir.resolve()))}.json"
        cache = DecisionCache(cache_path if data_dir is not None else Path("/nonexistent/cache.json"),
                              context_digest(caps, disabled, agent))
    if keep is not None and cache is not None:
        seed_cache(cache, keep[0], inv.tests, keep[1], ctx)
    n_tests, n_files = len(inv.tests), len({t.file for t in inv.tests})
    decided = classify_tests(inv.tests, ctx, agent, tools, cache, report,
                             progress=(lambda k: progress("classifying", k, n_tests)) if progress else None)
    write_plan(inv, decided, out_dir, backend, cache, report,
               progress=(lambda k: progress("writing plan files", k, n_files)) if progress else None)
    if cache and data_dir is not None:
        cache.save()
    report.by_source = dict(sorted(Counter(d.source for d in decided.values()).items()))
    report.by_mode = dict(sorted(Counter(d.mode for d in decided.values()).items()))
    report.seconds = time.perf_counter() - start
    return report
