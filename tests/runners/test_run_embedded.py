"""End to end over a slice of the embedded op suite, on cpu and on snpu, with a plan."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from crcr.contracts.results import load_results
from tests.runners.helpers import crcr, summary_counts


def _plan(tmp_path: Path, cls: str, device: str, xfail: str, strict: str) -> Path:
    plan = tmp_path / "plan"
    plan.mkdir()
    (plan / "test_ops.yaml").write_text(
        f"""schema_version: 1
backend: {device}
upstream: {{file: test/test_ops.py}}
defaults: {{mode: run, reason: "run everything not listed"}}
tests:
  - id: {cls}::test_noncontiguous_samples_.*_float64
    mode: skip
    reason: no float64 units on this backend
    source: reviewer
  - id: {cls}::{xfail}
    mode: xfail
    reason: float64 is not a native dtype
    source: logs
  - id: {cls}::{strict}
    mode: xfail_strict
    reason: kept strict to catch a silent fix
    source: reviewer
""",
        encoding="utf-8",
    )
    return plan


def _run(tmp_path: Path, device: str, cls: str, xfail: str, strict: str) -> tuple[int, Path, Path, Path]:
    results, junit, log = tmp_path / "results.json", tmp_path / "junit.xml", tmp_path / "pytest.log"
    status = crcr(
        "run", "--device", device, "--plan", str(_plan(tmp_path, cls, device, xfail, strict)),
        "-k", "(compare_cpu or noncontiguous) and (add or mul) and (float32 or float64)",
        "--results", str(results), "--junit", str(junit), "--log", str(log), "--unplanned", "skip",
    )
    return status, results, junit, log


def _assert_agree(results_path: Path, junit_path: Path, log_path: Path) -> dict[str, int]:
    results = load_results(results_path)
    counts = results.counts()
    mine = {k: v for k, v in counts.items() if v}
    theirs = summary_counts(log_path)
    theirs.pop("deselected", None)
    # pytest counts a flaky test (failed, then passed on rerun) as passed
    expected = dict(mine)
    if expected.pop("flaky", 0):
        expected["passed"] = counts["passed"] + counts["flaky"]
    assert theirs == expected
    suite = ET.parse(junit_path).getroot().find("testsuite")
    assert int(suite.get("tests")) == len(results.tests)
    assert int(suite.get("failures")) == counts["failed"]
    assert int(suite.get("errors")) == counts["error"]
    assert int(suite.get("skipped")) == counts["skipped"] + counts["xfailed"]
    return counts


@pytest.mark.slow
def test_embedded_slice_on_cpu_applies_the_plan(tmp_path, small_suite):
    status, results_path, junit, log = _run(tmp_path, "cpu", "TestCommonCPU",
                                            "test_noncontiguous_samples_add_cpu_float32",
                                            "test_noncontiguous_samples_mul_cpu_float32")
    counts = _assert_agree(results_path, junit, log)
    results = load_results(results_path)
    by_id = {t.id: t for t in results.tests}
    skipped = by_id["test/test_ops.py::TestCommonCPU::test_noncontiguous_samples_add_cpu_float64"]
    assert skipped.outcome == "skipped"
    assert skipped.plan_mode == "skip" and skipped.plan_source == "reviewer"
    assert "no float64 units on this backend" in skipped.message
    # a plain xfail that passes on cpu is an xpass; a strict one is a failure
    assert by_id["test/test_ops.py::TestCommonCPU::test_noncontiguous_samples_add_cpu_float32"].outcome == "xpassed"
    strict = by_id["test/test_ops.py::TestCommonCPU::test_noncontiguous_samples_mul_cpu_float32"]
    assert strict.outcome == "failed" and "XPASS(strict)" in strict.message and strict.repro
    # as upstream, the suite itself skips comparing the CPU with itself, and says why
    same = by_id["test/test_ops.py::TestCommonCPU::test_compare_cpu_add_cpu_float32"]
    assert same.outcome == "skipped" and "nothing to compare on the CPU itself" in same.message
    # files no plan file covers are skipped, and the reason says so
    unplanned = by_id["test/test_ops_gradients.py::TestBwdGradientsCPU::test_backward_compare_cpu_add_cpu_float32"]
    assert unplanned.outcome == "skipped" and unplanned.plan_source == "unplanned"
    assert "no plan file covers test/test_ops_gradients.py; skipped under --unplanned skip" in unplanned.message
    assert results.run.plan_counts.unplanned_files.keys() == {"test/test_ops_gradients.py"}
    assert counts == {**counts, "xpassed": 1, "failed": 1}
    assert status == 1  # the strict xpass fails the run
    assert results.run.device == "cpu" and results.run.torch_version.startswith("2.")
    assert results.run.plan_digest and results.run.source == "embedded" and results.run.host


@pytest.mark.slow
def test_embedded_slice_on_snpu_records_counters_and_plan_reasons(tmp_path, small_suite):
    status, results_path, junit, log = _run(tmp_path, "snpu", "TestCommonPRIVATEUSE1",
                                            "test_compare_cpu_add_snpu_float64", "test_compare_cpu_mul_snpu_float32")
    _assert_agree(results_path, junit, log)
    results = load_results(results_path)
    by_id = {t.id: t for t in results.tests}
    prefix = "test/test_ops.py::TestCommonPRIVATEUSE1::"
    # ids as upstream CI names them: class after the dispatch key, method after the device
    assert all(i.startswith(("test/test_ops.py::TestCommonPRIVATEUSE1::", "test/test_modules.py::",
                             "test/test_ops_gradients.py::")) for i in by_id)
    xfailed = by_id[prefix + "test_compare_cpu_add_snpu_float64"]
    assert xfailed.outcome == "xfailed" and "float64 is not a native dtype" in xfailed.message
    assert by_id[prefix + "test_noncontiguous_samples_mul_snpu_float64"].outcome == "skipped"
    passed = by_id[prefix + "test_compare_cpu_add_snpu_float32"]
    assert passed.outcome == "passed"
    assert passed.counters and passed.counters["cycles"] > 0 and passed.counters["ops"] > 0
    unplanned_float64 = by_id[prefix + "test_compare_cpu_mul_snpu_float64"]
    assert unplanned_float64.outcome == "failed"
    assert unplanned_float64.attempts == ["failed", "failed"]  # rerun once: broken, not flaky
    assert unplanned_float64.error_class and "float64" in unplanned_float64.message
    assert status == 1
