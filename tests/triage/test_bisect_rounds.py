"""k reruns per round (CRCR_TRIAGE_RERUNS_PER_ROUND): the gap is cut in k + 1 parts."""

from __future__ import annotations

from pathlib import Path

from triage.bisect import Limits, _cuts, analyze
from triage.history import load_yaml
from triage.rules import load_rules

STACK_GAP = Path(__file__).parent / "histories" / "ghstack_stack_gap.yaml"


def test_one_per_round_is_the_binary_search() -> None:
    analysis = analyze(load_yaml(STACK_GAP), load_rules())
    # the gap is 9a..04 and 9a..05 (the head 9a..06 failed): the middle one
    assert [r.sha for r in analysis.reruns] == ["9a0000000005"]


def test_two_per_round_run_both_commits_of_a_two_commit_gap_at_once() -> None:
    analysis = analyze(load_yaml(STACK_GAP), load_rules(), Limits(max_per_round=2))
    assert analysis.action == "bisect"
    assert sorted(r.sha for r in analysis.reruns) == ["9a0000000004", "9a0000000005"]


def test_cuts_split_the_gap_evenly() -> None:
    assert _cuts(5, 1) == [2]
    assert _cuts(5, 2) == [1, 3]
    assert _cuts(8, 3) == [2, 4, 6]
    assert _cuts(2, 3) == [0, 1]  # never past the end, never twice the same commit
