"""``crcr select pick``: rank a plan's runnable tests for one diff, cut by a time budget.

Each heuristic is a small class that scores tests and says why (as PyTorch's target
determination does); scores add up, and the reason of a pick lists its top signals:

- ``edited-test``: the diff edits the test itself (its ``def``, or a hunk inside it);
- ``edited-file``: the diff edits the test's file elsewhere;
- ``mentioned``: the PR title/body names the test, its file or its op;
- ``op-touched``: a hunk (changed lines or the function header git shows) of a kernel,
  decomposition, ref or OpInfo file names the test's op;
- ``failure-history``: the test failed in stored runs;
- ``path-keyword``: a token of a changed path appears in the test id.

Ties keep id order, so the output is deterministic. Tests that scored but did not fit
the budget are reported as notable drops with their score and cost.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from crcr.contracts.inventory import Inventory, InventoryTest
from crcr.contracts.pick import DroppedTest, Pick, PickedFile, PickedTest
from crcr.contracts.plan import Plan
from crcr.contracts.results import RunResults
from selector.diffparse import FileDiff

RUNNABLE = ("run", "xfail", "xfail_strict")
DEFAULT_TEST_S = 1.0
MAX_DROPPED = 50
OP_FILE = re.compile(
    r"(aten/src/ATen/native/|torch/_decomp/|torch/_refs/|torch/_prims|torch/nn/functional|"
    r"torch/testing/_internal/(common_methods_invocations|opinfo/)|torch/_meta_registrations|torch/linalg|torch/fft|"
    r"torch/functional\.py|torch/_torch_docs)"
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STOP_TOKENS = {"test", "tests", "torch", "src", "aten", "native", "py", "cpp", "h", "cu", "internal", "testing",
                "common", "utils", "init", "the", "and", "ATen", "csrc", "impl", "cpu", "cuda", "ops", "functional"}


@dataclass
class PickContext:
    diffs: list[FileDiff]
    pr_text: str = ""
    failures: dict[str, int] = field(default_factory=dict)  # test id -> failures seen


@dataclass
class Signal:
    heuristic: str
    score: float
    why: str


class Heuristic:
    name = "heuristic"

    def signals(self, tests: list[InventoryTest], ctx: PickContext) -> dict[str, Signal]:  # pragma: no cover
        raise NotImplementedError


class EditedTests(Heuristic):
    name = "edited-test"

    def signals(self, tests: list[InventoryTest], ctx: PickContext) -> dict[str, Signal]:
        by_file: dict[str, FileDiff] = {d.path: d for d in ctx.diffs}
        out: dict[str, Signal] = {}
        for t in tests:
            d = by_file.get(t.file)
            if d is None:
                continue
            template = t.template or t.method
            in_test = any(template in h.edited_defs for h in d.hunks)
            if in_test:
                out[t.id] = Signal(self.name, 10.0, f"the diff edits {template} itself")
            else:
                out[t.id] = Signal("edited-file", 4.0, f"the diff edits its file {t.file}")
        return out


class Mentioned(Heuristic):
    name = "mentioned"

    def signals(self, tests: list[InventoryTest], ctx: PickContext) -> dict[str, Signal]:
        if not ctx.pr_text:
            return {}
        words = set(_WORD.findall(ctx.pr_text))
        text = ctx.pr_text
        out: dict[str, Signal] = {}
        for t in tests:
            template = t.template or t.method
            if template in words or t.method in words:
                out[t.id] = Signal(self.name, 5.0, f"the PR text names {template}")
            elif t.file in text or t.file.removeprefix("test/").removesuffix(".py") in text:
                out[t.id] = Signal(self.name, 3.0, f"the PR text names {t.file}")
        return out


def _op_tokens(op: str) -> set[str]:
    base = op.split(".")
    names = {base[-1], op.replace(".", "_")}
    if len(base) > 1 and base[0] not in ("nn", "linalg", "fft", "special", "_refs", "sparse", "signal"):
        names.add(base[0])  # name.variant -> name
    if base[0] in ("linalg", "fft", "special"):
        names.add(f"{base[0]}_{base[-1]}")
    return {n for n in names if len(n) > 2}


_KERNEL_SUFFIXES = ("_out", "_kernel", "_impl", "_cpu", "_cuda", "_stub", "_forward", "_backward", "_template")


def _kernel_names(word: str) -> list[str]:
    """``softmax_cpu_out`` -> softmax_cpu_out, softmax_cpu, softmax (kernel naming conventions)."""
    names = [word]
    changed = True
    while changed:
        changed = False
        for suffix in _KERNEL_SUFFIXES:
            if names[-1].endswith(suffix) and len(names[-1]) > len(suffix) + 2:
                names.append(names[-1][: -len(suffix)])
                changed = True
                break
    return names


class OpTouched(Heuristic):
    name = "op-touched"

    def signals(self, tests: list[InventoryTest], ctx: PickContext) -> dict[str, Signal]:
        touched: dict[str, str] = {}
        for d in ctx.diffs:
            if not OP_FILE.search(d.path):
                continue
            for h in d.hunks:
                for word in _WORD.findall("\n".join([h.context, *h.added, *h.removed])):
                    for name in _kernel_names(word):
                        touched.setdefault(name, f"{d.path}:{h.start}")
        out: dict[str, Signal] = {}
        for t in tests:
            if not t.op:
                continue
            hit = next((tok for tok in sorted(_op_tokens(t.op)) if tok in touched), None)
            if hit:
                out[t.id] = Signal(self.name, 6.0, f"the diff's hunks touch op {t.op} ({touched[hit]})")
        return out


class FailureHistory(Heuristic):
    name = "failure-history"

    def signals(self, tests: list[InventoryTest], ctx: PickContext) -> dict[str, Signal]:
        return {t.id: Signal(self.name, min(3.0, 1.0 + ctx.failures[t.id] * 0.5), f"failed in {ctx.failures[t.id]} stored run(s)")
                for t in tests if ctx.failures.get(t.id)}


class PathKeywords(Heuristic):
    name = "path-keyword"

    def signals(self, tests: list[InventoryTest], ctx: PickContext) -> dict[str, Signal]:
        tokens = set()
        for d in ctx.diffs:
            for part in re.split(r"[/._\-]", d.path):
                if len(part) > 3 and part not in _STOP_TOKENS and not part.isdigit():
                    tokens.add(part.lower())
        out: dict[str, Signal] = {}
        for t in tests:
            parts = set(re.split(r"[/._:\-]", t.id.lower()))
            hit = sorted(tokens & parts)
            if hit:
                out[t.id] = Signal(self.name, 1.0, f"path keyword {hit[0]!r}")
        return out


HEURISTICS: tuple[Heuristic, ...] = (EditedTests(), Mentioned(), OpTouched(), FailureHistory(), PathKeywords())


def estimate(t: InventoryTest, per_file: dict[str, float]) -> float:
    if t.duration_s:
        return t.duration_s
    return per_file.get(t.file, DEFAULT_TEST_S)


def pick(plan: Plan, inventory: Inventory, ctx: PickContext, budget_s: float | None,
         file_times: dict[str, float] | None = None, pr: int | None = None, upstream_sha: str | None = None) -> Pick:
    """The ranked, budgeted pick with a reason per pick and per notable drop."""
    runnable = [t for t in sorted(inventory.tests, key=lambda t: t.id) if plan.resolve(t.id).mode in RUNNABLE]
    counts = defaultdict(int)
    for t in runnable:
        counts[t.file] += 1
    per_file = {f: (file_times or {}).get(f, DEFAULT_TEST_S * n) / max(n, 1) for f, n in counts.items()}
    signals: dict[str, list[Signal]] = defaultdict(list)
    for h in HEURISTICS:
        for tid, s in h.signals(runnable, ctx).items():
            signals[tid].append(s)
    scored = []
    for t in runnable:
        sigs = signals.get(t.id)
        if not sigs:
            continue
        score = sum(s.score for s in sigs)
        scored.append((-score, t.id, t, sigs))
    scored.sort(key=lambda x: (x[0], x[1]))
    picked: list[PickedTest] = []
    dropped: list[DroppedTest] = []
    spent = 0.0
    for neg, tid, t, sigs in scored:
        cost = estimate(t, per_file)
        top = sorted(sigs, key=lambda s: -s.score)
        reason = "; ".join(f"[{s.heuristic}] {s.why}" for s in top[:3])
        if budget_s is not None and spent + cost > budget_s:
            if len(dropped) < MAX_DROPPED:
                dropped.append(DroppedTest(id=tid, reason=f"over the {budget_s:g}s budget (score {-neg:g}, ~{cost:.1f}s): {reason}"))
            continue
        spent += cost
        picked.append(PickedTest(id=tid, score=-neg, reason=reason, estimated_s=round(cost, 3)))
    unscored = len(runnable) - len(scored)
    if unscored:
        dropped.append(DroppedTest(id="*", reason=f"{unscored} runnable tests had no signal from this diff"))
    return Pick(backend=plan.backend, budget_s=budget_s, plan_digest=plan.digest, pr=pr, upstream_sha=upstream_sha,
                tests=picked, dropped=dropped)


def failures_pick(plan: Plan, runs: list[RunResults], inventory: Inventory | None = None,
                  pr: int | None = None) -> Pick | None:
    """Only the tests that failed (or errored) in ``runs`` and that the plan runs: what a
    rerun for triage needs (is this commit good or bad for what broke?). None when no
    such test failed."""
    failures: dict[str, int] = defaultdict(int)
    durations: dict[str, float] = {}
    for r in runs:
        for t in r.failed():
            failures[t.id] += 1
            durations[t.id] = max(durations.get(t.id, 0.0), t.duration_s)
    known = {t.id for t in inventory.tests} if inventory is not None else None
    ids = sorted((tid for tid in failures
                  if "::" in tid and (known is None or tid in known) and plan.resolve(tid).mode in RUNNABLE),
                 key=lambda tid: (-failures[tid], tid))
    if not ids:
        return None
    tests = [PickedTest(id=tid, score=float(failures[tid]), estimated_s=round(durations[tid], 3) or DEFAULT_TEST_S,
                        reason=f"[failure-history] failed in {failures[tid]} of the {len(runs)} given run(s)")
             for tid in ids]
    by_file: dict[str, list[str]] = defaultdict(list)
    for tid in ids:
        by_file[tid.split("::", 1)[0]].append(tid)
    files = [PickedFile(file=f, score=float(len(t)), estimated_s=round(sum(durations[i] for i in t), 3),
                        reason=f"[failure-history] {len(t)} test(s) of this file failed in the given runs", tests=t)
             for f, t in by_file.items()]
    return Pick(backend=plan.backend, plan_digest=plan.digest, pr=pr, tests=tests, files=files,
                total_s=round(sum(durations[i] for i in ids), 3))
