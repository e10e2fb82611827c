"""Triage over generated histories: suspect and category precision/recall, reruns vs naive.

Each history comes from ``triage.scenarios.generate(seed)`` (a random scenario kind,
trunk length, pushes, tests, noise); triage analyses it, the simulator answers every
rerun it asks for, and the final call is compared with the truth.

- Suspect commit: precision = named suspects that are right / suspects named (a final
  call of revert, forward fix or recovered with a commit); recall = right suspects /
  histories whose truth has one. Reverts are also counted on their own.
- Category: per-category precision and recall, and accuracy, of the verdict's category.
- Reruns: what triage asked for against a naive strategy that reruns every commit after
  the last good up to the first bad (as the organic runs showed them), as a ratio.
- Baseline measured in the same run: "blame the first failing dispatched commit after
  the last passing one, call every failure upstream" (what an on-call does at a glance).

The headline uses seeds 100000..100999; the classifier was written and checked against
seeds 0..299 (tests/triage/test_scenarios.py), never these. ``--seeds 0:300`` shows the
tuned range for comparison.

    .venv/bin/python benchmarks/triage_eval.py            # 1,000 histories, seeds 100000..100999
    .venv/bin/python benchmarks/triage_eval.py --seeds 0:300
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triage.bisect import rerun_bound
from triage.rules import load_rules
from triage.scenarios import generate, resolve

CATEGORIES = ("upstream", "backend", "infra", "flake", "unknown")


def naive_call(sc) -> tuple[str, str | None]:
    """The at-a-glance baseline: any failing run means upstream broke at the first failing
    dispatched commit after the last passing run; no failure means nothing."""
    by_pos = sorted(sc.history.runs, key=lambda r: sc.history.position(r.sha) or 0)
    failing = [r for r in by_pos if r.conclusion not in ("success", None)]
    if not failing:
        return "unknown", None
    last_pass = max((sc.history.position(r.sha) for r in by_pos if r.conclusion == "success"), default=-1)
    after = [r for r in failing if (sc.history.position(r.sha) or 0) > last_pass]
    first = after[0] if after else failing[-1]
    return "upstream", first.sha


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="100000:101000", help="START:END of generator seeds (default: untuned range)")
    args = ap.parse_args()
    start, end = (int(x) for x in args.seeds.split(":"))
    rules = load_rules()
    named = right_named = with_truth = reverts = right_reverts = 0
    base_named = base_right = 0
    reruns = naive = bound_violations = 0
    cat_tp: Counter[str] = Counter()
    cat_pred: Counter[str] = Counter()
    cat_true: Counter[str] = Counter()
    base_cat_right = 0
    per_kind: Counter[str] = Counter()
    per_kind_right: Counter[str] = Counter()
    kind_reruns: Counter[str] = Counter()
    kind_naive: Counter[str] = Counter()
    t0 = time.perf_counter()
    n = end - start
    for i, seed in enumerate(range(start, end)):
        sc = generate(seed)
        base_category, base_suspect = naive_call(sc)
        out = resolve(sc, rules)
        a = out.analysis
        truth = sc.truth
        suspect = a.suspect.sha if a.suspect is not None and a.action in ("revert", "forward_fix", "none") else None
        if truth.suspect is not None:
            with_truth += 1
        if suspect is not None:
            named += 1
            right_named += suspect == truth.suspect
        if a.action == "revert":
            reverts += 1
            right_reverts += suspect == truth.suspect and truth.action == "revert"
        if base_suspect is not None:
            base_named += 1
            base_right += base_suspect == truth.suspect
        base_cat_right += base_category == truth.category
        cat_pred[a.category] += 1
        cat_true[truth.category] += 1
        cat_tp[a.category] += a.category == truth.category
        reruns += out.reruns
        naive += out.naive_reruns
        if out.reruns > rerun_bound(max(1, out.naive_reruns)):
            bound_violations += 1
        per_kind[sc.kind] += 1
        kind_reruns[sc.kind] += out.reruns
        kind_naive[sc.kind] += out.naive_reruns
        per_kind_right[sc.kind] += (a.kind, a.action) == (truth.kind, truth.action) and \
            (truth.suspect is None or suspect == truth.suspect or truth.kind != "new_break")
        if (i + 1) % 100 == 0:
            print(f"  {i + 1}/{n} histories ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)

    def pct(a: int, b: int) -> str:
        return f"{a / b:.3f}" if b else "n/a"

    print(f"histories: {n} (seeds {start}..{end - 1}), {time.perf_counter() - t0:.1f} s")
    print(f"suspect commit: precision {pct(right_named, named)} ({right_named}/{named}), "
          f"recall {pct(right_named, with_truth)} ({right_named}/{with_truth})")
    print(f"revert recommendations: {reverts}, right {right_reverts} (precision {pct(right_reverts, reverts)})")
    print(f"baseline (first failing commit after the last pass): precision {pct(base_right, base_named)} "
          f"({base_right}/{base_named}), recall {pct(base_right, with_truth)}")
    acc = sum(cat_tp.values())
    print(f"category accuracy: {pct(acc, n)} ({acc}/{n}); baseline (every failure upstream) {pct(base_cat_right, n)}")
    print("| category | precision | recall | predicted | true |")
    print("|---|---|---|---|---|")
    for c in CATEGORIES:
        print(f"| {c} | {pct(cat_tp[c], cat_pred[c])} | {pct(cat_tp[c], cat_true[c])} | {cat_pred[c]} | {cat_true[c]} |")
    print(f"reruns: triage {reruns}, naive (every commit in the range) {naive}, ratio {pct(reruns, naive)}; "
          f"histories over the ceil(log2 N)+1 bound: {bound_violations}")
    print("per scenario (kind and action right, suspect right where there is one):")
    for k in sorted(per_kind):
        print(f"  {k}: {per_kind_right[k]}/{per_kind[k]}; reruns {kind_reruns[k]} vs naive {kind_naive[k]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
