"""A run the plan does not cover is never green: refused, or run/skipped under a stated default, and counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from crcr.contracts.results import load_results
from tests.runners.helpers import FIXTURE_TREE, crcr

TORCH_FILE = "test/test_torch.py"
LINEAR_FILE = "test/nn/test_linear.py"


def _plan(tmp_path: Path, default: str = "run") -> Path:
    """A plan covering test/test_torch.py only (test/nn/test_linear.py is unplanned)."""
    plan = tmp_path / "plan"
    plan.mkdir()
    (plan / "test_torch.yaml").write_text(
        f"""schema_version: 1
backend: cpu
upstream: {{file: {TORCH_FILE}}}
defaults: {{mode: {default}, reason: "file default for this test"}}
tests:
  - id: TestTorchDeviceTypeCPU::test_zeros_sum_cpu_float64
    mode: skip
    reason: no float64 here
    source: reviewer
""",
        encoding="utf-8",
    )
    return plan


def _run(tmp_path: Path, *extra: str) -> int:
    return crcr("run", "--device", "cpu", "--pytorch-src", str(FIXTURE_TREE), "--file", TORCH_FILE,
                "--file", "test/nn", "--plan", str(_plan(tmp_path)), "--results", str(tmp_path / "r.json"),
                "--no-rerun", *extra)


@pytest.mark.slow
def test_unplanned_files_refuse_the_run_by_default_and_say_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CI", raising=False)
    status = _run(tmp_path, "-k", "not test_fails_first_attempt_only")
    err = capsys.readouterr().err
    assert status == 1
    assert "error[unplanned]" in err and LINEAR_FILE in err and "nothing was run" in err
    assert "--unplanned run" in err and "crcr select plan" in err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_unplanned_skip_is_stated_and_counted(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CI", raising=False)
    status = _run(tmp_path, "--unplanned", "skip", "-k", "not test_fails_first_attempt_only")
    results = load_results(tmp_path / "r.json")
    linear = [t for t in results.tests if t.id.startswith(LINEAR_FILE)]
    assert linear and all(t.outcome == "skipped" and t.plan_source == "unplanned" for t in linear)
    assert "skipped under --unplanned skip" in linear[0].message
    counts = results.run.plan_counts
    planned = [t for t in results.tests if t.id.startswith(TORCH_FILE)]
    assert counts.planned == len(planned) and counts.unplanned == len(linear)
    assert counts.by_default == len(planned) - 1  # all but the reviewer's entry fell to the file default
    assert counts.unplanned_files == {LINEAR_FILE: len(linear)} and counts.unplanned_policy == "skip"
    assert counts.run == sum(1 for t in planned if t.outcome != "skipped") > 0
    err = capsys.readouterr().err
    assert f"planned {counts.planned}" in err and f"unplanned {counts.unplanned} (skipped under --unplanned skip" in err
    assert f"run {counts.run}" in err
    assert status == 0


@pytest.mark.slow
def test_unplanned_run_runs_them_and_records_why(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert _run(tmp_path, "--unplanned", "run", "-k", "not test_fails_first_attempt_only") == 0
    results = load_results(tmp_path / "r.json")
    linear = [t for t in results.tests if t.id.startswith(LINEAR_FILE)]
    assert linear and all(t.outcome == "passed" and t.plan_mode == "run" for t in linear)
    assert all(t.plan_source == "unplanned" and "--unplanned run" in t.plan_reason for t in linear)
    assert results.run.plan_counts.unplanned == len(linear) and results.run.plan_counts.unplanned_policy == "run"


@pytest.mark.slow
def test_a_run_where_everything_is_skipped_is_not_green(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CI", raising=False)
    status = crcr("run", "--device", "cpu", "--pytorch-src", str(FIXTURE_TREE), "--file", TORCH_FILE,
                  "--plan", str(_plan(tmp_path, default="skip")), "--results", str(tmp_path / "r.json"),
                  "-k", "zeros_sum")
    assert status == 1
    results = load_results(tmp_path / "r.json")
    assert results.tests and all(t.outcome == "skipped" for t in results.tests)
    assert results.run.plan_counts.run == 0 and results.run.plan_counts.planned == len(results.tests)
    assert "nothing ran, so the run is not green" in capsys.readouterr().err


def test_a_bad_unplanned_policy_is_bad_input(tmp_path, capsys):
    assert crcr("run", "--device", "cpu", "--unplanned", "maybe") == 2
    assert "--unplanned 'maybe'" in capsys.readouterr().err
