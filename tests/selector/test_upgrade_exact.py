"""`crcr select upgrade` at OpInfo level: entries keyed as op_db keys them, including entries built by
comprehensions, helper functions and later appends; foreach entries never answer for op_db's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from crcr.contracts.inventory import Inventory, InventoryTest
from selector.inventory.opinfo import scan_all
from selector.inventory.sources import TorchSources

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "opinfo_upgrade"

OPS = ["add", "_foreach_add", "mm", "index_reduce.mean", "index_reduce.prod", "index_reduce.amax",
       "polygamma.polygamma_n_1", "polygamma.polygamma_n_2", "mvlgamma.mvlgamma_p_1", "mvlgamma.mvlgamma_p_3",
       "appended_op"]


def _torch(tmp_path: Path, version: str) -> Path:
    internal = tmp_path / version / "torch" / "testing" / "_internal"
    internal.mkdir(parents=True)
    shutil.copy(FIXTURE / version / "common_methods_invocations.py.src", internal / "common_methods_invocations.py")
    (tmp_path / version / "torch" / "version.py").write_text(f"__version__ = '{version}'\n")
    return tmp_path / version / "torch"


def _test_id(op: str) -> str:
    cls = "TestForeachPRIVATEUSE1" if op.startswith("_foreach_") else "TestCommonPRIVATEUSE1"
    return f"test/test_ops.py::{cls}::test_x_{op.replace('.', '_')}_snpu_float32"


def _tests(path: Path) -> Path:
    inv = Inventory(source="pytorch-src", tests=[
        InventoryTest(id=_test_id(op), file="test/test_ops.py", cls=_test_id(op).split("::")[1],
                      method=_test_id(op).split("::")[2], op=op, fingerprint=f"fp-{op}")
        for op in OPS
    ] + [InventoryTest(id="test/test_nn.py::TestNN::test_plain", file="test/test_nn.py", method="test_plain",
                       fingerprint="fp-plain")])
    inv.write(path)
    return path


def test_entries_built_every_way_are_seen_and_keyed_as_op_db_keys_them(tmp_path):
    old = scan_all(TorchSources(_torch(tmp_path, "2.13.0")))
    assert set(old.entries) == set(OPS) - {"index_reduce.amax"}
    assert old.entries["add"].db == "op_db" and old.entries["_foreach_add"].db == "foreach_binary_op_db"
    assert old.unevaluated == []
    # the scanner before the exact upgrade saw only literal list elements
    legacy = scan_all(TorchSources(tmp_path / "2.13.0" / "torch"), legacy=True)
    assert set(legacy.entries) == {"add", "_foreach_add", "mm"}


def test_upgrade_re_evaluates_exactly_the_tests_of_changed_entries(cli, tmp_path):
    old, new = _torch(tmp_path, "2.13.0"), _torch(tmp_path, "2.14.1")
    tests = _tests(tmp_path / "tests.json")
    code, out, err = cli("select", "upgrade", "--from", old, "--to", new, "--tests", tests, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["added"] == 1 and result["changed"] == 3 and result["removed"] == 0  # amax; foreach add, p_3, appended
    assert result["re_evaluated_ids"] == sorted(_test_id(op) for op in (
        "_foreach_add", "appended_op", "index_reduce.amax", "mvlgamma.mvlgamma_p_3"))
    assert result["re_evaluated"] == 4 and result["tests"]["changed"] == 4
    # what could not be evaluated statically is named, not dropped
    assert any("iterable not static: _runtime_names()" in u for u in result["unevaluated"])

    code, out, err = cli("select", "upgrade", "--from", old, "--to", new, "--tests", tests)
    assert code == 0, err
    assert "added 1, removed 0, changed 3, unchanged 7" in out
    assert "4 re-evaluated (op added or changed), 0 removed, 8 unchanged" in out
    assert "not evaluated statically: 1" in out


def test_entries_the_imported_op_db_has_but_the_scan_misses_are_reported_and_count_as_changed(tmp_path):
    from selector.inventory.opinfo import opinfo_inventory
    from selector.upgrade import compare

    old_src, new_src = TorchSources(_torch(tmp_path, "2.13.0")), TorchSources(_torch(tmp_path, "2.14.1"))
    # the imported 2.13.0 module also holds an entry made at import time (as the DSL entries are)
    old = opinfo_inventory(old_src, runtime_keys=set(OPS) - {"index_reduce.amax"} | {"made_at_import"})
    new = opinfo_inventory(new_src)
    assert [e.missing for e in old.errors] == ["made_at_import"]
    assert old.errors[0].error_class == "NotEvaluated"
    assert [e.message for e in new.errors] == ["43: iterable not static: _runtime_names()"]
    diff = compare(old, new)
    # 2.14.1 has an expression the scan could not evaluate: made_at_import may be in it, so it is
    # re-evaluated rather than removed
    assert diff.removed == []
    assert diff.changed == ["_foreach_add", "appended_op", "made_at_import", "mvlgamma.mvlgamma_p_3"]
