"""What the offline agent reads beyond the capability file: the installed torch's dispatcher (an op that
decomposes, a metadata method), the installed host libraries (a NumPy function that is gone), and which
dtypes really reach a tensor (branches the test's dtype never takes, dtype queries, code expected to be
refused, dtype-list loops whose variable builds nothing)."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from crcr.contracts.inventory import InventoryTest
from selector.agent.offline import OfflineAgent, body_dtypes, kernel_free, missing_host_calls, torch_calls
from selector.agent.tools import Tools
from selector.rules import RuleContext, classify
from tests.selector.reading_fixtures import device_test

SRC = """
import numpy as np
import torch
from torch.testing._internal.common_dtype import all_types_and_complex_and


class TestDispatch(TestCase):
    def test_composite_and_metadata(self, device):
        x = torch.tensor([1, 2, 3], device=device)
        v = torch.vander(x, 3)
        self.assertEqual(v.ndimension(), 2)
        x.neg()

    def test_missing_kernel(self, device):
        x = torch.ones(3, device=device)
        torch.cholesky_inverse(x)

    def test_gone_from_numpy(self, device, dtype):
        t = torch.ones(4, device=device)
        expected = np.asscalar(np.array(t.cpu().numpy().sum(), dtype=np.float))
        self.assertEqual(np.sort(t.cpu().numpy()).sum(), expected)

    def test_branches(self, device, dtype):
        if dtype is torch.bool:
            values = [True, False]
        elif dtype in [torch.cfloat, torch.cdouble]:
            values = [1 + 1j, 2j]
        else:
            values = [1, 2]
        start = 0.5 + (0.25j if dtype.is_complex else 0)
        t = torch.tensor(values, dtype=dtype, device=device)
        t.neg()

    def test_expected_errors_build_nothing(self, device, dtype):
        self.assertTrue(torch.can_cast(torch.double, torch.float))
        with self.assertRaisesRegex(RuntimeError, "overflowed"):
            torch.empty([2 ** 62, 2 ** 62], dtype=torch.float64)
        a = torch.ones(4, 3, dtype=dtype, device=device)
        for view_dtype in all_types_and_complex_and(torch.half):
            if torch._utils._element_size(view_dtype) <= 4:
                continue
            with self.assertRaisesRegex(RuntimeError, "divisible"):
                a.view(view_dtype)
        host = torch.zeros(3, dtype=torch.float64)
        self.assertEqual(host.sum().item(), 0)

    def test_dtype_mismatch_provoked(self, device):
        x = torch.ones(2, 2, device=device)
        with self.assertRaisesRegex(RuntimeError, "same dtype"):
            torch.mm(x, x.double())

    def test_cpu_tensor_moved(self, device):
        x = torch.zeros(3, dtype=torch.float64).to(device)
        x.neg()

    def test_dtype_map(self, device, dtype):
        a = torch.ones(4, 8, dtype=dtype, device=device)
        views = {value: key for (key, value) in numpy_to_torch_dtype_dict.items()}
        for view_dtype in views:
            a.view(view_dtype)

    def test_dtype_only_asked_about(self, device, dtype):
        info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
        self.assertGreater(info.max, 0)
        torch.ones(3, device=device).neg()

    def test_device_branches(self, device):
        x = torch.ones(3, device=device)
        if self.device_type == "cuda":
            torch.cuda.synchronize()
        if "cuda" in device or torch.device(device).type in ("cpu", "mps"):
            torch.cholesky_inverse(x)
        elif not device.startswith("cpu"):
            x.neg()
        y = x.double() if self.device_type == "cpu" else x

    def test_loop_builds(self, device):
        for dt in all_types_and_complex_and(torch.half):
            torch.zeros(2, dtype=dt, device=device).neg()
"""
CLS = "TestDispatchPRIVATEUSE1"


def _test(method: str, dtype: str | None) -> InventoryTest:
    return device_test("test/test_dispatch.py", CLS, method, dtype)


@pytest.fixture
def reading(tmp_path: Path, caps) -> tuple[Tools, dict[str, InventoryTest]]:
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_dispatch.py").write_text(SRC, encoding="utf-8")
    tests = {
        f"{m}:{d}": _test(m, d)
        for m, d in (
            ("test_composite_and_metadata", None),
            ("test_missing_kernel", None),
            ("test_gone_from_numpy", "float32"),
            ("test_branches", "float32"),
            ("test_branches", "bool"),
            ("test_expected_errors_build_nothing", "float32"),
            ("test_loop_builds", None),
            ("test_dtype_map", "int32"),
            ("test_dtype_only_asked_about", "float64"),
            ("test_device_branches", None),
            ("test_dtype_mismatch_provoked", None),
            ("test_cpu_tensor_moved", None),
        )
    }
    return Tools(caps, {t.id: t for t in tests.values()}, tmp_path), tests


def _write_tests(
    tmp_path: Path, name: str, src: str, cls: str, methods: tuple[str, ...]
) -> dict[str, InventoryTest]:
    """``src`` as ``test/<name>`` of a checkout in ``tmp_path``, and its snpu tests (no dtype) by method."""
    (tmp_path / "test").mkdir(exist_ok=True)
    (tmp_path / "test" / name).write_text(src, encoding="utf-8")
    cls = f"{cls}PRIVATEUSE1"
    return {
        m: InventoryTest(
            id=f"test/{name}::{cls}::{m}_snpu",
            file=f"test/{name}",
            cls=cls,
            method=f"{m}_snpu",
            template=m,
            device="snpu",
            dtype=None,
            fingerprint=m,
        )
        for m in methods
    }


def _fn(name: str) -> ast.FunctionDef:
    cls = next(n for n in ast.parse(SRC).body if isinstance(n, ast.ClassDef))
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _decide(tools: Tools, *tests: InventoryTest):
    answers, _ = OfflineAgent().decide(list(tests), tools)
    return [answers[t.id] for t in tests]


def test_ops_that_decompose_and_metadata_methods_need_no_kernel_of_their_own(reading):
    """vander is CompositeImplicitAutograd (it runs as the ops it decomposes into) and ndimension is a
    C++ Tensor method with no aten op: neither is a missing kernel. A real missing kernel still skips."""
    tools, tests = reading
    assert kernel_free("vander") and kernel_free("ndimension") and kernel_free("msort")
    assert not kernel_free("cholesky_inverse") and not kernel_free("neg") and not kernel_free("cuda")
    assert not kernel_free("apply_")  # a C++ Tensor method without aten op, but CPU-only
    # names that are attributes of torch.ops.aten but no op (its own name) or of nothing at all
    assert not kernel_free("name") and not kernel_free("") and not kernel_free("no_such_op_anywhere")
    composite, missing = _decide(
        tools, tests["test_composite_and_metadata:None"], tests["test_missing_kernel:None"]
    )
    assert composite.mode == "run" and "vander" in composite.reason and "decompose" in composite.reason
    assert missing.mode == "skip" and "cholesky_inverse" in missing.reason
    # the capability sweep ran vander's samples and they failed: what it decomposes into is missing
    swept = Tools(
        replace(tools.caps, opinfo_failures={"float32": {"vander": "NotImplementedError: aten::cumprod"}}),
        tools.tests,
        tools.source_root,
    )
    (failed,) = _decide(swept, tests["test_composite_and_metadata:None"])
    assert failed.mode == "skip" and "vander" in failed.reason


def test_a_host_function_the_installed_library_lacks_fails_everywhere(reading):
    """np.asscalar is gone from NumPy (>= 1.23): the test raises AttributeError on every device, so it is
    xfail, with the function named; np.sort, which exists, is no such call."""
    tools, tests = reading
    assert missing_host_calls(_fn("test_gone_from_numpy")) == ["np.asscalar", "np.float"]  # called or read
    (gone,) = _decide(tools, tests["test_gone_from_numpy:float32"])
    assert gone.mode == "xfail" and "np.asscalar" in gone.reason and "every device" in gone.reason


def test_branches_the_tests_dtype_never_takes_build_nothing(reading):
    """A complex literal under `elif dtype in [torch.cfloat, torch.cdouble]` or `x if dtype.is_complex else
    y` is built only by the complex instances of the template."""
    tools, tests = reading
    fn = _fn("test_branches")
    assert body_dtypes(fn, "float32") == []
    assert body_dtypes(fn, "bool") == []
    assert "complex64" in body_dtypes(fn, "complex64")
    assert "complex64" in body_dtypes(fn)  # dtype unknown: every branch counts, as before
    for key in ("test_branches:float32", "test_branches:bool"):
        (answer,) = _decide(tools, tests[key])
        assert answer.mode == "run", answer.reason


def test_dtype_queries_expected_errors_and_idle_dtype_loops_build_nothing(reading):
    """torch.can_cast reads dtypes, a factory without device= builds on the CPU, and a dtype-list loop whose
    variable only reaches dtype queries and code under assertRaises (written to fail the op's argument
    checks) builds no complex tensor; a loop whose variable reaches a factory's dtype= does."""
    tools, tests = reading
    refused = {"float64", "complex64", "complex128"}
    assert not refused & set(body_dtypes(_fn("test_expected_errors_build_nothing"), "float32"))
    assert {"complex64", "complex128"} <= set(body_dtypes(_fn("test_loop_builds")))
    idle, loop = _decide(
        tools, tests["test_expected_errors_build_nothing:float32"], tests["test_loop_builds:None"]
    )
    assert idle.mode == "run", idle.reason
    assert loop.mode == "skip" and "complex" in loop.reason


def test_a_refused_dtype_named_in_expected_errors_or_moved_to_the_device_still_builds(reading):
    """x.double() under assertRaisesRegex (to provoke a dtype mismatch) is refused by the device before the
    op's own check, and a CPU float64 tensor moved with .to(device) reaches it: both stay skipped."""
    tools, tests = reading
    assert body_dtypes(_fn("test_dtype_mismatch_provoked")) == ["float64"]
    assert body_dtypes(_fn("test_cpu_tensor_moved")) == ["float64"]
    for key in ("test_dtype_mismatch_provoked:None", "test_cpu_tensor_moved:None"):
        (answer,) = _decide(tools, tests[key])
        assert answer.mode == "skip" and "float64" in answer.reason


def test_iterating_a_harness_dtype_map_builds_every_dtype_it_maps(reading):
    """numpy_to_torch_dtype_dict maps float64 and complex dtypes too: views into each are refused."""
    tools, tests = reading
    assert {"float64", "complex128"} <= set(body_dtypes(_fn("test_dtype_map"), "int32"))
    (answer,) = _decide(tools, tests["test_dtype_map:int32"])
    assert answer.mode == "skip" and "float64" in answer.reason


DEFAULTS_SRC = """
from functools import wraps

import torch
from torch.testing._internal.common_utils import set_default_dtype


def float_double_default_dtype(fn):
    @wraps(fn)
    def wrapped_fn(*args, **kwargs):
        torch.set_default_dtype(torch.float)
        fn(*args, **kwargs)
        torch.set_default_dtype(torch.double)
        fn(*args, **kwargs)
    return wrapped_fn


class TestDefaults(TestCase):
    @float_double_default_dtype
    def test_default_float(self, device):
        t = torch.tensor(2.5, device=device)
        t.neg()

    @float_double_default_dtype
    def test_explicit_dtypes(self, device):
        t = torch.ones(3, dtype=torch.int32, device=device) + torch.tensor([1], device=device)
        t.neg()

    @set_default_dtype(torch.double)
    def test_decorator_call(self, device):
        torch.randn(3, device=device).neg()

    def test_no_default_set(self, device):
        torch.ones(3, device=device).neg()
"""


def test_a_default_dtype_the_module_or_decorators_set_reaches_default_tensors(tmp_path: Path, caps):
    """Under a decorator that sets float64 as the default dtype, a device tensor built from a Python
    float (or a float factory) without dtype= is float64: refused. Tensors with explicit dtypes, and
    tests nothing sets a default for, are not."""
    tests = _write_tests(
        tmp_path,
        "test_defaults.py",
        DEFAULTS_SRC,
        "TestDefaults",
        ("test_default_float", "test_explicit_dtypes", "test_decorator_call", "test_no_default_set"),
    )
    tools = Tools(caps, {t.id: t for t in tests.values()}, tmp_path)
    assert tools.default_dtype(tests["test_default_float"].id) == "float64"
    assert tools.default_dtype(tests["test_decorator_call"].id) == "float64"
    assert tools.default_dtype(tests["test_no_default_set"].id) is None
    answers = dict(zip(tests, _decide(tools, *tests.values()), strict=True))
    assert (
        answers["test_default_float"].mode == "skip"
        and "default dtype" in answers["test_default_float"].reason
    )
    assert answers["test_decorator_call"].mode == "skip"
    assert answers["test_explicit_dtypes"].mode == "run"
    assert answers["test_no_default_set"].mode == "run"


def test_a_dtype_only_asked_about_reaches_no_tensor(reading, caps):
    """torch.finfo(dtype) and dtype.is_floating_point read the dtype on the host: the dtype rule leaves the
    float64 instance to the agent, which runs it (it builds float32 tensors only)."""
    tools, tests = reading
    test = tests["test_dtype_only_asked_about:float64"]
    assert tools.dtype_reaches(test) is False
    assert classify(test, RuleContext(caps, None, dtype_reaches=tools.dtype_reaches)) is None
    (answer,) = _decide(tools, test)
    assert answer.mode == "run", answer.reason


def test_branches_the_device_under_test_never_takes_are_not_read(reading):
    """`if self.device_type == 'cuda': torch.cuda.synchronize()`, a CPU-only branch calling an op snpu lacks,
    and a float64 cast on the CPU only: none of it runs on snpu, so none of it decides."""
    tools, tests = reading
    test = tests["test_device_branches:None"]
    fn = _fn("test_device_branches")
    assert torch_calls(fn, None, "snpu") == ["neg"]
    assert body_dtypes(fn, None, "snpu") == []
    assert "cholesky_inverse" in torch_calls(fn, None, "cpu")  # the CPU takes those branches
    (answer,) = _decide(tools, test)
    assert answer.mode == "run", answer.reason


NAMESPACES_SRC = """
import torch
import torch.nn.functional as F


class TestSpaces(TestCase):
    def test_linalg_and_functional(self, device):
        x = torch.eye(3, device=device)
        torch.linalg.inv(x)
        F.relu(x)
        torch.nn.functional.relu(x)

    def test_missing_linalg(self, device):
        torch.linalg.cholesky_ex(torch.eye(3, device=device))
"""


def test_namespaced_ops_are_read_as_opinfo_names_them(tmp_path: Path, caps):
    """torch.linalg.inv is OpInfo's linalg.inv (aten linalg_inv), not an op called inv: the sweep's answer
    for linalg.inv decides, and a namespaced op the device lacks is named in full."""
    tests = list(
        _write_tests(
            tmp_path,
            "test_spaces.py",
            NAMESPACES_SRC,
            "TestSpaces",
            ("test_linalg_and_functional", "test_missing_linalg"),
        ).values()
    )
    module = ast.parse(NAMESPACES_SRC).body[-1]
    assert torch_calls(module.body[0]) == ["linalg.inv", "nn.functional.relu"]
    swept = replace(caps, opinfo=caps.opinfo | {"linalg.inv"})
    tools = Tools(swept, {t.id: t for t in tests}, tmp_path)
    ok, missing = _decide(tools, *tests)
    assert ok.mode == "run", ok.reason
    assert missing.mode == "skip" and "linalg.cholesky_ex" in missing.reason
