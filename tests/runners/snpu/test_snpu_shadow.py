"""snpu's shadow mode (runners/snpu/shadow.py): snpu's tensors and device semantics, the CPU's kernels; what it
records is what the device-shadow trace plans from."""

from __future__ import annotations

import pytest
import torch

from runners.cpu_trace import row_length
from runners.snpu import dispatch
from runners.snpu.errors import SnpuDtypeError
from runners.snpu.shadow import ShadowRecorder, shadow
from runners.snpu.tensor import SnpuTensor


def _ops(rec: ShadowRecorder) -> dict[str, dict]:
    return {o["op"]: o for o in rec.result()}


def test_no_snpu_kernel_decides_a_value(monkeypatch):
    """A broken snpu kernel changes what snpu computes, not what the shadow computes: its verdict is the CPU's."""
    kernel = dispatch.KERNELS["aten::mul.Tensor"]
    monkeypatch.setitem(dispatch.KERNELS, "aten::mul.Tensor",
                        dispatch.Kernel(kernel.name, lambda func, args, kwargs: func(*args, **kwargs) + 1,
                                        kernel.category, execution="whole"))
    x = torch.ones(3, device="snpu") * 2
    assert x.cpu().tolist() == [3.0, 3.0, 3.0]  # the broken kernel ran on snpu
    rec = ShadowRecorder(row_length)
    with shadow(rec):
        y = torch.ones(3, device="snpu") * 2
        assert isinstance(y, SnpuTensor) and y.device.type == "snpu"
        assert y.cpu().tolist() == [2.0, 2.0, 2.0]
    assert "aten::mul.Tensor" in _ops(rec)


def test_refused_dtypes_are_recorded_not_raised():
    with pytest.raises(SnpuDtypeError):
        torch.arange(4, device="snpu", dtype=torch.float64)
    rec = ShadowRecorder(row_length)
    with shadow(rec):
        x = torch.arange(4, device="snpu", dtype=torch.float64)
        y = torch.ones(2, device="snpu").double()
        assert x.sum().item() == 6 and y.dtype == torch.float64 and y.device.type == "snpu"
    ops = _ops(rec)
    assert "float64" in ops["aten::arange.start_out"]["dtypes"]
    assert "float64" in ops["aten::_to_copy"]["dtypes"]  # the result made on the device in a refused dtype


def test_a_call_the_cpu_refuses_too_raises_snpus_dtype_error_and_records_no_refused_dtype():
    """Held back round 13: upstream's test_index_fill checks that ``index_fill_`` of a complex scalar into a real
    tensor raises RuntimeError ("Scalar"). The device raises its dtype error at that call, which the test catches,
    and the test passes on snpu; the shadow run recorded complex64 there and the test was planned skip."""
    rec = ShadowRecorder(row_length)
    with shadow(rec):
        x = torch.tensor([[1.0, 2.0], [4.0, 5.0]], device="snpu")
        index = torch.tensor([0], device="snpu")
        with pytest.raises(SnpuDtypeError, match="complex64"):  # as on the device, not the CPU's own message
            x.index_fill_(1, index, 1 + 1j)
        doubled = torch.ones(2, device="snpu") * (1 + 0j)  # allowed on the CPU: recorded, not raised
        torch.manual_seed(0)
        drawn = torch.zeros(2, device="snpu", dtype=torch.float64).uniform_().cpu()  # refused, checked on the host
        after = torch.rand(2, device="snpu").cpu()
    torch.manual_seed(0)
    want = torch.zeros(2, dtype=torch.float64).uniform_()
    assert torch.equal(drawn, want) and torch.equal(after, torch.rand(2)), \
        "checking a refused random call on the host shifts no later draw"
    ops = _ops(rec)
    assert ops["aten::index_fill_.int_Scalar"]["dtypes"] == ["float32", "int64"]
    assert "complex64" in ops["aten::mul.Tensor"]["dtypes"] and doubled.device.type == "snpu"


def test_device_semantics_stay_snpus():
    """Mixed-device arguments still raise; a copy to the host is a plain tensor and records no device dtype."""
    rec = ShadowRecorder(row_length)
    with shadow(rec):
        x = torch.ones(3, device="snpu")
        with pytest.raises(RuntimeError, match="same device"):
            x + torch.ones(3)
        host = x.to("cpu").double()
        assert type(host) is torch.Tensor and host.device.type == "cpu"
        v = x.view(3, 1)
        v.fill_(5)
        assert x.cpu().tolist() == [5.0, 5.0, 5.0]  # a view shares its base's device memory
    assert "aten::add.Tensor" in _ops(rec)  # recorded though it raised
    assert all("float64" not in o["dtypes"] for o in rec.result())


def test_rows_are_recorded_and_no_row_limit_applies():
    rec = ShadowRecorder(row_length)
    with shadow(rec):
        x = torch.randn(2, 300_000, device="snpu")
        assert abs(x.softmax(-1).sum().item() - 2) < 1e-3
    assert _ops(rec)["aten::_softmax"]["row"] == 300_000


def test_shadow_mode_ends_with_its_block():
    with shadow(ShadowRecorder(row_length)):
        pass
    with pytest.raises(SnpuDtypeError):
        torch.zeros(2, device="snpu", dtype=torch.float64)


def test_a_prim_is_recorded_as_the_aten_ops_snpu_routes_it_to():
    """snpu runs ``prims::`` ops through their aten implementation (features.prims): the prim needs no kernel of its
    own, the aten ops it is made of do."""
    rec = ShadowRecorder(row_length)
    with shadow(rec):
        x = torch.ones(3, device="snpu")
        y = torch.ops.prims.convert_element_type(x, torch.float16)
        assert y.dtype == torch.float16 and isinstance(y, SnpuTensor)
    ops = _ops(rec)
    assert not [op for op in ops if op.startswith("prims::")], ops
    assert "float16" in ops["aten::empty_like"]["dtypes"] and "aten::copy_" in ops, ops  # its aten implementation
