"""`crcr snpu info` and `crcr snpu capabilities`, and the TORCH_TEST_DEVICES hook end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from crcr.cli.main import main
from runners.snpu import capabilities, testing_hook

ROOT = Path(__file__).resolve().parents[3]


def test_info_json_describes_device_and_machine(capsys: pytest.CaptureFixture[str]) -> None:
    main(["snpu", "info", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == "snpu:0" and data["available"] is True
    assert data["machine"]["cores"] == 32
    assert data["kernels"]["matmul"] >= 4
    assert set(data["execution"]) == {"tiled", "whole", "view"} and data["execution"]["tiled"] > 100


def test_info_ops_says_how_each_op_runs(capsys: pytest.CaptureFixture[str]) -> None:
    main(["snpu", "info", "--json", "--ops"])
    ops = json.loads(capsys.readouterr().out)["ops"]
    assert ops["aten::mm"] == "tiled" and ops["aten::where.self"] == "tiled"
    assert ops["aten::masked_fill.Scalar"] == "tiled"
    assert ops["aten::sort"] == "whole" and ops["aten::linalg_inv_ex"] == "whole"
    assert ops["aten::view"] == "view"


def test_capabilities_without_sweep_is_deterministic(tmp_path: Path) -> None:
    out1, out2 = tmp_path / "a.yaml", tmp_path / "b.yaml"
    main(["snpu", "capabilities", "--no-opinfo", "--out", str(out1)])
    main(["snpu", "capabilities", "--no-opinfo", "--out", str(out2)])
    assert out1.read_bytes() == out2.read_bytes()
    doc = yaml.safe_load(out1.read_text())
    assert doc["backend"] == "snpu" and "float64" in doc["dtypes"]["refused"]
    assert "aten::mm" in doc["aten_ops"]["matmul"]
    assert "aten::_softmax" in doc["aten_ops"]["softmax"]


def test_capabilities_sweeps_the_named_opinfo_entries_and_caches(tmp_path: Path) -> None:
    out, cache = tmp_path / "snpu.yaml", tmp_path / "sweep.json"
    argv = [
        "snpu",
        "capabilities",
        "--op",
        "mul",
        "--op",
        "linalg.eig",
        "--out",
        str(out),
        "--cache",
        str(cache),
    ]
    main(argv)
    doc = yaml.safe_load(out.read_text())
    assert doc["opinfo"]["by_dtype"]["float32"]["pass"] == ["mul"]
    assert doc["opinfo"]["by_dtype"]["float32"]["fail"] == {"linalg.eig": "SnpuUnsupportedOpError"}
    assert "float64" not in doc["opinfo"]["by_dtype"]
    first = out.read_bytes()
    stamp = cache.stat().st_mtime_ns
    main(argv)  # the cache is current: reused, same file
    assert cache.stat().st_mtime_ns == stamp
    assert out.read_bytes() == first


def test_capabilities_rejects_unknown_opinfo_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(
            [
                "snpu",
                "capabilities",
                "--op",
                "no_such_op",
                "--out",
                str(tmp_path / "x.yaml"),
                "--cache",
                str(tmp_path / "c.json"),
            ]
        )
    assert info.value.code == 2
    assert "no OpInfo entry named no_such_op" in capsys.readouterr().err


def test_committed_capability_file_matches_what_is_registered() -> None:
    doc = yaml.safe_load((ROOT / "configs" / "backends" / "snpu.yaml").read_text())
    assert doc["aten_ops"] == capabilities.registered_ops(), "stale: run `crcr snpu capabilities`"
    assert doc["out_routes"] == capabilities.routed_out_overloads(), "stale: run `crcr snpu capabilities`"
    assert doc["out_routes"]["aten::pow.Scalar_out"] == "aten::pow.Scalar"
    assert "aten::full.out" not in doc["out_routes"]
    assert doc["execution"] == capabilities.executions(), "stale: run `crcr snpu capabilities`"
    assert doc["limits"]["row_limits"] == capabilities.row_limits(), "stale: run `crcr snpu capabilities`"
    assert "aten::where.self" in doc["execution"]["tiled"] and "aten::sort" in doc["execution"]["whole"]
    assert doc["opinfo"]["covered_count"]["float32"] >= 150


@pytest.mark.slow
def test_torch_test_devices_hook_instantiates_snpu_tests(tmp_path: Path) -> None:
    test_file = tmp_path / "test_generic.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import torch
            from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
            from torch.testing._internal.common_utils import TestCase

            class TestGeneric(TestCase):
                @dtypes(torch.float32, torch.float16)
                def test_add(self, device, dtype):
                    a = torch.ones(3, device=device, dtype=dtype)
                    self.assertEqual((a + a).cpu(), torch.full((3,), 2.0, dtype=dtype))

            instantiate_device_type_tests(TestGeneric, globals())
            """
        )
    )
    env = dict(os.environ)
    env["TORCH_TEST_DEVICES"] = testing_hook.path()
    env["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(test_file)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "TestGenericPRIVATEUSE1::test_add_snpu_float32" in proc.stdout
    assert "TestGenericPRIVATEUSE1::test_add_snpu_float16" in proc.stdout
    assert "TestGenericCPU" not in proc.stdout


def test_only_native_device_type_tests_run_on_snpu_when_torch_testing_came_first(tmp_path: Path) -> None:
    """A conftest (like an old checkout's compatibility shim) imports torch.testing before snpu exists:
    @onlyNativeDeviceTypes reads common_device_type's own NATIVE_DEVICES, which must name snpu too."""
    (tmp_path / "conftest.py").write_text("import torch.testing._internal.common_device_type  # noqa: F401\n")
    (tmp_path / "test_native.py").write_text(textwrap.dedent(
        """
        import torch
        from torch.testing._internal.common_device_type import instantiate_device_type_tests, onlyNativeDeviceTypes
        from torch.testing._internal.common_utils import TestCase

        class TestNative(TestCase):
            @onlyNativeDeviceTypes
            def test_native(self, device):
                self.assertEqual(torch.ones(2, device=device).sum().item(), 2.0)

        instantiate_device_type_tests(TestNative, globals())
        """))
    env = dict(os.environ)
    env["TORCH_TEST_DEVICES"] = testing_hook.path()
    env["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "test_native.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "PASSED test_native.py::TestNativePRIVATEUSE1::test_native_snpu" in proc.stdout
