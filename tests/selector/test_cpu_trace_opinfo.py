"""OpInfo tests of a generic template (the ``samples`` probe family) are planned from their trace (the CPU twin's,
or the device-shadow run's, snpu's default):
the op's samples failing on the device says nothing of a body that only checks the op's argument errors."""

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
CLS = "TestSpectralFixturePRIVATEUSE1"
FILE = "test/test_spectral_fixture.py"

SRC = '''
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

spectral = [op for op in op_db if op.name == "fft.fft" and not op.variant_test_name]
simple = [op for op in op_db if op.name == "abs" and not op.variant_test_name]


class TestSpectralFixture(TestCase):
    @ops(spectral, allowed_dtypes=(torch.float,))
    def test_empty_input(self, device, dtype, op):
        t = torch.empty(1, 0, device=device, dtype=dtype)
        with self.assertRaisesRegex(RuntimeError, r"Invalid number of data points"):
            op(t)

    @ops(spectral, allowed_dtypes=(torch.float,))
    def test_transform(self, device, dtype, op):
        t = torch.ones(4, device=device, dtype=dtype)
        self.assertEqual(op(t).shape, t.shape)

    @ops(simple, allowed_dtypes=(torch.float,))
    def test_jit_scripted(self, device, dtype, op):
        t = torch.ones(3, device=device, dtype=dtype)
        fn = torch.jit.CompilationUnit("def f(t0):\\n    return torch.abs(t0)\\n").f
        self.assertEqual(fn(t), t)

    @ops(simple, allowed_dtypes=(torch.float,))
    def test_jit_traced(self, device, dtype, op):
        t = torch.ones(3, device=device, dtype=dtype)
        fn = torch.jit.trace(lambda x: torch.abs(x), (t,))
        self.assertEqual(fn(t), t)


instantiate_device_type_tests(TestSpectralFixture, globals())

if __name__ == "__main__":
    run_tests()
'''

PROBE_ERROR = "SnpuDtypeError: snpu has no torch.complex64 units (aten::_to_copy to snpu)"


def opinfo_test(template: str, op: str = "fft.fft") -> InventoryTest:
    name = f"{template}_{op.replace('.', '_')}_snpu_float32"
    return InventoryTest(id=f"{FILE}::{CLS}::{name}", file=FILE, cls=CLS, method=name, template=template,
                         device="snpu", dtype="float32", op=op, fingerprint="f" + name,
                         features=["jit"] if "jit" in template else [],
                         decorators=["ops(spectral, allowed_dtypes=(torch.float,))"])


def plan(tmp_path: Path, *, trace: bool, kind: str = "shadow") -> dict[str, tuple[str, str]]:
    from crcr.cli.select import _attach_cpu_traces

    (tmp_path / "test").mkdir(exist_ok=True)
    (tmp_path / FILE).write_text(SRC, encoding="utf-8")
    made = [opinfo_test("test_empty_input"), opinfo_test("test_transform"),
            opinfo_test("test_jit_scripted", "abs"), opinfo_test("test_jit_traced", "abs")]
    caps = load_capabilities(ROOT / "configs" / "backends" / "snpu.yaml")
    # the samples probe of fft.fft failed on the device (its output is complex)
    caps.attach_probes({"samples|fft.fft|float32": PROBE_ERROR})
    tools = Tools(caps, {t.id: t for t in made}, tmp_path)
    if trace:
        _attach_cpu_traces(SimpleNamespace(tests=made), caps, None, tools, tmp_path / "data", tmp_path, kind=kind)
    decided = classify_tests(made, RuleContext(caps, dtype_reaches=tools.dtype_reaches), OfflineAgent(), tools)
    return {t.template: (decided[t.id].mode, decided[t.id].reason) for t in made}


# how each trace kind names itself in a reason: the CPU twin's trace, or the device-shadow run (snpu's default)
SAYS = {"cpu": ("CPU trace", "passes on the CPU"), "shadow": ("device-shadow run", "passes in the shadow run")}


@pytest.fixture(scope="module", params=["cpu", "shadow"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory, kind: str) -> dict[str, tuple[str, str]]:
    return plan(tmp_path_factory.mktemp("checkout"), trace=True, kind=kind)


def test_an_argument_check_on_an_empty_input_runs(traced, kind):
    """The op's argument check raises in the composite before any kernel: the run calls nothing the device lacks."""
    mode, reason = traced["test_empty_input"]
    assert mode == "run", reason
    assert all(s in reason for s in SAYS[kind]), reason


def test_a_transform_the_device_cannot_hold_is_skipped_from_the_trace(traced, kind):
    mode, reason = traced["test_transform"]
    assert mode == "skip", reason
    assert SAYS[kind][0] in reason, reason


def test_without_a_trace_the_samples_probe_decides(tmp_path):
    got = plan(tmp_path, trace=False)
    for template in ("test_empty_input", "test_transform"):
        mode, reason = got[template]
        assert mode == "skip" and "[template-probe] the samples probe" in reason, reason


def test_torchscript_scripting_runs_and_tracing_is_skipped_from_the_trace(traced, kind):
    """snpu scripts (features.jit_script) but torch.jit.trace's check copies the outputs to float64 on the device
    (features.jit_trace: false): the trace sees which of the two the body does, not the ``jit`` in its name."""
    mode, reason = traced["test_jit_scripted"]
    assert mode == "run", reason
    mode, reason = traced["test_jit_traced"]
    assert mode == "skip" and "float64" in reason and SAYS[kind][0] in reason, reason


def test_without_a_trace_torchscript_is_skipped_saying_what_is_missing(tmp_path):
    got = plan(tmp_path, trace=False)
    for template in ("test_jit_scripted", "test_jit_traced"):
        mode, reason = got[template]
        assert mode == "skip" and "features.jit_trace: false" in reason, reason
