"""Static inventory: ids as PyTorch instantiates them for a PrivateUse1 backend; fingerprints."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from selector.inventory.opinfo import opinfo_inventory
from selector.inventory.sources import TorchSources
from selector.inventory.static_ast import scan_checkout
from selector.inventory.test_times import times_inventory
from selector.upgrade import compare

from .conftest import FIX, UPSTREAM

WHEEL = Path("/opt/pypi-more/files/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl")


def test_device_generic_ids_follow_privateuse1_instantiation(inventory):
    ids = {t.id for t in inventory.tests}
    ops_file = "test/test_fixture_ops.py::"
    assert ops_file + "TestFixtureDevicePRIVATEUSE1::test_softmax_dtypes_snpu_float64" in ids
    assert ops_file + "TestFixtureDevicePRIVATEUSE1::test_matmul_floats_snpu_float16" in ids  # floating_types_and(half)
    assert ops_file + "TestFixtureOpsPRIVATEUSE1::test_compare_cpu_nn_functional_relu_snpu_float32" in ids
    # allowed_dtypes narrows the op's dtypes; unary_ufuncs narrows the ops
    unary = sorted(t.method for t in inventory.tests if t.template == "test_unary_reference")
    assert all(m.endswith(("_float32", "_float64")) for m in unary)
    assert not any("_add_" in m for m in unary)
    # a class instantiated only for cuda has no snpu tests; parametrize expands statically
    assert not any("TestFixtureCudaOnly" in i for i in ids)
    assert "test/test_fixture_plain.py::TestFixturePlain::test_sizes_flag_True_n_2" in ids
    t = inventory.by_id()[ops_file + "TestFixtureDevicePRIVATEUSE1::test_cuda_streams_snpu"]
    assert t.decorators == ["onlyCUDA"] and "cuda_api" in t.features


def test_fingerprint_ignores_layout_and_comments_but_not_code(tmp_path, opdb):
    root = tmp_path / "src"
    shutil.copytree(UPSTREAM, root)
    before = {t.id: t.fingerprint for t in scan_checkout(root, opdb, {})[0].tests}
    path = root / "test" / "test_fixture_ops.py"
    text = path.read_text()
    text = text.replace("        torch.add(a, a)\n", "        # a comment\n        torch.add(\n            a, a\n        )\n")
    text = text.replace("x.cholesky_inverse()", "x.cholesky_inverse().sum()")
    path.write_text(text)
    after = {t.id: t.fingerprint for t in scan_checkout(root, opdb, {})[0].tests}
    plain = "test/test_fixture_ops.py::TestFixtureDevicePRIVATEUSE1::test_add_plain_snpu"
    inj = "test/test_fixture_ops.py::TestFixtureDevicePRIVATEUSE1::test_injection_snpu"
    assert before[plain] == after[plain]
    assert before[inj] != after[inj]


def test_unparseable_file_is_reported_not_fatal(tmp_path, opdb):
    root = tmp_path / "src"
    shutil.copytree(UPSTREAM, root)
    (root / "test" / "test_broken.py").write_text("def test_x(:\n")
    inv, problems = scan_checkout(root, opdb, {})
    assert any(p.startswith("test/test_broken.py: not parsed (SyntaxError") for p in problems)
    assert inv.tests


def _fake_torch(root: Path, body: str) -> Path:
    internal = root / "torch" / "testing" / "_internal"
    (internal / "opinfo" / "definitions").mkdir(parents=True)
    (internal / "common_methods_invocations.py").write_text(body)
    (internal / "opinfo" / "definitions" / "special.py").write_text(
        "op_db = [UnaryUfuncInfo('special.erfcx', dtypes=floating_types())]\n")
    (root / "torch" / "version.py").write_text(f"__version__ = '{root.name}'\n")
    return root / "torch"


OLD_CMI = '''
def sample_inputs_add(op, device, dtype, requires_grad):
    yield 1

def sample_inputs_mul(op, device, dtype, requires_grad):
    yield 2

op_db = [
    BinaryUfuncInfo('add', sample_inputs_func=sample_inputs_add),  # a comment
    BinaryUfuncInfo('mul', sample_inputs_func=sample_inputs_mul),
    OpInfo('qr', dtypes=floating_types()),
    OpInfo('max', variant_test_name='reduction_with_dim', dtypes=all_types()),
]
'''
NEW_CMI = '''
def sample_inputs_add(op, device, dtype, requires_grad):
    yield 1

def sample_inputs_mul(op, device, dtype, requires_grad):
    yield 3

op_db = [
    BinaryUfuncInfo(
        'add',
        sample_inputs_func=sample_inputs_add,
    ),
    BinaryUfuncInfo('mul', sample_inputs_func=sample_inputs_mul),
    OpInfo('max', variant_test_name='reduction_with_dim', dtypes=all_types_and(torch.half)),
    OpInfo('linalg.polar', dtypes=floating_types()),
]
'''


def test_synthetic_version_pair_gives_known_added_changed_removed(tmp_path):
    old = opinfo_inventory(TorchSources(_fake_torch(tmp_path / "2.13.0", OLD_CMI)))
    new = opinfo_inventory(TorchSources(_fake_torch(tmp_path / "2.14.1", NEW_CMI)))
    assert old.torch_version == "2.13.0" and new.torch_version == "2.14.1"
    diff = compare(old, new)
    assert diff.added == ["linalg.polar"]
    assert diff.removed == ["qr"]
    # mul's sample function changed; max's dtypes changed; add only changed layout and comments
    assert diff.changed == ["max.reduction_with_dim", "mul"]
    assert diff.unchanged == ["add", "special.erfcx"]


def test_times_inventory_is_file_level():
    from crcr.data import TEST_TIMES

    inv = times_inventory(TEST_TIMES)
    assert inv.granularity == "file"
    assert len(inv.tests) > 500
    t = inv.by_id()["test/test_ops.py::.*"]
    assert t.duration_s and t.duration_s > 0


@pytest.mark.slow
def test_real_upgrade_2_13_to_2_14_from_the_wheel(cli, tmp_path):
    if not WHEEL.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{WHEEL} is missing on CI; the real upgrade case needs it")
        pytest.skip(f"{WHEEL} not on this machine (set CI=1 to make this a failure)")
    code, out, err = cli("select", "upgrade", "--from", "installed", "--to", WHEEL, "--json")
    assert code == 0, err
    counts = json.loads(out)
    assert counts["from"].startswith("2.13.0") and counts["to"] == "2.14.1"
    assert counts["added"] >= 1 and counts["removed"] >= 1 and counts["changed"] >= 50
    assert counts["unchanged"] > counts["changed"]
    assert counts["added"] + counts["changed"] + counts["unchanged"] > 900  # OpInfo entries in 2.14.1
    print(f"real upgrade 2.13.0 -> 2.14.1 (OpInfo entries): {counts}")


def test_opdb_fixture_matches_installed_torch_shape():
    # The fixture op table is a slice of what load_opdb builds; keep them in step.
    data = json.loads((FIX / "opdb.json").read_text())
    assert data["cache_version"] == 1 and "add" in data["ops"] and "op_db" in data["lists"]


def test_opinfo_change_projects_onto_tests_and_only_those_change(tmp_path):
    from crcr.contracts.inventory import Inventory, InventoryTest
    from selector.upgrade import project_opinfo, with_new_opinfo

    old = opinfo_inventory(TorchSources(_fake_torch(tmp_path / "2.13.0", OLD_CMI)))
    new = opinfo_inventory(TorchSources(_fake_torch(tmp_path / "2.14.1", NEW_CMI)))
    tests = Inventory(source="embedded", tests=[
        InventoryTest(id=f"test/test_ops.py::TestCommonPRIVATEUSE1::test_x_{op}_snpu_float32", file="test/test_ops.py",
                      cls="TestCommonPRIVATEUSE1", method=f"test_x_{op}_snpu_float32", op=op, fingerprint=f"fp-{op}")
        for op in ("add", "mul", "qr")
    ] + [InventoryTest(id="test/test_nn.py::TestNN::test_plain", file="test/test_nn.py", method="test_plain",
                       fingerprint="fp-plain")])
    projected = project_opinfo(compare(old, new), tests)
    assert projected.counts() == {"added": 0, "removed": 1, "changed": 1, "unchanged": 2}
    upgraded = {t.op or t.method: t.fingerprint for t in with_new_opinfo(tests, old, new).tests}
    assert upgraded["add"] == "fp-add" and upgraded["test_plain"] == "fp-plain"
    assert upgraded["mul"] != "fp-mul" and "qr" not in upgraded


def test_foreach_lists_do_not_shadow_op_db_entries(tmp_path):
    """ForeachFuncInfo('add') is torch's _foreach_add: it must not answer for op_db's add."""
    from selector.inventory.opinfo import scan
    from selector.inventory.sources import TorchSources

    internal = tmp_path / "torch" / "testing" / "_internal"
    internal.mkdir(parents=True)
    (tmp_path / "torch" / "version.py").write_text("__version__ = '9.9.9'\n")
    (internal / "common_methods_invocations.py").write_text(
        "foreach_binary_op_db = [ForeachFuncInfo('add', dtypes=floating_types())]\n"
        "op_db = [BinaryUfuncInfo('add', dtypes=all_types()), OpInfo('mm', dtypes=floating_types())]\n"
    )
    entries = scan(TorchSources(tmp_path / "torch"), with_source=True)
    assert entries["add"].db == "op_db" and entries["add"].source.startswith("BinaryUfuncInfo('add'")
    assert entries["_foreach_add"].db == "foreach_binary_op_db"
    assert entries["mm"].db == "op_db"
