"""Generated, seeded scenario histories (triage.scenarios): the right call after the reruns
triage asks for, within the rerun bound, and never a revert that the truth does not support.

Seeds 0-299 here are the ones the classifier was checked against while it was written;
benchmarks/triage_eval.py measures on seeds from 100000 up.
"""

from __future__ import annotations

import math

import pytest

from triage.bisect import rerun_bound
from triage.rules import load_rules
from triage.scenarios import KINDS, generate, resolve

RULES = load_rules()
SEEDS = range(30)


def correct(sc, outcome) -> bool:
    a = outcome.analysis
    suspect = a.suspect.sha if a.suspect else None
    return (a.kind, a.category, a.action) == (sc.truth.kind, sc.truth.category, sc.truth.action) and \
        (suspect == sc.truth.suspect if sc.truth.kind in ("new_break", "recovered") else True)


@pytest.mark.parametrize("kind", KINDS)
def test_scenarios_of_each_kind_get_the_right_call(kind: str) -> None:
    right = 0
    for seed in SEEDS:
        sc = generate(seed, kind)
        out = resolve(sc, RULES)
        a = out.analysis
        right += correct(sc, out)
        # bounds: a binary search plus one reproduction over the organic range, never more
        if out.naive_reruns:
            assert out.reruns <= rerun_bound(out.naive_reruns) + rerun_bound(1), (seed, out.reruns)
        assert out.reruns <= math.ceil(math.log2(len(sc.history.commits))) + 2
        # never a revert the truth does not support, and never of the wrong commit
        if a.action == "revert":
            assert sc.truth.action == "revert", (seed, a.summary)
            assert a.suspect is not None and a.suspect.sha == sc.truth.suspect, (seed, a.summary)
            assert a.reproduced or a.sandwiched
    assert right >= 0.85 * len(SEEDS), f"{kind}: {right}/{len(SEEDS)} right"


def test_a_gap_is_bisected_to_the_breaking_commit() -> None:
    sc = generate(3, "gap")
    out = resolve(sc, RULES)
    assert out.reruns >= 1  # the stack's inner commits were never dispatched
    assert out.analysis.action == "revert"
    assert out.analysis.suspect.sha == sc.truth.suspect
    assert {r.sha for r in sc.history.runs if r.rerun} <= {c.sha for c in sc.history.commits}


def test_missing_baseline_is_rerun_not_counted_as_a_pass() -> None:
    sc = generate(5, "missing_baseline")
    stale = [r for r in sc.history.runs if not r.baseline_ok]
    assert stale, "the scenario has a run that tested another torch"
    out = resolve(sc, RULES)
    assert stale[0].sha in {r.sha for r in sc.history.runs if r.rerun}
    assert out.analysis.suspect.sha == sc.truth.suspect


def test_generation_is_deterministic() -> None:
    a, b = generate(42), generate(42)
    assert [(r.sha, r.conclusion, r.tests) for r in a.history.runs] == [(r.sha, r.conclusion, r.tests) for r in b.history.runs]


@pytest.mark.parametrize("seed", range(10))
def test_an_outage_across_backends_is_infra_for_each_and_blames_no_commit(seed: int) -> None:
    from triage.scenarios import generate_shared_outage

    scenarios = generate_shared_outage(seed, backends=3)
    assert len({sc.history.backend for sc in scenarios}) == 3
    for sc in scenarios:
        out = resolve(sc, RULES)
        assert out.analysis.kind == "infra", (sc.history.backend, out.analysis.summary)
        assert out.analysis.action == "infra_ticket" and out.analysis.suspect is None
        assert out.reruns == 0
