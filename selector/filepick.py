"""File-level pick over the whole upstream suite: rank test files for one change, cut by time.

Every signal (``selector/signals/``) scores files; a file's score is the weighted sum of
its counted signals. Order: edited test files first (always picked, whatever the
budget), then score per square root of the file's measured seconds (highest first; a cheap
file with a weak signal is worth running before an expensive one with a slightly stronger
one), then path. A budget is filled greedily in that
order, each file costing its measured duration; a file that does not fit is dropped
with its score and cost, and smaller files after it may still fit. With a budget, the
time left after every scored file is filled with unscored files that reach the most
torch modules per second (``fill``), said so in their reason. A docs-only change picks
the smoke set. An empty pick carries the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from crcr.contracts.pick import DroppedTest, PickedFile, SignalScore
from selector.signals import DEFAULT_SIGNALS
from selector.signals.base import Change, Hit, Signal, Universe, is_docs_only
from selector.signals.edited import edited_test_files

# Short files that touch the core of torch (tensors, autograd, nn, ops), for a docs-only change.
SMOKE_SET = ("test/test_torch.py", "test/test_autograd.py", "test/test_nn.py", "test/test_binary_ufuncs.py")
DEFAULT_NEW_FILE_S = 60.0  # a test file CI has not timed yet (new in this PR)
MAX_DROPPED = 50
# Rank by score per second**COST_EXPONENT: 0 ranks by score alone, 1 by score per second (the knapsack
# density). Files cost from 0.1 s to over an hour, so a cheap file with a weak signal can be worth
# running before an expensive one with a slightly stronger signal.
COST_EXPONENT = 0.5  # chosen on the tune half of the mutation cases (0, 0.5, 1 tried); BENCHMARKS.md


@dataclass
class FilePick:
    files: list[PickedFile]
    dropped: list[DroppedTest]
    total_s: float
    mode: str  # ranked | smoke
    empty_reason: str | None = None
    ranking: list[str] = field(default_factory=list)  # every scored file in order, before the budget cut

    @property
    def spent_s(self) -> float:
        return sum(f.estimated_s for f in self.files)


def score_files(change: Change, universe: Universe, signals: Iterable[Signal],
                trial: frozenset[str] = frozenset()) -> tuple[dict[str, list[SignalScore]], dict[str, list[SignalScore]],
                                                               dict[str, set[str]]]:
    """Counted and trial signal scores per file, and test ids the signals pointed at."""
    counted: dict[str, list[SignalScore]] = {}
    tried: dict[str, list[SignalScore]] = {}
    tests: dict[str, set[str]] = {}
    for sig in signals:
        hits: dict[str, Hit] = sig.score(change, universe)
        target = tried if sig.name in trial else counted
        for f, h in sorted(hits.items()):
            target.setdefault(f, []).append(SignalScore(signal=sig.name, score=round(h.score * sig.weight, 4), why=h.why))
            if h.tests:
                tests.setdefault(f, set()).update(h.tests)
    for d in (counted, tried):
        for f in d:
            d[f].sort(key=lambda s: (-s.score, s.signal))
    return counted, tried, tests


def _reason(sigs: list[SignalScore]) -> str:
    return "; ".join(f"[{s.signal}] {s.why}" for s in sigs[:3])


def _tests_for(f: str, universe: Universe, pointed: set[str]) -> list[str]:
    known = sorted(t.id for t in universe.tests.get(f, ()))
    return sorted(pointed & set(known)) + [t for t in known if t not in pointed]


def _density(score: float, seconds: float) -> float:
    return score / max(seconds, 1.0) ** COST_EXPONENT if COST_EXPONENT else score


def _breadth(f: str, universe: Universe) -> float:
    """How many torch modules a file reaches per second of its time (fill order)."""
    reach = len(universe.graph.reach(f)) if universe.graph is not None else 0
    return (1 + reach) / max(universe.durations.get(f, DEFAULT_NEW_FILE_S), 1.0)


def pick_files(change: Change, universe: Universe, *, budget_s: float | None = None,
               signals: Iterable[Signal] = DEFAULT_SIGNALS, trial: Iterable[str] = (), fill: bool = True,
               smoke: Iterable[str] = SMOKE_SET) -> FilePick:
    """The ordered, budgeted file-level pick for one change."""
    edited = edited_test_files(change)
    for f in edited:  # a new test file is a candidate too, at a default cost
        universe.durations.setdefault(f, DEFAULT_NEW_FILE_S)
    total = round(sum(universe.durations.values()), 3)
    if is_docs_only(change.paths):
        chosen = [f for f in smoke if f in universe.durations]
        files = [PickedFile(file=f, score=0.0, estimated_s=round(universe.durations[f], 3),
                            reason="[smoke] the change only touches documentation; the smoke set checks the build",
                            tests=_tests_for(f, universe, set())) for f in chosen]
        empty = None if files else "the change only touches documentation and no smoke-set file is runnable in this plan"
        return FilePick(files, [], total, "smoke", empty, [f.file for f in files])
    counted, tried, pointed = score_files(change, universe, signals, frozenset(trial))
    scores = {f: round(sum(s.score for s in sigs), 4) for f, sigs in counted.items() if f in universe.durations}
    must = set(edited) & set(universe.durations)
    ranking = sorted(scores, key=lambda f: (f not in must, -_density(scores[f], universe.durations[f]), f))
    files: list[PickedFile] = []
    dropped: list[DroppedTest] = []
    spent = 0.0
    for f in ranking:
        cost = round(universe.durations[f], 3)
        sigs = counted[f]
        if f not in must and budget_s is not None and spent + cost > budget_s:
            if len(dropped) < MAX_DROPPED:
                dropped.append(DroppedTest(id=f, reason=f"over the {budget_s:g}s budget (score {scores[f]:g}, "
                                                        f"{cost:g}s): {_reason(sigs)}"))
            continue
        spent += cost
        reason = "[edited-test] always run: " + _reason(sigs) if f in must else _reason(sigs)
        files.append(PickedFile(file=f, score=scores[f], estimated_s=cost, reason=reason, signals=sigs,
                                trial=tried.get(f, []), tests=_tests_for(f, universe, pointed.get(f, set()))))
    if fill and budget_s is not None:
        rest = sorted((f for f in universe.durations if f not in scores),
                      key=lambda f: (-_breadth(f, universe), f))
        for f in rest:
            cost = round(universe.durations[f], 3)
            if spent + cost > budget_s:
                continue
            spent += cost
            files.append(PickedFile(file=f, score=0.0, estimated_s=cost,
                                    reason="[fill] no signal from this change; fits the budget and exercises many "
                                           "torch modules per second", trial=tried.get(f, []),
                                    tests=_tests_for(f, universe, set())))
    empty_reason = None
    if not files:
        if not universe.durations:
            empty_reason = "the plan has no runnable upstream test file"
        elif not change.paths:
            empty_reason = "the change has no changed paths"
        elif not scores:
            empty_reason = (f"no signal links the {len(change.paths)} changed path(s) to any of the "
                            f"{len(universe.durations)} runnable test files")
        else:
            empty_reason = f"every scored file is over the {budget_s:g}s budget (the cheapest needs " \
                           f"{min(universe.durations[f] for f in scores):g}s)"
    unscored = len(universe.durations) - len(scores)
    if unscored and not (fill and budget_s is not None):
        dropped.append(DroppedTest(id="*", reason=f"{unscored} runnable test files had no signal from this change"))
    return FilePick(files, dropped, total, "ranked", empty_reason, ranking)
