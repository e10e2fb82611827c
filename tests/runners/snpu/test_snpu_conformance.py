"""snpu raises what the CPU raises and keeps the CPU's output layouts (runners/snpu/conformance.py).

One test per behaviour the conformance sweep found different, each comparing snpu with
the CPU on the same call, and a small sweep over a handful of op_db entries.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import runners.snpu
from runners.snpu import conformance

runners.snpu.install()


def _raised(fn) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def _same_error(fn_on) -> BaseException:
    """``fn_on(device)`` raises the same exception class and message on the CPU and snpu."""
    cpu, dev = _raised(lambda: fn_on("cpu")), _raised(lambda: fn_on("snpu"))
    assert (type(dev), str(dev)) == (type(cpu), str(cpu))
    return dev


# --------------------------------------------------------------------------- errors


def test_embedding_with_a_0_dim_weight_raises_runtime_error_as_on_cpu() -> None:
    # upstream test_embedding_scalar_weight_error: snpu raised the meta kernel's AssertionError
    exc = _same_error(lambda d: F.embedding(torch.tensor([0], device=d), torch.tensor(1.0, device=d)))
    assert isinstance(exc, RuntimeError) and "'weight' must be 2-D" in str(exc)


def test_layer_norm_checks_weight_and_bias_shapes_as_on_cpu() -> None:
    def call(d: str, **kw) -> None:
        args = {"weight": None, "bias": None} | {k: v.to(d) for k, v in kw.items()}
        torch.native_layer_norm(torch.randn(1, 2, 3, device=d), (1, 2, 3), args["weight"], args["bias"], 1e-5)

    exc = _same_error(lambda d: call(d, weight=torch.randn(1, 2)))
    assert "Expected weight to be of same shape as normalized_shape" in str(exc)
    exc = _same_error(lambda d: call(d, bias=torch.randn(1, 2)))
    assert "Expected bias to be of same shape as normalized_shape" in str(exc)
    exc = _same_error(lambda d: torch.native_layer_norm(torch.randn(1, 2, 3, device=d), (), None, None, 1e-5))
    assert "at least 1-dimensional" in str(exc)


def test_narrow_copy_refuses_bad_arguments_as_narrow_does_on_a_device() -> None:
    # upstream's error inputs expect narrow's IndexError from any device but the CPU
    x = torch.randn(5, 6, 7, device="snpu")
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-3, 2\], but got 3\)"):
        torch.narrow_copy(x, 3, 0, 0)
    with pytest.raises(RuntimeError, match=r"narrow\(\): length must be non-negative\."):
        torch.narrow_copy(torch.randn(10, device="snpu"), 0, 0, -1)
    torch.testing.assert_close(torch.narrow_copy(x, 1, 2, 3).cpu(), torch.narrow_copy(x.cpu(), 1, 2, 3))


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize(
    "call",
    [
        lambda y, m, i: torch.masked_select(y, m, out=y),
        lambda y, m, i: torch.index_select(y, 0, i, out=y),
        lambda y, m, i: torch.take(y, i, out=y),
        lambda y, m, i: torch.cat((y, y), out=y),
        lambda y, m, i: torch.gather(y, 0, i, out=y),
        lambda y, m, i: torch.add(y[1:], y[:-1], out=y[:-1]),  # partial overlap
        lambda y, m, i: torch.add(y, 1, out=torch.zeros(1, device=y.device).expand(6)),  # internal
    ],
    ids=["masked_select", "index_select", "take", "cat", "gather", "add-partial", "add-internal"],
)
def test_out_overlapping_an_input_or_itself_is_refused_as_on_cpu(call) -> None:
    def on(d: str) -> None:
        y = torch.arange(6.0, device=d)
        mask = torch.tensor([True, False, True, True, False, False], device=d)
        call(y, mask, torch.tensor([0, 1, 2], device=d))

    exc = _same_error(on)
    assert str(exc).startswith("unsupported operation:")


def test_out_that_fully_overlaps_an_elementwise_input_is_allowed_as_on_cpu() -> None:
    y = torch.arange(6.0)
    dev = y.to("snpu")
    torch.add(dev, dev, out=dev)
    torch.testing.assert_close(dev.cpu(), torch.add(y, y, out=y))


# --------------------------------------------------------------------------- layouts


@pytest.mark.parametrize(
    ("fn", "fmt", "shape"),
    [
        (F.dropout2d, torch.channels_last, (2, 3, 4, 5)),
        (F.dropout3d, torch.channels_last_3d, (2, 3, 4, 5, 6)),
        (F.feature_alpha_dropout, torch.channels_last, (2, 3, 4, 5)),
    ],
    ids=["dropout2d", "dropout3d", "feature_alpha_dropout"],
)
def test_feature_dropout_keeps_channels_last(fn, fmt, shape) -> None:
    # upstream test_Dropout2d / test_Dropout3d assert the output's memory format
    torch.manual_seed(0)
    x = torch.randn(shape).contiguous(memory_format=fmt)
    out = fn(x.to("snpu"), 0.5, training=True)
    assert fn(x, 0.5, training=True).is_contiguous(memory_format=fmt)
    assert out.is_contiguous(memory_format=fmt)
    # whole channels are dropped or kept: within a channel the output is one affine map of
    # the input (x / (1 - p) or zero for dropout, a * x + b or a constant for alpha dropout)
    got, base = out.cpu().flatten(2), x.flatten(2)
    for n in range(shape[0]):
        for c in range(shape[1]):
            y, v = got[n, c], base[n, c]
            hi, lo = int(v.argmax()), int(v.argmin())  # the widest pair: a well-conditioned slope
            slope = (y[hi] - y[lo]) / (v[hi] - v[lo])
            torch.testing.assert_close(y, slope * (v - v[lo]) + y[lo])


def test_elementwise_outputs_keep_the_input_memory_layout_and_values() -> None:
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    b = torch.randn(3, 1, 1)
    t = torch.randn(6, 7).t()
    for cpu_out, dev_out in [
        (x + b, x.to("snpu") + b.to("snpu")),
        (torch.sigmoid(x), torch.sigmoid(x.to("snpu"))),
        (F.gelu(x), F.gelu(x.to("snpu"))),
        (t * 2, t.to("snpu") * 2),
    ]:
        assert dev_out.stride() == cpu_out.stride()
        torch.testing.assert_close(dev_out.cpu(), cpu_out)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: torch.copysign(a, b),  # meta kernels written as Python references
        lambda a, b: torch.floor_divide(a, b),  # give these contiguous outputs
        lambda a, b: torch.xlogy(a, b),
        lambda a, b: torch.rsub(a, b),  # b - a: b's layout decides
        lambda a, b: torch.rsub(b, a),
        lambda a, b: a.masked_fill(b > 0, 1.0),  # a contiguous clone on the CPU
        lambda a, b: torch.mvlgamma(a.abs() + 2, 2),  # a sum over a new dimension
        lambda a, b: torch.narrow_copy(a, 1, 1, 5),  # always a contiguous copy
    ],
    ids=["copysign", "floor_divide", "xlogy", "rsub", "rsub-other", "masked_fill", "mvlgamma", "narrow_copy"],
)
def test_mixed_layout_outputs_have_the_cpu_strides(fn) -> None:
    a = torch.randn(5, 10, 5).transpose(-2, -1).contiguous().transpose(-2, -1)  # column-major
    b = torch.randn(5, 10, 5)
    expected = fn(a, b)
    actual = fn(a.to("snpu"), b.to("snpu"))
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)


def test_in_place_elementwise_on_channels_last_writes_every_element() -> None:
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    dev = x.to("snpu")
    dev.mul_(torch.randn(3, 1, 1).fill_(3.0).to("snpu"))
    assert dev.stride() == x.stride()
    torch.testing.assert_close(dev.cpu(), x * 3)


# --------------------------------------------------------------------------- the sweep


def test_layout_signature_tells_formats_and_strides_apart() -> None:
    x = torch.randn(2, 3, 4, 5)
    assert conformance.layout(x) == (True, False)
    assert conformance.layout(x.contiguous(memory_format=torch.channels_last)) == (False, True)
    assert conformance.layout(torch.randn(4, 6).t()) == (False, (1, 6))
    assert conformance.layout(3) is None


SWEPT = ["nn.functional.embedding", "native_layer_norm", "masked_select", "cat", "nn.functional.dropout2d", "add"]


def test_error_sweep_over_a_handful_of_entries_finds_no_disagreement() -> None:
    report = conformance.run(conformance.check_errors, conformance.ops_named(SWEPT))
    counts = report.counts()
    assert counts.get(conformance.AGREE, 0) >= 15, counts
    assert report.having(conformance.DISAGREE) == []


def test_layout_sweep_over_a_handful_of_entries_finds_no_difference() -> None:
    ops = conformance.ops_named(SWEPT)
    report = conformance.run(lambda op: conformance.check_layout(op, limit=12), ops)
    relaid = [f for f in report.findings if "channels_last" in f.detail or "transposed" in f.detail]
    assert report.counts().get(conformance.SAME, 0) >= 20
    assert report.having(conformance.DIFFERENT) == [], relaid
    assert report.failed_only_relaid() == []
    assert {f.sample.partition("/")[2] for f in report.findings} >= {"", "channels_last", "transposed"}


class _FakeOp:
    """An op_db-like entry whose snpu behaviour differs from the CPU's in chosen ways."""

    name, variant_test_name = "fake", ""

    def __init__(self, on_snpu: list[BaseException]) -> None:
        self.on_snpu = on_snpu

    def error_inputs_func(self, op, device, **kwargs):
        from torch.testing._internal.opinfo.core import ErrorInput, SampleInput

        for i in range(len(self.on_snpu)):
            yield ErrorInput(SampleInput(torch.zeros(2, device=device), args=(i,)), error_regex="bad shape")

    def __call__(self, t: torch.Tensor, i: int) -> None:
        raise RuntimeError("bad shape [2]") if t.device.type == "cpu" else self.on_snpu[i]


def test_error_sweep_tells_agreement_refusal_and_disagreement_apart() -> None:
    from runners.snpu.errors import SnpuUnsupportedOpError

    op = _FakeOp([RuntimeError("bad shape (2,)"), SnpuUnsupportedOpError("aten::fake"), AssertionError("bad shape")])
    verdicts = [f.verdict for f in conformance.check_errors(op)]
    assert verdicts == [conformance.AGREE, conformance.REFUSED, conformance.DISAGREE]
