"""An snpu error raised inside autograd's backward reaches the test with its own type and message.

PyTorch 2.13 aborts the process when a Python error escapes an aten op run for a C++
autograd node on a Python backend; snpu records it and ``backward()`` /
``autograd.grad`` raise it in the caller's thread (runners/snpu/backward.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from runners.snpu import dispatch
from runners.snpu.errors import SnpuDtypeError, SnpuKernelResultError, SnpuUnsupportedOpError


def _leaf(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to("snpu").requires_grad_()


@pytest.fixture
def mul_kernel(monkeypatch: pytest.MonkeyPatch):
    """Replace snpu's ``aten::mul.Tensor`` kernel (ExpBackward multiplies) for one test."""

    def replace(fn) -> None:
        old = dispatch.KERNELS["aten::mul.Tensor"]
        monkeypatch.setitem(dispatch.KERNELS, "aten::mul.Tensor", dispatch.Kernel(old.name, fn, old.category))

    return replace


def test_a_missing_backward_kernel_raises_not_implemented_naming_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _leaf(3, 3)
    y = x.exp()  # forward has its kernel; ExpBackward needs aten::mul.Tensor
    monkeypatch.delitem(dispatch.KERNELS, "aten::mul.Tensor")
    with pytest.raises(NotImplementedError, match=r"aten::mul\.Tensor is not implemented on the snpu device") as info:
        y.sum().backward()
    assert type(info.value) is SnpuUnsupportedOpError
    assert "Unable to cast" not in str(info.value)


def test_autograd_grad_raises_the_same_error(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _leaf(4)
    y = x.exp().sum()
    monkeypatch.delitem(dispatch.KERNELS, "aten::mul.Tensor")
    with pytest.raises(SnpuUnsupportedOpError, match=r"aten::mul\.Tensor"):
        torch.autograd.grad(y, x)


@pytest.mark.parametrize(
    ("norm", "missing"),
    [
        (lambda x: F.group_norm(x, 2), "aten::native_group_norm_backward"),
        (lambda x: F.instance_norm(x), "aten::native_batch_norm_backward"),
        (lambda x: F.group_norm(x, 2, torch.ones(4, device="snpu"), torch.zeros(4, device="snpu")),
         "aten::native_group_norm_backward"),
    ],
    ids=["group_norm", "instance_norm", "group_norm_affine"],
)
def test_norm_backward_without_a_kernel_raises_not_implemented(norm, missing: str) -> None:
    # a three-tensor backward: before, the test saw "RuntimeError: Unable to cast S to Tensor"
    x = _leaf(2, 4, 3, 3)
    out = norm(x)
    with pytest.raises(NotImplementedError, match=missing):
        out.sum().backward()


def test_layer_norm_backward_runs_and_matches_the_cpu() -> None:
    x_cpu = torch.randn(2, 4, 3, 3, requires_grad=True)
    x = x_cpu.detach().to("snpu").requires_grad_()
    F.layer_norm(x, (3, 3)).square().sum().backward()
    F.layer_norm(x_cpu, (3, 3)).square().sum().backward()
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad, rtol=1e-4, atol=1e-5)


def test_a_dtype_refusal_inside_backward_keeps_its_type(mul_kernel) -> None:
    def refuse(func, args, kwargs):
        raise SnpuDtypeError(torch.float64, func.name())

    x = _leaf(3)
    y = x.exp()
    mul_kernel(refuse)
    with pytest.raises(SnpuDtypeError, match=r"no torch\.float64 units \(aten::mul\.Tensor\)"):
        y.sum().backward()


def test_a_dtype_refusal_in_a_python_backward_is_an_ordinary_exception() -> None:
    class ToDouble(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            try:
                return g.to(torch.float64)
            except SnpuDtypeError:  # the function's own handler sees the error
                return g * 2

    x = _leaf(3)
    ToDouble.apply(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), 2.0))


def test_a_kernel_returning_a_non_tensor_names_the_op(mul_kernel) -> None:
    mul_kernel(lambda func, args, kwargs: "not a tensor")
    a = torch.randn(3).to("snpu")
    with pytest.raises(SnpuKernelResultError, match=r"aten::mul\.Tensor returned a str .* returns a Tensor"):
        a * a
    x = _leaf(3)
    y = x.exp()
    with pytest.raises(SnpuKernelResultError, match=r"aten::mul\.Tensor"):
        y.sum().backward()


def test_a_kernel_returning_the_wrong_number_of_values_names_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    old = dispatch.KERNELS["aten::native_layer_norm"]
    monkeypatch.setitem(
        dispatch.KERNELS,
        "aten::native_layer_norm",
        dispatch.Kernel(old.name, lambda func, args, kwargs: args[0], old.category),
    )
    with pytest.raises(SnpuKernelResultError, match=r"aten::native_layer_norm returned a Tensor where the schema"):
        F.layer_norm(torch.randn(2, 3).to("snpu"), (3,))


def test_an_error_caught_by_an_earlier_caller_does_not_leak_into_the_next_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = _leaf(3)
    y = x.exp()
    saved = dispatch.KERNELS["aten::mul.Tensor"]
    monkeypatch.delitem(dispatch.KERNELS, "aten::mul.Tensor")
    with pytest.raises(NotImplementedError):
        y.sum().backward()
    dispatch.KERNELS["aten::mul.Tensor"] = saved
    z = _leaf(3)
    z.exp().sum().backward()
    torch.testing.assert_close(z.grad.cpu(), z.detach().cpu().exp())


_NORM_BACKWARD_TESTS = '''
import torch
import torch.nn.functional as F
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestNormBackward(TestCase):
    def test_group_norm_backward(self, device):
        x = torch.randn(2, 4, 3, 3, device=device, requires_grad=True)
        F.group_norm(x, 2).sum().backward()

    def test_instance_norm_backward(self, device):
        x = torch.randn(2, 4, 3, 3, device=device, requires_grad=True)
        F.instance_norm(x).sum().backward()

    def test_layer_norm_backward(self, device):
        x = torch.randn(2, 4, 3, 3, device=device, requires_grad=True)
        F.layer_norm(x, (3, 3)).sum().backward()
        self.assertEqual(x.grad.shape, x.shape)


instantiate_device_type_tests(TestNormBackward, globals())

if __name__ == "__main__":
    run_tests()
'''


@pytest.mark.slow
def test_a_run_records_the_error_class_and_refine_skips_the_missing_backward(tmp_path, monkeypatch) -> None:
    import yaml

    from crcr.contracts.results import load_results
    from tests.runners.helpers import crcr

    monkeypatch.delenv("CI", raising=False)
    tree = tmp_path / "pytorch"
    (tree / "test" / "nn").mkdir(parents=True)
    (tree / "test" / "nn" / "test_norm_backward.py").write_text(_NORM_BACKWARD_TESTS, encoding="utf-8")
    results = tmp_path / "results.json"
    status = crcr("run", "--device", "snpu", "--pytorch-src", str(tree), "--results", str(results),
                  "--log", str(tmp_path / "log"))
    assert status == 1
    by_id = {t.id.rsplit("::", 1)[1]: t for t in load_results(results).tests}
    for name, op in (("test_group_norm_backward_snpu", "native_group_norm_backward"),
                     ("test_instance_norm_backward_snpu", "native_batch_norm_backward")):
        assert (by_id[name].outcome, by_id[name].error_class) == ("failed", "SnpuUnsupportedOpError")
        assert f"aten::{op} is not implemented on the snpu device" in by_id[name].message
        assert "Unable to cast" not in by_id[name].message
    assert by_id["test_layer_norm_backward_snpu"].outcome == "passed"

    plan_dir = tmp_path / "plan"
    plan_file = plan_dir / "nn" / "test_norm_backward.yaml"
    plan_file.parent.mkdir(parents=True)
    cls = "TestNormBackwardPRIVATEUSE1"
    plan_file.write_text(yaml.safe_dump({
        "schema_version": 1, "backend": "snpu", "upstream": {"file": "test/nn/test_norm_backward.py"},
        "defaults": {"mode": "run", "reason": "fixture"}, "tests": [],
    }), encoding="utf-8")
    assert crcr("select", "refine", "--results", str(results), "-b", "snpu", "--plan", str(plan_dir)) == 0
    written = yaml.safe_load(plan_file.read_text(encoding="utf-8"))
    modes = {e["id"]: e["mode"] for e in written["tests"]}
    assert modes[f"{cls}::test_group_norm_backward_snpu"] == "skip"
    assert modes[f"{cls}::test_instance_norm_backward_snpu"] == "skip"
