"""The hand-written adversarial histories (tests/triage/histories/*.yaml) give the right call."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from triage.bisect import analyze
from triage.history import load_yaml
from triage.rules import load_rules

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.yaml"))


def test_the_histories_are_there() -> None:
    names = {p.stem for p in HISTORIES}
    for required in ("ghstack_stack_gap", "race_two_prs", "revert_of_revert", "late_out_of_order",
                     "test_renamed", "runner_pool_outage"):
        assert required in names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_history(path: Path) -> None:
    expect = yaml.safe_load(path.read_text())["expect"]
    history = load_yaml(path)
    analysis = analyze(history, load_rules())
    assert analysis.kind == expect["kind"], analysis.summary
    assert analysis.category == expect["category"]
    assert (analysis.suspect.sha if analysis.suspect else None) == expect["suspect"], analysis.summary
    if expect.get("pr") is not None:
        assert analysis.suspect is not None and analysis.suspect.pr == expect["pr"]
    assert analysis.action == expect["action"], (analysis.summary, analysis.notes)
    assert len(analysis.reruns) <= expect.get("max_reruns", 0)
    if expect.get("bisect_any_of"):
        assert analysis.reruns, "a bisect call must request a rerun"
        assert analysis.reruns[0].sha in expect["bisect_any_of"]
    else:
        assert not analysis.reruns
    assert analysis.failing_tests == expect["failing_tests"]
    if analysis.action == "revert":  # never without the evidence
        assert analysis.reproduced or analysis.sandwiched
        assert analysis.last_good is not None and not analysis.gap
