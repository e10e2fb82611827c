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
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from crcr.contracts.inventory import Inventory, InventoryTest
from crcr.contracts.plan import Plan, is_pattern, plan_path_for
from selector.agent.base import Agent, Usage
from selector.agent.tools import Tools
from selector.cache import (  # re-exported: the CLI and benchmarks use them through this module
    Decided,
    DecisionCache,
    _state_path,
    context_digest,
    record_state,
    up_to_date,
)
from selector.capabilities import Capabilities
from selector.disabled import DisabledTests
from selector.fingerprint import digest
from selector.patterns import build_entries
from selector.planfiles import merge_plan_text, write_plan_file
from selector.rules import (
    DEFAULT_RULES,
    RuleContext,
    TemplateProbe,
    classify,
    probe_key,
    probe_request,
    reads_key,
    traced_instead,
)

__all__ = [
    "Decided",
    "DecisionCache",
    "PlanReport",
    "_state_path",
    "build_entries",
    "classify_tests",
    "context_digest",
    "record_state",
    "run_plan",
    "seed_cache",
    "up_to_date",
    "write_plan",
]


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
    classified_ids: list[str] = field(default_factory=list)  # which tests ``classified`` counts
    by_source: dict[str, int] = field(default_factory=dict)
    by_mode: dict[str, int] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0


def _untraced_said(reason: str, test: InventoryTest, ctx: RuleContext) -> str:
    """The reason, saying why the test has no CPU trace where one was wanted but not run (the trace budget was
    spent): a rule (the template probe of a generic OpInfo test) or the Claude agent decided it without one. The
    offline agent's reason says so already ("no CPU trace (...)")."""
    return _noted(reason, ctx.caps.untraced.get(test.id))


def _noted(reason: str, why: str | None) -> str:
    """``reason`` with ``why`` in brackets after it, unless it has none or says it already."""
    return reason if why is None or why in reason else f"{reason} ({why})"


# the rules that decide an OpInfo test whose template probe has no answer (and the agent after them)
_AFTER_PROBE = frozenset(r.name for r in DEFAULT_RULES[1 + next(i for i, r in enumerate(DEFAULT_RULES)
                                                                 if isinstance(r, TemplateProbe)):])


def _unprobed_said(reason: str, test: InventoryTest, ctx: RuleContext, rule: str | None) -> str:
    """The reason, saying why the test's template probe did not run (the probe budget was spent) where a rule
    after the probe or the agent decided it in the probe's place."""
    if not ctx.caps.unprobed or (rule is not None and rule not in _AFTER_PROBE) or traced_instead(test, ctx.caps):
        return reason
    req = probe_request(test)
    if req is None:
        return reason
    reads = ctx.caps.template_reads.get(reads_key(test))
    keys = [probe_key(*req), *([probe_key("attrs", req[1], reads)] if reads else [])]
    return _noted(reason, next((ctx.caps.unprobed[k] for k in keys if k in ctx.caps.unprobed), None))


def _said(reason: str, test: InventoryTest, ctx: RuleContext, rule: str | None) -> str:
    return _untraced_said(_unprobed_said(reason, test, ctx, rule), test, ctx)


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
        decided[test.id] = Decided(rd.mode, _said(rd.reason, test, ctx, rd.rule), "rules", test.fingerprint, rd.rule,
                                   rd.pattern, None, rd.evidence)
        report.classified += 1
        report.classified_ids.append(test.id)
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
            decided[test.id] = Decided(a.mode, _said(a.reason, test, ctx, None), "agent", test.fingerprint, None,
                                       None, a.confidence)
            report.classified += 1
            report.classified_ids.append(test.id)
            if progress:
                progress(1)
    if cache:
        for tid, d in decided.items():
            cache.put(tid, d)
    return decided


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
        if base is not None:
            text = _keep_decisions(text, base, header, entries, tests, decided, str(path))
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


def _keep_decisions(text: str, base: str, header: dict, entries: list[dict], tests: list[InventoryTest],
                    decided: dict[str, Decided], where: str) -> str:
    """A merge keeps existing entries where they are and appends new ones, so a new pattern can land
    after an old one it should lose to: resolve every test through the merged file and give each test
    the bot's layer now resolves differently from its decision an exact entry (exact beats pattern)."""
    from crcr.contracts.plan import parse_plan_file
    from selector.patterns import _entry

    merged = parse_plan_file(text, where)
    extra = []
    for t in tests:
        d = decided.get(t.id)
        if d is None:
            continue
        got = merged.resolve(t.relative_id)
        if got.source in ("rules", "agent") and (got.mode, got.reason) != (d.mode, d.reason):
            extra.append(_entry(t.relative_id, d))
    return merge_plan_text(base, header, entries + extra, where) if extra else text


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
    ctx = RuleContext(caps=caps, disabled=disabled, dtype_reaches=tools.dtype_reaches)
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
