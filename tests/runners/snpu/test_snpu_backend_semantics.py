"""snpu behaves like a backend where upstream tests check it: out=, complex, prims, new ops."""

from __future__ import annotations

import warnings

import pytest
import torch

import runners.snpu
from runners.snpu import dispatch
from runners.snpu.dispatch import DuplicateKernelError, register
from runners.snpu.errors import SnpuDtypeError

runners.snpu.install()


def test_out_with_an_unsafe_cast_raises_as_on_cpu() -> None:
    a = torch.randn(3)
    with pytest.raises(RuntimeError) as cpu:
        torch.add(a, a, out=torch.empty(3, dtype=torch.long))
    out = torch.zeros(3, dtype=torch.long, device="snpu")
    with pytest.raises(RuntimeError) as dev:
        torch.add(a.to("snpu"), a.to("snpu"), out=out)
    assert (
        str(dev.value) == str(cpu.value) == "result type Float can't be cast to the desired output type Long"
    )
    assert out.cpu().tolist() == [0, 0, 0]  # nothing was truncated into it
    # a safe cast (float result into a float out of another width) still works
    half = torch.empty(3, dtype=torch.float16, device="snpu")
    torch.add(a.to("snpu"), a.to("snpu"), out=half)
    torch.testing.assert_close(half.cpu(), (a + a).half())


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (torch.pow, (2.0, "t")),  # pow.Scalar_out: a scalar base, its arguments named as pow.Tensor_Tensor's
        (torch.pow, ("t", 3.0)),  # pow.Tensor_Scalar_out
        (torch.pow, ("t", "t")),  # pow.Tensor_Tensor_out
    ],
    ids=["scalar-base", "scalar-exponent", "tensors"],
)
def test_an_out_overload_runs_through_the_functional_overload_of_its_argument_types(call, args) -> None:
    """Held back round 12: ``torch.pow(2.0, t, out=o)`` went to ``pow.Tensor_Tensor`` (the first overload whose
    argument names match) and failed with torch's argument-type error."""
    t = torch.tensor([1.0, 2.0, 3.0])
    want = call(*[t if a == "t" else a for a in args])
    out = torch.empty(3, device="snpu")
    got = call(*[t.to("snpu") if a == "t" else a for a in args], out=out)
    assert got is out
    torch.testing.assert_close(out.cpu(), want)


def test_an_out_overload_named_for_its_outputs_runs_on_its_ops_kernel() -> None:
    """``kthvalue.values`` writes ``values`` and ``indices``: snpu runs it with the kthvalue kernel, and the
    capability file's ``out_routes`` says so (held back round 14 planned it as a missing kernel)."""
    from runners.snpu.capabilities import routed_out_overloads

    a = torch.tensor([3.0, 1.0, 2.0, 5.0])
    values, indices = torch.empty(()), torch.empty((), dtype=torch.long)
    torch.kthvalue(a, 2, out=(values, indices))
    dev_values, dev_indices = torch.empty((), device="snpu"), torch.empty((), dtype=torch.long, device="snpu")
    torch.kthvalue(a.to("snpu"), 2, out=(dev_values, dev_indices))
    assert (dev_values.cpu().item(), dev_indices.cpu().item()) == (values.item(), indices.item()) == (2.0, 2)
    assert routed_out_overloads()["aten::kthvalue.values"] == "aten::kthvalue"


def test_an_out_overload_without_a_functional_kernel_is_refused_as_unsupported() -> None:
    """``full.out`` has no functional overload of its arguments (``full`` takes dtype and device), and
    ``bitwise_and.Scalar_out``'s (``bitwise_and.Scalar``) has no kernel: both are refused with snpu's
    unsupported-op error, where a route by argument names called ``bitwise_and.Tensor`` with a number."""
    from runners.snpu.errors import SnpuUnsupportedOpError

    with pytest.raises(SnpuUnsupportedOpError, match=r"aten::full\.out"):
        torch.full((2,), 1.0, out=torch.empty(2, device="snpu"))
    ints = torch.arange(4, dtype=torch.int32, device="snpu")
    with pytest.raises(SnpuUnsupportedOpError, match=r"aten::bitwise_and\.Scalar_out"):
        torch.ops.aten.bitwise_and.Scalar_out(ints, 3, out=torch.empty(4, dtype=torch.int32, device="snpu"))


def test_out_accepts_what_cpu_accepts_for_reductions() -> None:
    x = torch.tensor([-0.7, -0.9, -0.6, 2.5])  # truncating before or after the sum differs
    cpu = torch.empty((), dtype=torch.long)
    torch.sum(x, 0, out=cpu)
    dev = torch.empty((), dtype=torch.long, device="snpu")
    torch.sum(x.to("snpu"), 0, out=dev)
    assert dev.cpu().item() == cpu.item()


def _warnings_of(fn) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_resizing_a_non_empty_out_warns_like_cpu_and_an_empty_one_does_not() -> None:
    a = torch.randn(3)
    cpu_msgs = _warnings_of(lambda: torch.add(a, a, out=torch.empty(2, 2)))
    dev_out = torch.empty(2, 2, device="snpu")
    dev_msgs = _warnings_of(lambda: torch.add(a.to("snpu"), a.to("snpu"), out=dev_out))
    assert len(dev_msgs) == 1 and "An output with one or more elements was resized" in dev_msgs[0]
    # CPU appends where it was triggered in C++; the sentence itself is the same
    assert cpu_msgs[0].startswith(dev_msgs[0])
    assert dev_out.shape == (3,)
    torch.testing.assert_close(dev_out.cpu(), a + a)
    assert (
        _warnings_of(lambda: torch.add(a.to("snpu"), a.to("snpu"), out=torch.empty(0, device="snpu"))) == []
    )


@pytest.mark.parametrize("shape", [(3,), (), (0,)])
def test_a_cpu_tensor_as_out_for_snpu_inputs_is_refused(shape: tuple[int, ...]) -> None:
    x = torch.randn(shape).to("snpu")
    cpu_out = torch.empty(shape)
    with pytest.raises(RuntimeError, match="device"):
        torch.add(x, x, out=cpu_out)
    with pytest.raises(RuntimeError, match="device"):
        torch.exp(x, out=cpu_out)


@pytest.mark.parametrize(
    "make",
    [
        lambda t: 1j * t,
        lambda t: t * 1j,
        lambda t: t + (1 + 2j),
        lambda t: t * torch.tensor(1j),
        lambda t: t.add_(1j),
    ],
    ids=["rmul", "mul", "add", "tensor", "inplace"],
)
def test_complex_is_refused_at_every_entry_with_a_runtime_error(make) -> None:
    t = torch.randn(3, device="snpu")
    with pytest.raises(SnpuDtypeError, match="complex") as info:
        make(t)
    # torch's binary-op wrappers swallow a TypeError into NotImplemented; this must not be one
    assert isinstance(info.value, RuntimeError) and not isinstance(info.value, TypeError)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "atan2"])
def test_prims_binary_ops_run_through_snpu_kernels(op: str) -> None:
    a, b = torch.randn(4, 5), torch.rand(4, 5) + 0.5
    prim = getattr(torch.ops.prims, op)
    with runners.snpu.profile() as prof:
        got = prim(a.to("snpu"), b.to("snpu"))
    assert got.device.type == "snpu"
    torch.testing.assert_close(got.cpu(), prim(a, b))
    # the prim ran as the aten op's snpu kernel, tile by tile
    assert any(r.op.startswith("aten::") and r.tiles >= 1 for r in prof.records)


def test_prims_convert_element_type_and_refs() -> None:
    import torch._refs as refs

    a = torch.randn(6)
    got = torch.ops.prims.convert_element_type(a.to("snpu"), torch.float16)
    assert got.device.type == "snpu" and got.dtype == torch.float16
    torch.testing.assert_close(got.cpu(), a.half())
    torch.testing.assert_close(refs.add(a.to("snpu"), a.to("snpu"), alpha=2).cpu(), a + 2 * a)
    with pytest.raises(SnpuDtypeError):
        torch.ops.prims.convert_element_type(a.to("snpu"), torch.float64)


def test_new_ops_match_the_cpu() -> None:
    torch.manual_seed(0)
    x, idx, src = torch.randn(5, 4), torch.tensor([0, 2, 2]), torch.randn(3, 4)
    dev = x.to("snpu")
    dev.index_add_(0, idx.to("snpu"), src.to("snpu"), alpha=2)
    torch.testing.assert_close(dev.cpu(), x.clone().index_add_(0, idx, src, alpha=2))
    m, v1, v2 = torch.randn(3, 4), torch.randn(3), torch.randn(4)
    got = torch.addr(m.to("snpu"), v1.to("snpu"), v2.to("snpu"), beta=0.5, alpha=2)
    torch.testing.assert_close(got.cpu(), torch.addr(m, v1, v2, beta=0.5, alpha=2))
    a = torch.randn(4, 4) + 4 * torch.eye(4)
    torch.testing.assert_close(torch.linalg.inv(a.to("snpu")).cpu(), torch.linalg.inv(a))
    img, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    torch.testing.assert_close(
        torch.nn.functional.conv2d(img.to("snpu"), w.to("snpu")).cpu(), torch.nn.functional.conv2d(img, w)
    )
    y = torch.rand(10) * 5
    torch.testing.assert_close(torch.special.polygamma(1, y.to("snpu")).cpu(), torch.special.polygamma(1, y))


def test_where_and_masked_fill_run_tiled() -> None:
    x, mask = torch.randn(8, 8), torch.rand(8, 8) > 0.5
    with runners.snpu.profile() as prof:
        got_where = torch.where(mask.to("snpu"), x.to("snpu"), -x.to("snpu"))
        got_fill = x.to("snpu").masked_fill(mask.to("snpu"), 3.0)
    torch.testing.assert_close(got_where.cpu(), torch.where(mask, x, -x))
    torch.testing.assert_close(got_fill.cpu(), x.masked_fill(mask, 3.0))
    for name in ("aten::where.self", "aten::masked_fill.Scalar"):
        assert dispatch.KERNELS[name].execution == "tiled"
        assert prof.by_op()[name]["tiles"] >= 1


def test_registering_a_name_twice_raises() -> None:
    def fake(func, args, kwargs):  # pragma: no cover - never called
        raise AssertionError

    with pytest.raises(DuplicateKernelError, match=r"aten::mm"):
        register("mm", category="matmul", execution="tiled")(fake)
    with pytest.raises(DuplicateKernelError, match=r"aten::crcr_test_op"):
        register("crcr_test_op", "crcr_test_op", category="x", execution="whole")(fake)
    assert "aten::crcr_test_op" not in dispatch.KERNELS
    assert dispatch.KERNELS["aten::mm"].category == "matmul" and dispatch.KERNELS["aten::mm"].fn is not fake


def test_every_kernel_says_how_it_runs() -> None:
    executions = {k.execution for k in dispatch.KERNELS.values()}
    assert executions <= {"tiled", "whole", "view"}
    assert dispatch.KERNELS["aten::mm"].execution == "tiled"
    assert dispatch.KERNELS["aten::sort"].execution == "whole"
    assert dispatch.KERNELS["aten::view"].execution == "view"


_ARG_ERRORS = {
    "clamp without bounds": lambda d: torch.randn(5, device=d).clamp(),
    "clamp_ without bounds": lambda d: torch.randn(5, device=d).clamp_(),
    "float alpha for int tensors": lambda d: torch.add(
        torch.ones(4, dtype=torch.int, device=d), torch.ones(4, dtype=torch.int, device=d), alpha=1.1
    ),
    "in-place int += float": lambda d: torch.ones(4, dtype=torch.int32, device=d).add_(1.5),
    "in-place bool += uint8": lambda d: torch.ones(3, dtype=torch.bool, device=d).add_(
        torch.ones(3, dtype=torch.uint8, device=d)
    ),
}


@pytest.mark.parametrize("call", list(_ARG_ERRORS.values()), ids=list(_ARG_ERRORS))
def test_argument_errors_are_the_cpus_type_and_message(call) -> None:
    """snpu computes shapes on meta tensors, whose checks (meta kernels, Python references) word and type
    their refusals differently: the user must see what the CPU says (upstream tests assert it)."""
    with pytest.raises(Exception) as cpu:
        call("cpu")
    with pytest.raises(Exception) as dev:
        call("snpu")
    assert type(dev.value) is type(cpu.value) is RuntimeError
    assert str(dev.value) == str(cpu.value)
