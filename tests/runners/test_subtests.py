"""A test whose ``self.subTest(...)`` blocks fail is a failed test, never a green one.

pytest 9 reports each failing unittest subtest on its own and the test itself as passed; upstream files such as
``test_native_mha.py`` run their whole body inside ``subTest``, so crcr must fold the subtests into the test's outcome.
"""

from __future__ import annotations

import textwrap

import pytest

from crcr.contracts.results import load_results
from tests.runners.helpers import crcr

TEST_FILE = textwrap.dedent(
    """
    import torch
    from torch.testing._internal.common_device_type import instantiate_device_type_tests
    from torch.testing._internal.common_utils import TestCase, run_tests


    class TestSub(TestCase):
        def test_one_case_fails(self, device):
            for n in (1, 2, 3):
                with self.subTest(n=n):
                    if n == 2:
                        raise ValueError(f"case {n} is wrong on {device}")
                    self.assertEqual(torch.ones(n, device=device).sum().item(), n)

        def test_every_case_passes(self, device):
            for n in (1, 2):
                with self.subTest(n=n):
                    self.assertEqual(torch.ones(n, device=device).sum().item(), n)

        def test_the_body_fails_after_the_cases(self, device):
            for n in (1, 2):
                with self.subTest(n=n):
                    pass
            raise KeyError("after the cases")


    instantiate_device_type_tests(TestSub, globals())

    if __name__ == "__main__":
        run_tests()
    """
)


@pytest.mark.slow
def test_a_failing_subtest_fails_its_test(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CI", raising=False)
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_sub.py").write_text(TEST_FILE, encoding="utf-8")
    results_path = tmp_path / "results.json"
    status = crcr("run", "--device", "cpu", "--pytorch-src", str(tmp_path), "--no-rerun",
                  "--results", str(results_path), "--junit", str(tmp_path / "junit.xml"))
    assert status == 1  # a failed test: the run is not green
    by_id = {t.id.rsplit("::", 1)[-1]: t for t in load_results(results_path).tests}
    failed = by_id["test_one_case_fails_cpu"]
    assert (failed.outcome, failed.error_class) == ("failed", "ValueError"), failed
    assert "1 subtest(s) failed" in failed.message and "n=2" in failed.message
    assert "case 2 is wrong on cpu" in failed.message
    assert by_id["test_every_case_passes_cpu"].outcome == "passed"
    body = by_id["test_the_body_fails_after_the_cases_cpu"]
    assert (body.outcome, body.error_class) == ("failed", "KeyError")
    junit = (tmp_path / "junit.xml").read_text(encoding="utf-8")
    assert junit.count("<failure") == 2


@pytest.mark.slow
def test_a_planned_xfail_whose_subtest_fails_is_xfailed(tmp_path, monkeypatch):
    """The plan's xfail: pytest reports the failing subtest as an expected failure and the item as an unexpected
    pass; the test failed as the plan expected (refine must not read it as fixed)."""
    monkeypatch.delenv("CI", raising=False)
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_sub.py").write_text(TEST_FILE, encoding="utf-8")
    plan = tmp_path / "plan"
    plan.mkdir()
    (plan / "test_sub.yaml").write_text(
        """schema_version: 1
backend: cpu
upstream: {file: test/test_sub.py}
defaults: {mode: run, reason: "file default"}
tests:
  - id: TestSubCPU::test_one_case_fails_cpu
    mode: xfail
    reason: case 2 is known broken
    source: reviewer
  - id: TestSubCPU::test_every_case_passes_cpu
    mode: xfail
    reason: stale expectation
    source: reviewer
""",
        encoding="utf-8",
    )
    results_path = tmp_path / "results.json"
    crcr("run", "--device", "cpu", "--pytorch-src", str(tmp_path), "--plan", str(plan), "--no-rerun",
         "--results", str(results_path))
    by_id = {t.id.rsplit("::", 1)[-1]: t for t in load_results(results_path).tests}
    assert by_id["test_one_case_fails_cpu"].outcome == "xfailed", by_id["test_one_case_fails_cpu"]
    assert by_id["test_every_case_passes_cpu"].outcome == "xpassed", by_id["test_every_case_passes_cpu"]
