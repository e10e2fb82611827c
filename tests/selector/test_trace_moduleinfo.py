"""ModuleInfo tests (``@modules(module_db)``) are planned from their trace too: the capability file says whether the
module's functional op has a kernel, not what the test's body does. Held-back round 8's test_modules: a 2021
template whose methods take no ``training`` argument fails on torch 2.13 before it builds any module, on every
device, yet was planned ``run`` because ``nn.GELU`` computes through ``nn.functional.gelu``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from crcr.contracts.inventory import InventoryTest
from selector.agent.offline import OfflineAgent
from selector.agent.tools import Tools
from selector.capabilities import load_capabilities
from selector.plan import classify_tests
from selector.rules import RuleContext

ROOT = Path(__file__).resolve().parents[2]
CLS = "TestModuleFixturePRIVATEUSE1"
FILE = "test/test_module_fixture.py"

SRC = '''
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, run_tests

linear = [m for m in module_db if m.name == "nn.Linear"]


class TestModuleFixture(TestCase):
    @modules(linear, allowed_dtypes=(torch.float,))
    def test_forward(self, device, dtype, module_info, training):
        m = module_info.module_cls(3, 2).to(device=device, dtype=dtype)
        self.assertEqual(m(torch.ones(4, 3, device=device, dtype=dtype)).shape, (4, 2))

    # written for an older torch: @modules now passes ``training`` too, so the call fails with a TypeError
    @modules(linear, allowed_dtypes=(torch.float,))
    def test_old_signature(self, device, dtype, module_info):
        m = module_info.module_cls(3, 2).to(device=device, dtype=dtype)
        self.assertEqual(m(torch.ones(4, 3, device=device, dtype=dtype)).shape, (4, 2))


instantiate_device_type_tests(TestModuleFixture, globals())

if __name__ == "__main__":
    run_tests()
'''


def module_test(template: str) -> InventoryTest:
    name = f"{template}_nn_Linear_snpu_float32"
    return InventoryTest(id=f"{FILE}::{CLS}::{name}", file=FILE, cls=CLS, method=name, template=template,
                         device="snpu", dtype="float32", op="nn.Linear", params={"training": "True"},
                         features=["module"], fingerprint="f" + name,
                         decorators=["modules(linear, allowed_dtypes=(torch.float,))"])


def plan(tmp_path: Path, *, trace: bool) -> dict[str, tuple[str, str]]:
    from crcr.cli.select import _attach_cpu_traces

    (tmp_path / "test").mkdir(exist_ok=True)
    (tmp_path / FILE).write_text(SRC, encoding="utf-8")
    made = [module_test("test_forward"), module_test("test_old_signature")]
    caps = load_capabilities(ROOT / "configs" / "backends" / "snpu.yaml")
    tools = Tools(caps, {t.id: t for t in made}, tmp_path)
    if trace:
        _attach_cpu_traces(SimpleNamespace(tests=made), caps, None, tools, tmp_path / "data", tmp_path, kind="shadow")
    decided = classify_tests(made, RuleContext(caps, dtype_reaches=tools.dtype_reaches), OfflineAgent(), tools)
    return {t.template: (decided[t.id].mode, decided[t.id].reason) for t in made}


def test_module_tests_no_rule_decides_are_traced(tmp_path):
    from crcr.cli.select import _agent_tests

    made = [module_test("test_forward"), module_test("test_old_signature")]
    caps = load_capabilities(ROOT / "configs" / "backends" / "snpu.yaml")
    tools = Tools(caps, {t.id: t for t in made}, tmp_path)
    assert [t.id for t in _agent_tests(SimpleNamespace(tests=made), caps, None, tools)] == [t.id for t in made]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    return plan(tmp_path_factory.mktemp("checkout"), trace=True)


def test_a_module_test_whose_body_fails_before_the_module_runs_is_xfailed_from_its_shadow_run(traced):
    mode, reason = traced["test_old_signature"]
    assert mode.startswith("xfail"), reason
    assert "device-shadow run" in reason and "training" in reason, reason


def test_a_module_test_that_passes_in_its_shadow_run_runs(traced):
    mode, reason = traced["test_forward"]
    assert mode == "run", reason
    assert "device-shadow run" in reason, reason


def test_without_a_trace_the_capability_file_decides(tmp_path):
    """No trace (``--no-trace``): the module's functional op has a kernel, so both run, as before."""
    for template, (mode, reason) in plan(tmp_path, trace=False).items():
        assert mode == "run" and "computes through" in reason, (template, reason)
