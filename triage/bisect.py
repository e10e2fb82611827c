"""Confirmation by bisection: which commits to rerun, within bounds.

For a break whose last good and first bad commits are not adjacent, rerun the middle
of the untested commits between them (binary search); for an adjacent pair whose
failure is neither reproduced nor sandwiched, rerun the first bad commit once more.
Bounds, all stateless given the history and the reruns already asked for:

- at most ``ceil(log2 N) + 1`` reruns per episode, N being the commits after the last
  good up to and including the first bad as the *organic* runs (not triage's reruns)
  first showed them: a binary search plus one reproduction;
- at most ``max_per_commit`` reruns of one commit;
- pacing: nothing new while a rerun (or any run) in the range is still awaited, and at
  most ``max_per_round`` requests per analysis (1: a binary search; k > 1: the gap is
  cut in k + 1 parts and those k commits run concurrently, fewer rounds for more runs).

When the budget is spent without confirmation the call becomes ``forward_fix`` with low
confidence: never a revert without the evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from triage.classify import Analysis, classify
from triage.history import History
from triage.rules import Rules


@dataclass(frozen=True)
class Limits:
    max_per_commit: int = 2
    max_per_round: int = 1


@dataclass(frozen=True)
class RerunPlan:
    sha: str
    reason: str


def rerun_bound(n: int) -> int:
    """ceil(log2 N) + 1 reruns for a range of N commits (N >= 1)."""
    return math.ceil(math.log2(n)) + 1 if n > 1 else 1


def _cuts(n: int, k: int) -> list[int]:
    """Positions cutting ``n`` commits in ``k + 1`` parts: the middle for k = 1."""
    if k <= 1:
        return [n // 2]
    return sorted({min(n - 1, (j + 1) * n // (k + 1)) for j in range(k)})


def _requested(history: History) -> dict[str, int]:
    """How many reruns triage asked for per SHA (requests, else the rerun runs seen)."""
    counts: dict[str, int] = {}
    if history.requests:
        for q in history.requests:
            counts[q.sha] = counts.get(q.sha, 0) + 1
    else:
        for r in history.runs:
            if r.rerun:
                counts[r.sha] = counts.get(r.sha, 0) + 1
    return counts


def _organic_range(history: History, rules: Rules, analysis: Analysis) -> list[str]:
    """The episode's range (after last good .. first bad) as the non-rerun runs showed it."""
    organic = replace(history, runs=[r for r in history.runs if not r.rerun], requests=[])
    first = classify(organic, rules)
    if first.kind == "new_break" and first.last_good is not None and first.first_bad is not None:
        lo, hi = first.last_good.position, first.first_bad.position
    else:
        lo, hi = analysis.last_good.position, analysis.first_bad.position  # type: ignore[union-attr]
    return [c.sha for c in history.commits[lo + 1: hi + 1]]


def plan(history: History, rules: Rules, analysis: Analysis, limits: Limits = Limits()) -> Analysis:
    """Fill ``analysis.reruns`` and settle ``bisect`` into bisect / wait / forward_fix."""
    if analysis.action != "bisect" or analysis.last_good is None or analysis.first_bad is None:
        return analysis
    requested = _requested(history)
    episode = _organic_range(history, rules, analysis)
    used = sum(requested.get(sha, 0) for sha in episode)
    budget = rerun_bound(len(episode)) - used
    pending = {r.sha for r in history.runs if r.pending}
    outstanding = {q.sha for q in history.requests if q.outstanding}
    gap = [c.sha for c in analysis.gap]
    in_flight = [s for s in [*gap, analysis.first_bad.sha] if s in pending or s in outstanding]
    if in_flight:
        analysis.action = "wait"
        analysis.notes.append(f"waiting for runs already in flight at {', '.join(s[:12] for s in in_flight)}")
        return analysis
    if gap:
        candidates = [s for s in gap if requested.get(s, 0) < limits.max_per_commit]
        # binary search: the middle of the untested commits, or the nearest one still allowed;
        # k per round: the points that cut the gap in k + 1 parts first (run concurrently)
        cuts = _cuts(len(gap), min(limits.max_per_round, max(budget, 1)))
        candidates.sort(key=lambda s: (min(abs(gap.index(s) - c) for c in cuts), gap.index(s)))
        reason = f"bisect {len(gap)} untested commit(s) between {analysis.last_good.sha[:12]} and {analysis.first_bad.sha[:12]}"
    else:
        candidates = [analysis.first_bad.sha] if requested.get(analysis.first_bad.sha, 0) < limits.max_per_commit else []
        reason = f"reproduce the failure at {analysis.first_bad.sha[:12]} before blaming it"
    chosen = candidates[: max(0, min(limits.max_per_round, budget))]
    if not chosen:
        analysis.action = "forward_fix"
        analysis.confidence = "low"
        analysis.notes.append(f"rerun budget spent ({used} rerun(s) for a range of {len(episode)} commit(s), bound "
                              f"{rerun_bound(len(episode))}) without confirming a single commit: no revert "
                              "recommendation without that evidence")
        return analysis
    analysis.reruns = [RerunPlan(sha, reason) for sha in chosen]
    return analysis


def analyze(history: History, rules: Rules, limits: Limits = Limits(), revert_window: int = 100) -> Analysis:
    """Classify, then plan the reruns a bisect call needs."""
    return plan(history, rules, classify(history, rules, revert_window=revert_window), limits)
