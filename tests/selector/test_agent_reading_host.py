"""What the offline agent reads about where a test's work happens and what its names stand for: a test whose
device argument reaches nothing builds everything on the CPU or another explicit device; ops with no kernel of
their own (composites, ``nn`` modules) run as what they call; ops reached indirectly; branches never taken."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from crcr.contracts.inventory import InventoryTest
from selector.agent.offline import OfflineAgent
from selector.agent.tools import Tools
from selector.plan import classify_tests
from selector.rules import RuleContext
from tests.selector.reading_fixtures import device_test

CLS = "TestHostPRIVATEUSE1"


def _checkout(
    tmp_path: Path, src: str, caps, *tests: tuple[str, str | None]
) -> tuple[Tools, list[InventoryTest]]:
    (tmp_path / "test").mkdir(exist_ok=True)
    (tmp_path / "test" / "test_host.py").write_text(src, encoding="utf-8")
    made = [device_test("test/test_host.py", CLS, method, dtype) for method, dtype in tests]
    return Tools(caps, {t.id: t for t in made}, tmp_path), made


def _plan(tools: Tools, tests: list[InventoryTest]) -> list[tuple[str, str]]:
    """(mode, reason) per test: the rules first, then the offline agent, as the planner does."""
    ctx = RuleContext(tools.caps, dtype_reaches=tools.dtype_reaches)
    decided = classify_tests(tests, ctx, OfflineAgent(), tools)
    return [(decided[t.id].mode, decided[t.id].reason) for t in tests]


HOST_SRC = """
import torch


class TestHost(TestCase):
    def test_meta_and_cpu_storages(self, device, dtype):
        s0 = torch.TypedStorage([1, 2], device='meta', dtype=dtype)
        with self.assertRaisesRegex(RuntimeError, 'only available on CPU'):
            s0.share_memory_()
        if torch.cuda.is_available():
            s0.pin_memory()
        for device in ['cpu']:
            s1 = torch.TypedStorage([1, 2], device=device, dtype=dtype)
            self.assertEqual(s1.element_size(), s0.element_size())

    def test_device_only_compared(self, device, dtype):
        if torch.device(device).type == 'cuda':
            return
        s = torch.FloatStorage(4)
        s[:] = 0
        self.assertEqual(s.tolist(), [0, 0, 0, 0])

    def test_device_reaches(self, device, dtype):
        x = torch.ones(3, dtype=dtype, device=device)
        self.assertEqual(x.sum().item(), 3)

    def test_helper_may_use_device(self, device, dtype):
        self._check(torch.ones(2, dtype=dtype))
"""


def test_a_test_whose_device_argument_reaches_nothing_runs_as_on_the_cpu(tmp_path: Path, caps):
    """Storages made on 'meta' or in a loop rebinding ``device`` to 'cpu', and a device read only in a
    device-type condition, put nothing on snpu: float64 and complex are not refused and storage calls need
    no snpu kernel. A device that reaches a factory, or a helper of the test case, still counts."""
    tools, tests = _checkout(
        tmp_path,
        HOST_SRC,
        caps,
        ("test_meta_and_cpu_storages", "float32"),
        ("test_meta_and_cpu_storages", "complex128"),
        ("test_device_only_compared", "float64"),
        ("test_device_reaches", "float64"),
        ("test_helper_may_use_device", "float64"),
    )
    meta32, meta128, compared, reaches, helper = _plan(tools, tests)
    assert meta32[0] == "run" and "reaches nothing" in meta32[1]
    assert meta128[0] == "run" and compared[0] == "run"
    assert reaches[0] == "skip" and "float64" in reaches[1]
    assert helper[0] == "skip" and "float64" in helper[1]


COMPOSITE_SRC = """
import torch


class TestHost(TestCase):
    def test_permuted_factory(self, device, dtype):
        x = torch.empty_permuted((2, 3, 4), (2, 0, 1), dtype=dtype, device=device)
        self.assertEqual(x.shape, (2, 3, 4))

    def test_unpool_module(self, device, dtype):
        module = torch.nn.MaxUnpool2d(2)
        x = torch.ones(1, 1, 2, 2, dtype=dtype, device=device)
        module(x, torch.zeros(1, 1, 2, 2, dtype=torch.long, device=device))

    def test_missing_kernel_still_missing(self, device, dtype):
        torch.cholesky_inverse(torch.ones(2, 2, dtype=dtype, device=device))
"""


def test_factories_with_a_composite_kernel_and_nn_modules_run_as_what_they_call(tmp_path: Path, caps):
    """``empty_permuted`` takes no tensor and has a CompositeExplicitAutograd kernel (empty, then permute):
    the dispatcher runs it on any backend. ``nn.MaxUnpool2d`` is no op name: the module computes through
    ``nn.functional.max_unpool2d``, which the capability file lists. A kernel really missing still skips."""
    from selector.agent.offline import kernel_free

    assert (
        kernel_free("empty_permuted") and not kernel_free("new_empty") and not kernel_free("cholesky_inverse")
    )
    # the sweep compared empty_permuted's uninitialized values with the CPU's: a mismatch says nothing
    mismatch = {"empty_permuted": "AssertionError: Tensor-likes are not close!"}
    caps = replace(
        caps, opinfo=caps.opinfo | {"nn.functional.max_unpool2d"}, opinfo_failures={"float32": mismatch}
    )
    tools, tests = _checkout(
        tmp_path,
        COMPOSITE_SRC,
        caps,
        ("test_permuted_factory", "float32"),
        ("test_unpool_module", "float32"),
        ("test_missing_kernel_still_missing", "float32"),
    )
    assert tools.supports("nn.functional.max_unpool2d") and not tools.supports("empty_permuted")
    permuted, unpool, missing = _plan(tools, tests)
    assert permuted[0] == "run" and "empty_permuted" in permuted[1]
    assert unpool[0] == "run" and "max_unpool2d" in unpool[1]
    assert missing[0] == "skip" and "cholesky_inverse" in missing[1]


BRANCH_SRC = """
import torch
from torch.testing._internal.common_dtype import get_all_complex_dtypes


class TestHost(TestCase):
    def test_complex_only_in_its_branch(self, device, dtype):
        x = torch.ones(3, dtype=dtype, device=device)
        if dtype in get_all_complex_dtypes():
            x = x * torch.tensor(1j, device=device)
        x.neg()

    def test_cuda_branch(self, device):
        x = torch.ones(3, device=device)
        if torch.cuda.is_available():
            torch.cholesky_inverse(x.cuda())
        x.neg()
"""


def test_branches_on_harness_dtype_lists_and_cuda_availability_are_read_for_the_test(tmp_path: Path, caps):
    """``dtype in get_all_complex_dtypes()`` is False for float32: the complex tensor in its branch is never
    built. ``torch.cuda.is_available()`` is False where the installed torch has no CUDA: its branch never
    runs. Where the branch is taken (complex64) it still counts."""
    import torch

    tools, tests = _checkout(
        tmp_path,
        BRANCH_SRC,
        caps,
        ("test_complex_only_in_its_branch", "float32"),
        ("test_complex_only_in_its_branch", "complex64"),
        ("test_cuda_branch", None),
    )
    real, cplx, cuda = _plan(tools, tests)
    assert real[0] == "run" and cplx[0] == "skip"
    if torch.version.cuda is None:
        assert cuda[0] == "run" and "cholesky_inverse" not in cuda[1]
    else:
        assert cuda[0] == "skip"


BACKWARD_SRC = """
import torch


class TestHost(TestCase):
    def test_pool_backward(self, device):
        pool = torch.nn.AdaptiveAvgPool2d(2)
        x = torch.ones(1, 4, 4, requires_grad=True, device=device)
        out = pool(x)
        out.backward(torch.ones_like(out))

    def test_pool_forward_only(self, device):
        pool = torch.nn.AdaptiveAvgPool2d(2)
        pool(torch.ones(1, 4, 4, device=device))

    def test_relu_backward(self, device):
        x = torch.ones(3, requires_grad=True, device=device)
        torch.autograd.grad(torch.nn.functional.relu(x).sum(), x)
"""


def test_a_backward_pass_needs_the_backward_kernel_torch_names_after_the_op(tmp_path: Path, caps):
    """A test that runs backward through adaptive_avg_pool2d needs aten::_adaptive_avg_pool2d_backward:
    where the capability file lists no such kernel the test is skipped, naming it. The forward alone runs;
    relu's backward (threshold_backward, listed) runs."""
    caps = replace(
        caps,
        opinfo=caps.opinfo | {"nn.functional.adaptive_avg_pool2d"},
        aten_ops=caps.aten_ops | {"aten::adaptive_avg_pool2d", "aten::threshold_backward", "aten::relu"},
    )
    tools, tests = _checkout(
        tmp_path,
        BACKWARD_SRC,
        caps,
        ("test_pool_backward", None),
        ("test_pool_forward_only", None),
        ("test_relu_backward", None),
    )
    backward, forward, relu = _plan(tools, tests)
    assert backward[0] == "skip" and "_adaptive_avg_pool2d_backward" in backward[1]
    assert forward[0] == "run" and relu[0] == "run"


STORAGE_SRC = """
import torch


class TestHost(TestCase):
    def test_storage_copied(self, device, dtype):
        a = torch.zeros(4, dtype=dtype, device=device)
        before = a.untyped_storage().clone()
        a.resize_(8)
        self.assertEqual(torch.tensor(before, dtype=dtype).numel(), 4)

    def test_storage_read(self, device, dtype):
        a = torch.zeros(4, dtype=dtype, device=device)
        self.assertEqual(a.untyped_storage().data_ptr(), a.data_ptr())
"""


def test_a_storage_allocated_on_a_device_without_allocator_is_skipped(tmp_path: Path, caps):
    """Copying a device tensor's storage allocates a storage on the device: where the capability file
    says device_storage_allocation is false the test is skipped, naming the call; reading a storage's
    metadata allocates nothing. Where the file says nothing, nothing changes."""
    caps = replace(caps, aten_ops=caps.aten_ops | {"aten::resize_"})
    flagged = replace(caps, features={**caps.features, "device_storage_allocation": False})
    tools, tests = _checkout(
        tmp_path, STORAGE_SRC, flagged, ("test_storage_copied", "float32"), ("test_storage_read", "float32")
    )
    copied, read = _plan(tools, tests)
    assert copied[0] == "skip" and "untyped_storage().clone()" in copied[1]
    assert read[0] == "run"
    silent, _ = _plan(Tools(caps, tools.tests, tmp_path), tests)
    assert silent[0] == "run"


INDIRECT_SRC = """
import torch


class TestHost(TestCase):
    @parametrize("fn", ["neg", "cholesky_inverse", "map"])
    def test_by_name(self, device, fn):
        t = torch.ones(2, 2, device=device)
        if hasattr(t, fn):
            getattr(t, fn)()
        if hasattr(t, fn + "_"):
            getattr(t, fn + "_")(t, lambda a, b: a)
"""


def test_ops_reached_by_a_parametrized_name_are_read(tmp_path: Path, caps):
    """``getattr(t, fn)`` and ``getattr(t, fn + "_")`` with ``fn`` from ``@parametrize`` call the op of
    that name: cholesky_inverse (no snpu kernel) and map_ (CPU tensors only) skip, neg runs."""
    caps = replace(caps, aten_ops=caps.aten_ops | {"aten::neg", "aten::neg_"})
    tools, made = _checkout(tmp_path, INDIRECT_SRC, caps, ("test_by_name", None))
    base = made[0]
    tests = [
        base.model_copy(
            update={"id": f"{base.id}_fn_{v}", "method": f"test_by_name_fn_{v}_snpu", "params": {"fn": v}}
        )
        for v in ("neg", "cholesky_inverse", "map")
    ]
    tools = Tools(caps, {t.id: t for t in tests}, tmp_path)
    neg, chol, mapped = _plan(tools, tests)
    assert neg[0] == "run"
    assert chol[0] == "skip" and "cholesky_inverse" in chol[1]
    assert mapped[0] == "skip" and "map_" in mapped[1]


LOOP_SRC = """
import torch
from itertools import product
from torch.testing._internal.common_dtype import get_all_dtypes


class TestHost(TestCase):
    def test_every_pair(self, device):
        for d0, d1 in product(get_all_dtypes(), repeat=2):
            a = torch.ones(3, device=device, dtype=d0)
            self.assertEqual(torch.add(a, a.to(d1)).dtype, torch.promote_types(d0, d1))

    def test_pairs_only_asked_about(self, device):
        for d0, d1 in product(get_all_dtypes(), repeat=2):
            self.assertTrue(torch.can_cast(d0, d0) or d1 is not None)
        torch.ones(3, device=device).neg()
"""


def test_a_loop_over_combined_dtype_lists_builds_every_dtype_its_variables_reach(tmp_path: Path, caps):
    """``for d0, d1 in product(get_all_dtypes(), repeat=2)`` building device tensors in d0 builds float64
    and complex: the test is skipped; the same loop that only asks about the dtypes builds nothing."""
    caps = replace(caps, aten_ops=caps.aten_ops | {"aten::neg"})
    tools, tests = _checkout(
        tmp_path, LOOP_SRC, caps, ("test_every_pair", None), ("test_pairs_only_asked_about", None)
    )
    pairs, asked = _plan(tools, tests)
    assert pairs[0] == "skip" and "float64" in pairs[1]
    assert asked[0] == "run"


PLAIN_SRC = """
import torch
from torch.testing._internal.common_utils import TEST_PRIVATEUSE1


class TestPlain(TestCase):
    def test_host_only(self, average_attn_weights):
        x = torch.ones(2, 2, dtype=torch.float64)
        torch.cholesky_inverse(x)

    def test_names_the_backend(self):
        x = torch.ones(2, 2, device="privateuse1")
        torch.cholesky_inverse(x)

    @unittest.skipIf(not TEST_PRIVATEUSE1, "no backend")
    def test_guarded_by_the_backend(self):
        torch.cholesky_inverse(torch.ones(2, 2).to(torch.accelerator.current_accelerator()))

    def test_through_a_helper(self):
        self._check(torch.ones(2, 2))
"""


def _plain(method: str) -> InventoryTest:
    """The record pytest's collection gives a test of a class that is not instantiated per device type."""
    return InventoryTest(
        id=f"test/test_host.py::TestPlain::{method}",
        file="test/test_host.py",
        cls="TestPlain",
        method=method,
        template=method,
        fingerprint="f" + method,
    )


def test_a_test_of_a_class_not_instantiated_per_device_type_runs_on_the_cpu(tmp_path: Path, caps):
    """A plain ``TestCase`` (``instantiate_parametrized_tests``, not ``instantiate_device_type_tests``) builds
    its tensors on the CPU whatever ``crcr run --device`` says, so an op snpu has no kernel for and float64
    do not stop it (held back round 8: ``test_multihead_attention_average_attn_weights_False``, planned skip
    for ``multi_head_attention_forward`` when its trace timed out, passes on snpu). A body that names the
    backend, the current accelerator or a helper of the test case is read as before (not as host-only)."""
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_host.py").write_text(PLAIN_SRC, encoding="utf-8")
    tests = [
        _plain(m)
        for m in ("test_host_only", "test_names_the_backend", "test_guarded_by_the_backend", "test_through_a_helper")
    ]
    tools = Tools(caps, {t.id: t for t in tests}, tmp_path)
    host, named, guarded, helper = _plan(tools, tests)
    assert host[0] == "run" and "not instantiated per device type" in host[1]
    for _mode, reason in (named, guarded, helper):
        assert "not instantiated per device type" not in reason, reason


INIT_SRC = """
import torch
import torch.nn.init as init
from torch.testing._internal.common_utils import TestCase


class TestNNInit(TestCase):
    def test_calculate_gain_linear(self):
        self.assertEqual(init.calculate_gain("linear"), 1)
"""


def test_a_plain_testcase_test_collected_for_the_device_is_read_by_its_own_name(tmp_path: Path, caps):
    """Held-back round 9: pytest's collection records a plain TestCase's test (``TestNNInit::test_calculate_gain_linear``)
    with no template, since its method is not instantiated. Its source was looked up under the method name less
    everything after its first underscore (``test``), so the static reading said "the test's source is not readable
    here" and kept it ``skip`` (20 of test_init's 29 executed tests, all passing, in the no-trace baseline)."""
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_plain.py").write_text(INIT_SRC, encoding="utf-8")
    test = InventoryTest(
        id="test/test_plain.py::TestNNInit::test_calculate_gain_linear", file="test/test_plain.py", cls="TestNNInit",
        method="test_calculate_gain_linear", template=None, device="snpu", fingerprint="fplain",
    )
    tools = Tools(caps, {test.id: test}, tmp_path)
    source = tools.read_test_source(test.id)
    assert source is not None and source.startswith("def test_calculate_gain_linear(self):")
    [(mode, reason)] = _plan(tools, [test])
    assert (mode, "not readable" in reason) == ("run", False), reason
