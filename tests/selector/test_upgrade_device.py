"""`crcr select upgrade` for one device: what only another device type's tests see is not a change, a helper
is read for the branch its call takes, and every output counts the same re-evaluated tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crcr.contracts.inventory import Inventory, InventoryTest
from crcr.contracts.plan import load_plan
from selector.inventory.opinfo import opinfo_inventory, scan_all
from selector.inventory.opinfo_scope import DeviceScope
from selector.inventory.sources import TorchSources
from selector.upgrade import compare

from .conftest import FIX

OLD = '''
def skips_gamma(skip_redundant=False):
    skips = (DecorateInfo(unittest.skip("Skipped!"), 'TestUnaryUfuncs', 'test_float_domains'),)
    if skip_redundant:
        skips = skips + (DecorateInfo(unittest.skip("Skipped!"), 'TestFwdGradients'),)
    return skips

op_db = [
    OpInfo('matmul', dtypes=all_types(), dtypesIfCUDA=floating_types_and(torch.half)),
    OpInfo('inner', dtypes=all_types()),
    OpInfo('stft', dtypes=floating_types(), skips=(DecorateInfo(unittest.skip("x"), device_type='mps'),)),
    OpInfo('grid', dtypes=floating_types(), skips=(DecorateInfo(unittest.skip("x"), device_type='cpu'),
                                                   DecorateInfo(unittest.skip("x"), device_type='cuda'))),
    OpInfo('cummax', dtypes=floating_types(), skips=(DecorateInfo(unittest.skip("x"), device_type='cuda'),)),
    OpInfo('cumsum', dtypes=floating_types()),
    OpInfo('abs', dtypes=all_types()),
    OpInfo('gamma', dtypes=floating_types(), skips=skips_gamma()),
    OpInfo('gamma_redundant', dtypes=floating_types(), skips=skips_gamma(skip_redundant=True)),
]
'''

NEW = '''
def skips_gamma(skip_redundant=False):
    skips = (DecorateInfo(unittest.skip("Skipped!"), 'TestUnaryUfuncs', 'test_float_domains'),)
    if skip_redundant:
        skips = skips + (DecorateInfo(unittest.skip("Skipped!"), 'TestBwdGradients'),)
    return skips

op_db = [
    OpInfo('matmul', dtypes=all_types(), dtypesIfCUDA=floating_types_and(torch.half, torch.bfloat16),
           backward_dtypesIfXPU=floating_types()),
    OpInfo('inner', dtypes=all_types(), skips=(DecorateInfo(unittest.expectedFailure, device_type="xpu"),)),
    OpInfo('stft', dtypes=floating_types()),
    OpInfo('grid', dtypes=floating_types(), skips=(DecorateInfo(unittest.skip("x"), device_type=('cpu', 'cuda')),)),
    OpInfo('cummax', dtypes=floating_types(), skips=(DecorateInfo(unittest.skip("x"), device_type='cuda'),
                                                     DecorateInfo(unittest.skip("x"), device_type='privateuse1'))),
    OpInfo('cumsum', dtypes=floating_types(), skips=(DecorateInfo(unittest.skip("x"), device_type=('cuda', 'snpu')),)),
    OpInfo('abs', dtypes=all_types_and(torch.half)),
    OpInfo('gamma', dtypes=floating_types(), skips=skips_gamma()),
    OpInfo('gamma_redundant', dtypes=floating_types(), skips=skips_gamma(skip_redundant=True)),
]
'''

OPS = ["matmul", "inner", "stft", "grid", "cummax", "cumsum", "abs", "gamma", "gamma_redundant"]
# What the snpu tests can see change: a PrivateUse1 DecorateInfo, a device tuple naming snpu, the CPU dtypes
# every other device inherits, and the branch of skips_gamma that only skip_redundant=True takes.
SNPU_CHANGED = ["abs", "cummax", "cumsum", "gamma_redundant"]


def _torch(tmp_path: Path, version: str, text: str) -> Path:
    internal = tmp_path / version / "torch" / "testing" / "_internal"
    internal.mkdir(parents=True)
    (internal / "common_methods_invocations.py").write_text(text)
    (tmp_path / version / "torch" / "version.py").write_text(f"__version__ = '{version}'\n")
    return tmp_path / version / "torch"


def _changed(tmp_path: Path, device: str | None) -> list[str]:
    old = opinfo_inventory(TorchSources(_torch(tmp_path / (device or "any"), "2.13.0", OLD)), device=device)
    new = opinfo_inventory(TorchSources(_torch(tmp_path / (device or "any"), "2.14.1", NEW)), device=device)
    diff = compare(old, new)
    assert diff.added == [] and diff.removed == []
    return diff.changed


def test_only_what_the_device_sees_changes_its_tests(tmp_path):
    assert _changed(tmp_path, "snpu") == SNPU_CHANGED
    # on cpu, grid's skip now names ('cpu', 'cuda') where it named 'cpu' (the same effect, but an applicable
    # DecorateInfo whose value changed, as the runtime object shows too); the privateuse1 and snpu skips are not cpu's
    assert _changed(tmp_path, "cpu") == ["abs", "gamma_redundant", "grid"]
    # cuda sees its dtypes, its DecorateInfo and (rocm/xpu inherit cuda's sets) xpu's backward dtypes
    assert _changed(tmp_path, "cuda") == ["abs", "cumsum", "gamma_redundant", "grid", "matmul"]
    # read for every device, every textual change counts (the reading before device scoping)
    assert _changed(tmp_path, None) == sorted(set(OPS) - {"gamma"})


def test_device_scope_names_privateuse1_for_an_out_of_tree_backend():
    snpu, cpu = DeviceScope.of("snpu"), DeviceScope.of("cpu")
    assert snpu.decorate_devices == {"snpu", "privateuse1"} and cpu.decorate_devices == {"cpu"}
    assert not snpu.keyword_applies("dtypesIfCUDA") and not snpu.keyword_applies("backward_dtypesIfXPU")
    assert snpu.keyword_applies("dtypes") and snpu.keyword_applies("backward_dtypes")
    assert snpu.keyword_applies("dtypesIfSNPU") and DeviceScope.of("xpu").keyword_applies("dtypesIfCUDA")


def test_a_helper_is_read_for_the_branch_its_call_takes(tmp_path):
    entries = scan_all(TorchSources(_torch(tmp_path, "2.14.1", NEW)), device="snpu").entries
    old = scan_all(TorchSources(_torch(tmp_path / "o", "2.13.0", OLD)), device="snpu").entries
    assert entries["gamma"].fingerprint == old["gamma"].fingerprint
    assert entries["gamma_redundant"].fingerprint != old["gamma_redundant"].fingerprint


def test_inventories_read_for_different_devices_do_not_compare(tmp_path):
    from selector.errors import SelectorInputError

    src = TorchSources(_torch(tmp_path, "2.13.0", OLD))
    with pytest.raises(SelectorInputError, match="different devices"):
        compare(opinfo_inventory(src, device="snpu"), opinfo_inventory(src, device="cpu"))


def _test_id(op: str, n: int) -> str:
    return f"test/test_ops.py::TestCommonPRIVATEUSE1::test_variant_{n}_{op}_snpu_float32"


def _tests(path: Path) -> Path:
    Inventory(source="pytorch-src", device="snpu", tests=[
        InventoryTest(id=_test_id(op, n), file="test/test_ops.py", cls="TestCommonPRIVATEUSE1",
                      method=_test_id(op, n).rsplit("::", 1)[1], op=op, fingerprint=f"fp-{op}-{n}", dtype="float32")
        for op in OPS for n in range(3)
    ]).write(path)
    return path


def test_every_output_counts_the_same_re_evaluated_tests(cli, tmp_path):
    old, new = _torch(tmp_path, "2.13.0", OLD), _torch(tmp_path, "2.14.1", NEW)
    tests, caps, plan_dir = _tests(tmp_path / "tests.json"), FIX / "snpu-capabilities.yaml", tmp_path / "plan"
    want = sorted(_test_id(op, n) for op in SNPU_CHANGED for n in range(3))
    code, out, err = cli("select", "plan", "-b", "snpu", "--inventory", tests, "--capabilities", caps, "--out", plan_dir)
    assert code == 0, err
    before = load_plan(plan_dir)

    code, out, err = cli("select", "upgrade", "--from", old, "--to", new, "--tests", tests, "-b", "snpu",
                         "--capabilities", caps, "--out", plan_dir, "--json")
    assert code == 0, err
    result = json.loads(out)  # stdout is JSON only, the plan diff included
    assert result["device"] == "snpu"  # the backend's device, from its capability file
    assert result["changed"] == len(SNPU_CHANGED) and result["re_evaluated_ids"] == want
    assert result["re_evaluated"] == result["replan"]["re_evaluated"] == result["tests"]["changed"] == len(want) == 12
    assert result["replan"]["classified_again"] + result["replan"]["reused_from_cache"] == 12
    assert result["replan"]["first_time"] == 0
    assert "re-planned: 12 re-evaluated tests" in err
    assert "(12 tests re-evaluated)" in result["replan"]["markdown"]
    # the plan files: a test that was not re-evaluated keeps its previous decision, word for word
    after = load_plan(plan_dir)
    for t in json.loads(tests.read_text())["tests"]:
        if t["id"] not in want:
            a, b = before.resolve(t["id"]), after.resolve(t["id"])
            assert (a.mode, a.reason, a.source) == (b.mode, b.reason, b.source), t["id"]
    assert set(result["replan"]["mode_changes"]) <= set(want)

    # the text output of the same upgrade says the same number in each line
    code, out, err = cli("select", "upgrade", "--from", old, "--to", new, "--tests", tests, "-b", "snpu",
                         "--capabilities", caps, "--out", plan_dir)
    assert code == 0, err
    assert "(opinfo, for snpu's tests): added 0, removed 0, changed 4, unchanged 5" in out
    assert "12 re-evaluated (op added or changed), 0 removed, 15 unchanged" in out
    assert "re-planned: 12 re-evaluated tests" in err and "(12 tests re-evaluated)" in out


CORE_OLD = '''
def _shared_unary_tensors(n):
    return [n]

def sample_inputs_elementwise_unary(op, device, dtype, requires_grad):
    return _shared_unary_tensors(3)

class OpInfo:
    pass

class UnaryUfuncInfo(OpInfo):
    def __init__(self, name, *, sample_inputs_func=sample_inputs_elementwise_unary, **kwargs):
        super().__init__(name, sample_inputs_func=sample_inputs_func, **kwargs)
'''
CMI = '''
from torch.testing._internal.opinfo.core import UnaryUfuncInfo

def sample_inputs_own(op, device, dtype, requires_grad):
    return [1]

op_db = [
    UnaryUfuncInfo('sin', dtypes=floating_types()),
    UnaryUfuncInfo('own', dtypes=floating_types(), sample_inputs_func=sample_inputs_own),
]
'''


def test_a_change_in_a_shared_helper_reaches_the_entries_whose_class_installs_it(tmp_path):
    """sin gets its samples from its class's default, which calls a shared generator: a change there is a
    change to sin (and not to an entry that passes its own sample function)."""
    def scanned(version: str, core: str) -> dict[str, str]:
        torch_dir = _torch(tmp_path / version, version, CMI)
        (torch_dir / "testing" / "_internal" / "opinfo").mkdir()
        (torch_dir / "testing" / "_internal" / "opinfo" / "core.py").write_text(core)
        return {k: e.fingerprint for k, e in scan_all(TorchSources(torch_dir), device="snpu").entries.items()}

    old = scanned("2.13.0", CORE_OLD)
    new = scanned("2.14.1", CORE_OLD.replace("return [n]", "return [n, -n]"))
    assert old["own"] == new["own"] and old["sin"] != new["sin"]
