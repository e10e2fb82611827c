"""A file that does not import on the installed torch is a record and a non-zero exit, never hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from crcr.contracts.inventory import load_inventory, parse_import_failure
from crcr.contracts.results import load_results
from tests.runners.helpers import crcr

OLD_TREE = Path(__file__).resolve().parent.parent / "fixtures" / "pytorch_tree_old"


@pytest.mark.slow
def test_collect_only_records_the_file_with_the_missing_name_and_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CI", raising=False)
    inv_path = tmp_path / "inv.json"
    status = crcr("run", "--device", "cpu", "--pytorch-src", str(OLD_TREE), "--collect-only", "--inventory", str(inv_path))
    err = capsys.readouterr().err
    assert status == 1
    assert "1 file(s) could not be imported" in err
    assert "test/test_ops.py does not import on torch 2." in err and "has no 'skip'" in err
    inventory = load_inventory(inv_path)  # still written: the importable file's tests and the failure
    assert {t.file for t in inventory.tests} == {"test/test_fine.py"}
    [error] = inventory.errors
    assert (error.file, error.error_class, error.missing) == ("test/test_ops.py", "ImportError", "skip")
    assert error.module == "torch.testing._internal.common_methods_invocations"
    import torch

    assert error.torch_version == torch.__version__


@pytest.mark.slow
def test_a_run_names_what_the_installed_torch_lacks(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CI", raising=False)
    status = crcr("run", "--device", "cpu", "--pytorch-src", str(OLD_TREE), "--results", str(tmp_path / "r.json"))
    assert status == 1
    results = load_results(tmp_path / "r.json")
    by_id = {t.id: t for t in results.tests}
    assert by_id["test/test_fine.py::TestFineCPU::test_ones_cpu_float32"].outcome == "passed"
    broken = by_id["test/test_ops.py"]
    assert broken.outcome == "error" and broken.error_class == "CollectionError"
    assert broken.message.splitlines()[0].startswith("test/test_ops.py does not import on torch")
    assert "collection error: test/test_ops.py does not import" in capsys.readouterr().err


def test_import_failure_texts_are_read_for_the_missing_name():
    cases = {
        "E   ImportError: cannot import name 'binary_ufuncs_and_refs' from "
        "'torch.testing._internal.common_methods_invocations' (/x.py)":
            ("ImportError", "binary_ufuncs_and_refs", "torch.testing._internal.common_methods_invocations"),
        "E   ModuleNotFoundError: No module named 'expecttest'": ("ModuleNotFoundError", "expecttest", None),
        "E   AttributeError: module 'torch' has no attribute 'float8_e8m0fnu'": ("AttributeError", "float8_e8m0fnu", "torch"),
        "E   SyntaxError: invalid syntax": ("SyntaxError", None, None),
    }
    for text, expected in cases.items():
        error = parse_import_failure("test/test_x.py", text, "2.13.0")
        assert (error.error_class, error.missing, error.module) == expected
        assert error.describe().startswith("test/test_x.py does not import on torch 2.13.0")
