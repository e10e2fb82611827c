"""The report: Markdown a person reads and the CRCR triage verdict (schema v1) it carries."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from crcr.contracts.callback import TriageVerdict
from triage.bisect import analyze
from triage.history import Commit, History, Run, load_yaml
from triage.report import MAX_VERDICT_BYTES, markdown, verdict
from triage.rules import load_rules

HISTORIES = Path(__file__).parent / "histories"


def test_revert_report_has_suspect_links_failing_tests_evidence_and_action():
    h = load_yaml(HISTORIES / "revert_of_revert.yaml")
    a = analyze(h, load_rules())
    v = verdict(a)
    text = markdown(a, v)
    assert "**Recommended action:** Revert the upstream PR" in text
    assert "https://github.com/pytorch/pytorch/pull/302" in text
    assert "https://github.com/pytorch/pytorch/commit/5d0000000006" in text
    assert "## Failing tests" in text and "test\\_foo.py::test\\_foo" in text
    assert "## Evidence" in text and "## Log excerpts" in text and "fused_foo is not implemented" in text
    assert "## Retried" in text and "attempt 2" in text
    assert "crcr never reverts by itself" in text
    assert v["category"] == "upstream" and v["confidence"] == "high"
    assert v["suspected_upstream"] == {"pr": 302, "commit": "5d0000000006",
                                       "reason": "first failing commit right after a passing one, confirmed"}
    assert v["reproduced_on_retry"] is True
    TriageVerdict.model_validate(v)


def test_infra_and_flake_verdicts_name_no_suspect():
    for name, category in (("runner_pool_outage", "infra"), ("flaky_same_commit", "flake"), ("born_red", "backend")):
        a = analyze(load_yaml(HISTORIES / f"{name}.yaml"), load_rules())
        v = verdict(a)
        assert v["category"] == category and v["suspected_upstream"] is None
        assert v["evidence"], name


def _huge_history(n_tests: int = 400) -> History:
    commits = [Commit(sha=f"{i:012x}", position=i, pr=1000 + i) for i in range(6)]
    tests = [f"test_big.py::test_{i}_" + "x" * 200 for i in range(n_tests)]
    log = "E" * 5000
    runs = []
    for i, c in enumerate(commits):
        bad = i >= 3
        for attempt in (1, 2) if i == 3 else (1,):
            runs.append(Run(sha=c.sha, job="test-npu", attempt=attempt, conclusion="failure" if bad else "success",
                            tests={t: "failed" if bad else "passed" for t in tests},
                            messages={t: log for t in tests} if bad else {}, log=log,
                            started=i * 10.0, completed=i * 10.0 + 5, url=f"https://ci.example/run/{i}"))
    return History(backend="acme/torch-npu", commits=commits, runs=runs)


def test_verdict_is_capped_at_16_kb_and_10_evidence_items():
    a = analyze(_huge_history(), load_rules())
    assert a.action == "revert"
    v = verdict(a)
    assert len(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()) <= MAX_VERDICT_BYTES
    assert len(v["evidence"]) <= 10
    assert all(e["log_url"] is None or e["log_url"].startswith("https://") for e in v["evidence"])
    TriageVerdict.model_validate(v)
    assert len(markdown(a, v)) < 200_000


def test_untrusted_text_cannot_become_markdown_links_mentions_or_break_fences():
    h = load_yaml(HISTORIES / "race_two_prs.yaml")
    evil_test = "test_x.py::test_[click](http://evil.example)|@pytorch/team<img src=x>"
    evil_log = "```\n# Injected heading\n[link](http://evil.example) ghp_" + "a" * 36 + " token=hunter2\n```"
    h.runs = [replace(r, tests={evil_test if k.endswith("test_cumsum") else k: v for k, v in r.tests.items()},
                      log=evil_log if r.conclusion == "failure" else r.log) for r in h.runs]
    suspect = h.by_sha["7c0000000004"]
    h.commits[suspect.position] = replace(suspect, title="@everyone [pwn](http://evil.example)")
    a = analyze(h, load_rules())
    text = markdown(a, verdict(a))
    import re

    outside_fences = re.sub(r"(`{3,})text\n.*?\n\1", "", text, flags=re.S)
    assert not re.search(r"(?<!\\)\]\(http://evil", outside_fences)  # only escaped brackets, no link
    assert "@pytorch/team" not in outside_fences and "@everyone" not in outside_fences
    assert not re.search(r"(?<!\\)<img", outside_fences)
    assert "ghp_" + "a" * 36 not in text and "hunter2" not in text
    assert "\n# Injected heading" not in text.split("```text")[0]
    # the excerpt's own ``` cannot close the fence it sits in
    block = text[text.index("## Log excerpts"):]
    assert "````text" in block


def test_analysis_with_missing_baseline_says_so():
    a = analyze(load_yaml(HISTORIES / "missing_baseline.yaml"), load_rules())
    text = markdown(a, verdict(a))
    assert "missing\\_baseline" in text or "missing_baseline" in text
    assert "6a0000000004" in text
