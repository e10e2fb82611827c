"""The CPU trace: plain device tests are planned from what their CPU twin really called on device tensors
(helpers, backward passes included), and by the static reading where there is no trace."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from crcr.contracts.cputrace import CpuTrace, TraceOp
from selector.agent.offline import OfflineAgent
from selector.agent.tools import Tools
from selector.capabilities import load_capabilities
from selector.plan import classify_tests
from selector.rules import RuleContext
from tests.selector.reading_fixtures import device_test

ROOT = Path(__file__).resolve().parents[2]
CLS = "TestTracedPRIVATEUSE1"
FILE = "test/test_traced.py"

SRC = '''
import os
import time
import unittest
import warnings

import torch
import torch.nn.functional as F
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestTraced(TestCase):
    def _check_sum(self, device):
        x = torch.arange(6, device=device, dtype=torch.float64)
        self.assertEqual(x.sum().item(), 15)

    def test_helper_double(self, device):
        self._check_sum(device)

    def test_group_norm_grad(self, device):
        x = torch.randn(2, 4, 3, device=device, requires_grad=True)
        F.group_norm(x, 2).sum().backward()
        self.assertEqual(x.grad.shape, x.shape)

    def test_host_reference(self, device):
        expected = torch.arange(4, dtype=torch.float64) * 2
        actual = torch.arange(4, device=device, dtype=torch.float32) * 2
        self.assertEqual(actual.cpu().double(), expected)

    @dtypes(torch.float32)
    def test_broken_everywhere(self, device, dtype):
        x = torch.ones(3, device=device, dtype=dtype)
        self.assertEqual(x.sum().item(), 4)

    def test_long_softmax_row(self, device):
        x = torch.randn(2, 200_000, device=device)
        self.assertEqual(x.softmax(-1).sum().item(), 2, atol=1e-3, rtol=0)

    def test_records_a_warning(self, device):
        x = torch.ones(3, device=device)
        with warnings.catch_warnings(record=True) as w:
            warnings.warn("careful")
        self.assertEqual(len(w), 1)
        self.assertEqual(x.sum().item(), 3)

    def test_result_back_on_the_host(self, device):
        x = torch.ones(3, device=device) * 2
        self.assertEqual(x.to("cpu").double().sum().item(), 6)

    def _double_helper(self):
        where = torch.device("cpu")  # no device argument: this test keeps its tensors on the host everywhere
        x = torch.randn(3, device=where, dtype=torch.double)
        self.assertEqual(x.shape, (3,))

    def test_no_device_argument(self):
        self._double_helper()

    def test_device_object(self, device):
        x = torch.randn(3, device=torch.device(device), dtype=torch.double)
        self.assertEqual(x.shape, (3,))

    def test_kernel_check_caught(self, device):
        x = torch.randn(1, 4, 5, 5, device=device, requires_grad=True)
        with self.assertRaisesRegex(RuntimeError, "non-zero size"):
            F.adaptive_avg_pool2d(x, 0).sum().backward()

    @unittest.expectedFailure
    def test_marked_to_fail_but_passes(self, device):
        self.assertEqual(torch.ones(2, device=device).sum().item(), 2)

    def test_crashes(self, device):
        os._exit(3)

    def test_hangs(self, device):
        x = torch.ones(3, device=device)
        time.sleep(60)
        self.assertEqual(x.sum().item(), 3)


instantiate_device_type_tests(TestTraced, globals())

if __name__ == "__main__":
    run_tests()
'''

TESTS = [
    ("test_crashes", None),  # first: the tests after it in the same child still get their trace
    ("test_helper_double", None),
    ("test_group_norm_grad", None),
    ("test_host_reference", None),
    ("test_broken_everywhere", "float32"),
    ("test_hangs", None),
    ("test_long_softmax_row", None),
    ("test_records_a_warning", None),
    ("test_result_back_on_the_host", None),
    ("test_no_device_argument", None),
    ("test_device_object", None),
    ("test_kernel_check_caught", None),
    ("test_marked_to_fail_but_passes", None),
]


# where the device-shadow run (snpu's tensors, the CPU's kernels; the default for snpu) words a reason otherwise
SHADOW_TEXT = {
    "CPU trace": "device-shadow run",
    "passes on the CPU": "passes in the shadow run",
    "fails on the CPU too": "fails in the shadow run",
    # a float64 factory on the device: snpu's allocation is where the refused dtype first shows
    "aten::arange": "aten::empty.memory_format",
    "aten::randn": "aten::empty.memory_format",
}


@pytest.fixture(scope="module", params=["cpu", "shadow"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory, kind: str) -> dict[str, tuple[str, str]]:
    """(mode, reason) per test method, planned with the trace ``kind`` as ``crcr select plan --pytorch-src`` does."""
    from crcr.cli.select import _attach_cpu_traces

    root = tmp_path_factory.mktemp("checkout")
    (root / "test").mkdir()
    (root / FILE).write_text(SRC, encoding="utf-8")
    made = [device_test(FILE, CLS, method, dtype) for method, dtype in TESTS]
    caps = load_capabilities(ROOT / "configs" / "backends" / "snpu.yaml")
    tools = Tools(caps, {t.id: t for t in made}, root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CRCR_TRACE_SECONDS", "3")
        _attach_cpu_traces(SimpleNamespace(tests=made), caps, None, tools, root / "data", root, kind=kind)
    decided = classify_tests(made, RuleContext(caps, dtype_reaches=tools.dtype_reaches), OfflineAgent(), tools)
    return {t.template: (decided[t.id].mode, decided[t.id].reason) for t in made}


@pytest.mark.parametrize(
    ("method", "mode", "said"),
    [
        # a helper method builds a float64 tensor on the device: the static reading of the body cannot see it
        ("test_helper_double", "skip", ("CPU trace", "aten::arange", "float64")),
        # the backward pass needs a kernel snpu lacks
        ("test_group_norm_grad", "skip", ("native_group_norm_backward", "no kernel")),
        # the float64 reference stays on the host: it does not make the test skip
        ("test_host_reference", "run", ("CPU trace", "passes on the CPU")),
        ("test_broken_everywhere", "xfail", ("fails on the CPU too", "AssertionError")),
        # a softmax row longer than the device holds at once (limits.max_softmax_norm_row_elements)
        ("test_long_softmax_row", "skip", ("aten::_softmax", "rows of 200000 float32")),
        # the twin runs with the warning filters a test expects
        ("test_records_a_warning", "run", ("passes on the CPU",)),
        # .to("cpu") copies to the host: the float64 made there is no device tensor
        ("test_result_back_on_the_host", "run", ("passes on the CPU",)),
        # a test without the device argument: torch.device("cpu") there is the host on snpu too
        ("test_no_device_argument", "run", ("passes on the CPU",)),
        # torch.device(device) of the device argument is the device
        ("test_device_object", "skip", ("aten::randn", "float64")),
        # the CPU kernel's argument check raised (caught by the test): snpu has no such kernel and raises its own
        ("test_kernel_check_caught", "skip", ("aten::_adaptive_avg_pool2d_backward", "no kernel")),
        # an expected failure that passes fails the run (unexpected success), on the CPU as on the device
        ("test_marked_to_fail_but_passes", "xfail", ("fails on the CPU too", "unexpected success")),
    ],
    ids=["helper-refused-dtype", "backward-missing-kernel", "host-float64-reference", "cpu-failure", "row-limit",
         "warnings-recorded", "to-cpu-is-host", "no-device-argument-is-host", "device-object-is-device",
         "raised-in-kernel-needs-kernel", "unexpected-success-fails"],
)
def test_the_trace_decides(traced, kind, method, mode, said):
    got_mode, reason = traced[method]
    assert got_mode == mode, reason
    if kind == "shadow":
        said = tuple(SHADOW_TEXT.get(s, s) for s in said)
    assert all(s in reason for s in said), reason


def test_a_timed_out_trace_falls_back_to_the_static_reading(traced, kind):
    mode, reason = traced["test_hangs"]
    said = {"cpu": "no CPU trace (the CPU twin timed out)",
            "shadow": "no device-shadow trace (the device-shadow run timed out)"}[kind]
    assert f"{said}; static reading: read test source" in reason, reason
    assert mode == "run"  # what the static reading says of ones() and sum()


def test_a_crashed_trace_falls_back_to_the_static_reading(traced, kind):
    mode, reason = traced["test_crashes"]
    said = {"cpu": "no CPU trace (the CPU twin crashed the trace",
            "shadow": "no device-shadow trace (the device-shadow run crashed"}[kind]
    assert said in reason and "static reading" in reason, reason


def test_no_trace_leaves_the_static_reading_alone(cli, tmp_path):
    """``--no-trace``: the static reading decides (it cannot see into the helper), and says nothing of a trace;
    with the trace (the default) the helper's float64 tensor is found."""
    from crcr.contracts.inventory import Inventory
    from crcr.contracts.plan import load_plan

    (tmp_path / "src" / "test").mkdir(parents=True)
    (tmp_path / "src" / FILE).write_text(SRC, encoding="utf-8")
    test = device_test(FILE, CLS, "test_helper_double", None)
    inv = tmp_path / "inv.json"
    Inventory(source="pytorch-src", device="snpu", tests=[test]).write(inv)
    plans = {}
    for flag in ("--no-trace", "--trace"):
        out_dir = tmp_path / flag.strip("-")
        code, out, err = cli("select", "plan", "-b", "snpu", "--inventory", inv, "--pytorch-src", tmp_path / "src",
                             "--out", out_dir, "--no-cache", flag)
        assert code == 0, err
        assert ("cpu trace: traced 1 of 1 tests (plain device tests, or OpInfo of a generic template; 0 from cache, "
                "1 run in" in err) is (flag == "--trace")
        plans[flag] = load_plan(out_dir).resolve(test.id)
    assert plans["--no-trace"].mode == "run", plans["--no-trace"].reason
    assert "CPU trace" not in plans["--no-trace"].reason
    assert plans["--trace"].mode == "skip" and "float64" in plans["--trace"].reason


def test_the_claude_agent_reads_a_trace_as_data(tmp_path):
    caps = load_capabilities(ROOT / "configs" / "backends" / "snpu.yaml")
    test = device_test(FILE, CLS, "test_host_reference", None)
    tools = Tools(caps, {test.id: test}, tmp_path)
    before = caps.digest
    caps.attach_cpu_traces({test.id: CpuTrace(outcome="passed", ops=[TraceOp(op="aten::arange.start_out",
                                                                              dtypes=["float32"])])})
    assert caps.digest != before  # a new trace re-plans the tests it covers
    text = tools.dispatch("read_cpu_trace", {"test_id": test.id})
    assert '"outcome": "passed"' in text and "aten::arange.start_out" in text
    assert tools.dispatch("read_cpu_trace", {"test_id": "test/x.py::T::nope"}).startswith("error:")


def test_a_row_limit_is_read_per_kernel(traced):
    """The capability file's ``limits.row_limits`` names each whole-row kernel; the trace cites the key it used."""
    mode, reason = traced["test_long_softmax_row"]
    assert mode == "skip" and "limits.row_limits[aten::_softmax]" in reason, reason


def test_a_traced_error_with_terminal_colours_does_not_stop_the_plan(tmp_path):
    """torch's ``UnpicklingError`` colours its hints (``\\x1b[1m...\\x1b[0m``); held back round 10's six
    ``save_load`` tests failed in the device-shadow run with it and ``crcr select plan`` died on the reason's
    control characters, writing no plan for the file. The error now reaches the reason as plain text, and a
    lost trace's detail too."""
    caps = load_capabilities(ROOT / "configs" / "backends" / "snpu.yaml")
    failed = device_test(FILE, CLS, "test_host_reference", None)
    lost = device_test(FILE, CLS, "test_helper_double", None)
    tools = Tools(caps, {failed.id: failed, lost.id: lost}, tmp_path)
    error = ("UnpicklingError: Weights only load failed.\n\x1b[1mWeightsUnpickler error:\x1b[0m Unsupported "
             "global:\tGLOBAL torch.float8_e4m3fn\x07 was not an allowed global\r\n")
    caps.attach_cpu_traces({
        failed.id: CpuTrace(outcome="failed", kind="device-shadow", error=error),
        lost.id: CpuTrace(outcome="crashed", kind="device-shadow", error=error),
    })
    decided = classify_tests([failed, lost], RuleContext(caps), OfflineAgent(), tools)
    reason = decided[failed.id].reason
    assert decided[failed.id].mode == "xfail"
    assert "WeightsUnpickler error: Unsupported global: GLOBAL torch.float8_e4m3fn was not an allowed" in reason
    assert not any(ord(c) < 32 or ord(c) == 127 for c in reason), repr(reason)
    assert "Weights only load failed" in decided[lost.id].reason
    assert not any(ord(c) < 32 for c in decided[lost.id].reason), repr(decided[lost.id].reason)


def _out_overload_plans(caps, tmp_path):
    full = device_test(FILE, CLS, "test_host_reference", None)
    power = device_test(FILE, CLS, "test_helper_double", None)
    tools = Tools(caps, {full.id: full, power.id: power}, tmp_path)
    caps.attach_cpu_traces({
        full.id: CpuTrace(outcome="passed", kind="device-shadow", ops=[TraceOp(op="aten::full.out", dtypes=["float32"])]),
        power.id: CpuTrace(outcome="passed", kind="device-shadow",
                           ops=[TraceOp(op="aten::pow.Scalar_out", dtypes=["float32"])]),
    })
    decided = classify_tests([full, power], RuleContext(caps), OfflineAgent(), tools)
    return decided[full.id], decided[power.id]


def test_an_out_overload_the_device_does_not_route_has_no_kernel(tmp_path):
    """Held back round 12: ``test_full_out`` passed its shadow run through ``aten::full.out`` and was planned
    ``run`` because ``full`` has a kernel; snpu refuses ``full.out`` (no functional overload of its arguments). The
    capability file's ``out_routes`` names the ``out=`` overloads the device runs."""
    caps = load_capabilities(ROOT / "configs" / "backends" / "snpu.yaml")
    full, power = _out_overload_plans(caps, tmp_path)
    assert full.mode == "skip" and "aten::full.out" in full.reason, full.reason
    assert power.mode == "run", power.reason
    # held back round 14: an out= overload whose name does not say "out" runs on its packet's kernel
    from selector.agent.offline import trace_kernel

    assert trace_kernel("aten::kthvalue.values", caps) and trace_kernel("aten::sort.values", caps)


def test_a_capability_file_without_out_routes_reads_out_overloads_by_their_op(tmp_path):
    import yaml

    from crcr.errors import ConfigError

    doc = yaml.safe_load((ROOT / "configs" / "backends" / "snpu.yaml").read_text(encoding="utf-8"))
    del doc["out_routes"]
    older = tmp_path / "older.yaml"
    older.write_text(yaml.safe_dump(doc), encoding="utf-8")
    full, power = _out_overload_plans(load_capabilities(older), tmp_path)
    assert (full.mode, power.mode) == ("run", "run"), (full.reason, power.reason)

    doc["out_routes"] = ["aten::pow.Scalar_out"]
    older.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(ConfigError, match="out_routes must map each routed out= overload"):
        load_capabilities(older)
