"""A fixture upstream tree run with --pytorch-src: crashes and hangs recorded, the run completes."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from crcr.contracts.results import load_results
from tests.runners.helpers import FIXTURE_TREE, crcr


@pytest.mark.slow
def test_checkout_run_survives_abort_segfault_and_hang(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    results_path, junit = tmp_path / "results.json", tmp_path / "junit.xml"
    status = crcr("run", "--device", "cpu", "--pytorch-src", str(FIXTURE_TREE), "--timeout", "3",
                  "--results", str(results_path), "--junit", str(junit), "--log", str(tmp_path / "log"))
    assert status == 1
    results = load_results(results_path)
    by_id = {t.id: t for t in results.tests}
    fatal = "test/test_fatal.py::TestFatalCPU::"
    abort, segv, hang = by_id[fatal + "test_b_abort_cpu"], by_id[fatal + "test_d_segfault_cpu"], by_id[fatal + "test_e_hang_cpu"]
    assert (abort.outcome, abort.error_class) == ("error", "Crash") and "SIGABRT" in abort.message
    assert (segv.outcome, segv.error_class) == ("error", "Crash") and "SIGSEGV" in segv.message
    assert "test_d_segfault" in segv.message  # faulthandler's traceback names the culprit
    assert (hang.outcome, hang.error_class) == ("error", "Timeout") and "test_e_hang" in hang.message
    # the tests between and after the fatal ones still ran
    for name in ("test_a_before_cpu", "test_c_between_cpu", "test_f_after_cpu"):
        assert by_id[fatal + name].outcome == "passed"
    assert results.run.restarts == 3
    # upstream decorators behave as upstream: device restrictions, skips, expected failures, nesting
    tdt = "test/test_torch.py::TestTorchDeviceTypeCPU::"
    assert by_id[tdt + "test_cuda_only_thing_cpu"].outcome == "skipped"
    assert by_id[tdt + "test_cpu_only_thing_cpu"].outcome == "passed"
    assert by_id[tdt + "test_known_broken_cpu"].outcome == "xfailed"
    assert by_id["test/test_torch.py::TestTorch::test_numel_n_2"].outcome == "passed"
    assert by_id["test/nn/test_linear.py::TestLinearCPU::test_linear_matches_matmul_cpu_float32"].outcome == "passed"
    assert by_id["test/test_binary_ufuncs.py::TestBinaryUfuncsCPU::test_commutes_with_broadcast_sub_cpu_int64"].outcome == "passed"
    flaky = by_id["test/test_torch.py::TestRetry::test_fails_first_attempt_only"]
    assert flaky.outcome == "flaky" and flaky.attempts == ["failed", "passed"]
    assert abort.repro and "--pytorch-src" in abort.repro and fatal + "test_b_abort_cpu" in abort.repro
    suite = ET.parse(junit).getroot().find("testsuite")
    assert int(suite.get("errors")) == 3 and int(suite.get("tests")) == len(results.tests)


@pytest.mark.slow
def test_checkout_collect_only_writes_an_inventory_and_shards_partition_it(tmp_path, monkeypatch):
    from crcr.contracts.inventory import load_inventory

    monkeypatch.delenv("CI", raising=False)
    base = ["run", "--device", "cpu", "--pytorch-src", str(FIXTURE_TREE), "--collect-only"]
    assert crcr(*base, "--inventory", str(tmp_path / "all.json")) == 0
    inventory = load_inventory(tmp_path / "all.json")
    assert inventory.source == "pytorch-src" and inventory.device == "cpu"
    by_id = inventory.by_id()
    op_test = by_id["test/test_binary_ufuncs.py::TestBinaryUfuncsCPU::test_commutes_with_broadcast_mul_cpu_float32"]
    assert (op_test.op, op_test.dtype, op_test.template, op_test.cls) == ("mul", "float32", "test_commutes_with_broadcast", "TestBinaryUfuncsCPU")
    assert op_test.opinfo_fingerprint and op_test.source_fingerprint
    cuda_only = by_id["test/test_torch.py::TestTorchDeviceTypeCPU::test_cuda_only_thing_cpu"]
    assert "onlyCUDA" in cuda_only.decorators
    parts = []
    for index in (1, 2):
        out = tmp_path / f"shard{index}.json"
        assert crcr(*base, "--shard", f"{index}/2", "--inventory", str(out)) == 0
        parts.append({t.id for t in load_inventory(out).tests})
    assert not parts[0] & parts[1] and parts[0] | parts[1] == set(by_id)
    # the same collection twice gives the same fingerprints
    assert crcr(*base, "--inventory", str(tmp_path / "again.json")) == 0
    again = load_inventory(tmp_path / "again.json").by_id()
    assert {i: t.fingerprint for i, t in again.items()} == {i: t.fingerprint for i, t in by_id.items()}


@pytest.mark.slow
def test_pick_runs_only_the_picked_tests_in_pick_order(tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.delenv("CI", raising=False)
    tdt = "test/test_torch.py::TestTorchDeviceTypeCPU::"
    picked = [tdt + "test_zeros_sum_cpu_float64", "test/test_torch.py::TestTorch::test_numel_n_1",
              tdt + "test_no_such_test_cpu"]
    pick = tmp_path / "pick.json"
    pick.write_text(json.dumps({"schema_version": 1, "backend": "cpu", "tests": [
        {"id": test_id, "reason": "touched by the diff"} for test_id in picked]}))
    status = crcr("run", "--device", "cpu", "--pytorch-src", str(FIXTURE_TREE), "--file", "test/test_torch.py",
                  "--pick", str(pick), "--results", str(tmp_path / "r.json"))
    assert status == 0
    results = load_results(tmp_path / "r.json")
    assert [t.id for t in results.tests] == picked[:2]
    assert results.run.pick_digest and results.run.model_extra["pick_missing"] == 1
    assert "1 picked tests were not collected here" in capsys.readouterr().err


@pytest.mark.slow
def test_an_id_that_does_not_exist_is_an_error_not_an_empty_green_run(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CI", raising=False)
    status = crcr("run", "--device", "cpu", "--pytorch-src", str(FIXTURE_TREE), "--file", "test/nn",
                  "--id", "test/nn/test_linear.py::TestLinearCPU::test_gone_cpu", "--results", str(tmp_path / "r.json"))
    assert status == 1
    assert "none of the 1 --id tests was collected" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()
