"""How the OpInfo sweep decides that snpu's result for one sample is right.

First against the CPU's result at the dtype's usual tolerances (PyTorch's assert_close
defaults). Where that fails and snpu ran a kernel that accumulates (a sum, product or
running statistic over many values: matmul, reductions, softmax, norms, attention,
losses, linalg, convolution and pooling, scatter/index accumulation, embedding_bag), the
two results may differ only in the order the values were summed, which the CPU's own
SIMD path decides in the last bits. The sample then runs once more on the CPU in float64
and snpu's result is accepted when, for every floating output, its worst error from that
float64 result (in units of the usual tolerance) is no larger than the CPU's own float32
result's worst error, or than the tolerance itself. Integer and bool outputs, shapes,
dtypes and the values whose float64 result is not finite or overflows the dtype still have
to match the CPU's exactly (a non-finite CPU value where the float64 result fits is the
CPU's error, judged like any other), and elementwise,
data movement and view kernels keep the plain comparison: a different order of
summation is no excuse for them.

Upstream's reference tests take the same way out (test_ops ``_ref_test_helper``: a
reference is accepted when no farther from the float64 result than torch's own). There the
distance is the summed absolute error; here it is the worst element in tolerance units, so
one wrong element is not averaged away over a large output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

# kernel categories (runners.snpu.dispatch.Kernel.category) whose result depends on the
# order in which they sum or multiply many values
ACCUMULATING = frozenset(
    {
        "attention",
        "conv_pool_norm",
        "embedding",
        "linalg",
        "loss",
        "matmul",
        "norm",
        "reduction",
        "scatter_index",
        "softmax",
    }
)

# kernels whose result a second run does not repeat (random draws, uninitialised memory):
# a sample that ran one has no float64 reference to judge by
UNREPEATABLE_CATEGORIES = frozenset({"random"})
UNREPEATABLE_PREFIXES = tuple(
    f"aten::{name}"
    for name in (
        "bernoulli",
        "cauchy_",
        "empty",
        "exponential_",
        "geometric_",
        "log_normal_",
        "multinomial",
        "new_empty",
        "normal",
        "rand",
        "random_",
        "uniform_",
    )
)

REFERENCE_DTYPE = torch.float64


def order_dependent(kernels: Iterable[Any]) -> bool:
    """Whether the kernels that ran (``dispatch.Kernel``: ``name``, ``category``) include one
    that accumulates and none whose result is not repeatable."""
    kernels = list(kernels)
    if any(
        k.category in UNREPEATABLE_CATEGORIES or k.name.startswith(UNREPEATABLE_PREFIXES) for k in kernels
    ):
        return False
    return any(k.category in ACCUMULATING for k in kernels)


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    """The dtype's usual tolerances (PyTorch's assert_close defaults)."""
    return {
        torch.float32: {"rtol": 1.3e-6, "atol": 1e-5},
        torch.float16: {"rtol": 1e-3, "atol": 1e-5},
        torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-5},
    }.get(dtype, {"rtol": 0.0, "atol": 0.0})


def on_cpu(x: Any) -> Any:
    """``x`` with every tensor (nested in lists and tuples) moved to the CPU."""
    if isinstance(x, torch.Tensor):
        return x.cpu() if x.device.type != "cpu" else x
    if isinstance(x, (list, tuple)):
        return type(x)(on_cpu(v) for v in x)
    return x


def compare(actual: Any, expected: Any, dtype: torch.dtype) -> None:
    """assert_close over nested outputs at the dtype's usual tolerances."""
    torch.testing.assert_close(
        on_cpu(actual), expected, equal_nan=True, check_device=False, check_stride=False, **tolerances(dtype)
    )


def worst_error(result: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> float:
    """The largest ``|result - reference|`` in units of the usual tolerance at the reference,
    over the elements where both are finite."""
    tol = tolerances(dtype)
    ref = reference.to(REFERENCE_DTYPE)
    err = (result.to(REFERENCE_DTYPE) - ref).abs() / (tol["atol"] + tol["rtol"] * ref.abs())
    finite = torch.isfinite(ref) & torch.isfinite(result)
    return float(err[finite].max()) if bool(finite.any()) else 0.0


def _leaves(x: Any) -> list[Any]:
    return tree_flatten(on_cpu(x))[0]


def compare_with_reference(actual: Any, expected: Any, reference: Any, dtype: torch.dtype) -> None:
    """Accept ``actual`` (snpu) when it is no farther from ``reference`` (the sample in float64
    on the CPU) than ``expected`` (the CPU in ``dtype``) is; raise AssertionError otherwise.

    Per floating output: snpu's worst error from the reference (in tolerance units) must not
    exceed ``max(1, the CPU's worst error)``. Everything else is compared with the CPU's
    result as before: the number of outputs, shapes and dtypes, integer and bool values
    (exactly), Python numbers (at the usual tolerance) and the values whose exact result is not finite or
    overflows the dtype (exactly).
    """
    got, want, ref = _leaves(actual), _leaves(expected), _leaves(reference)
    if not len(got) == len(want) == len(ref):
        raise AssertionError(f"snpu returned {len(got)} outputs, the CPU {len(want)}")
    for i, (a, e, r) in enumerate(zip(got, want, ref, strict=True)):
        if not (isinstance(e, torch.Tensor) and e.is_floating_point()):
            compare(a, e, dtype)  # integers and bool exactly; Python numbers as before
            continue
        if not isinstance(a, torch.Tensor) or a.shape != e.shape or a.dtype != e.dtype:
            raise AssertionError(
                f"output {i}: snpu gave {getattr(a, 'dtype', type(a).__name__)} {tuple(getattr(a, 'shape', ()))}, "
                f"the CPU {e.dtype} {tuple(e.shape)}"
            )
        if not (isinstance(r, torch.Tensor) and r.dtype == REFERENCE_DTYPE and r.shape == e.shape):
            raise AssertionError(f"output {i}: no float64 reference to judge by")
        # where the exact result is not finite or does not fit the dtype, snpu must give the CPU's value; where it
        # fits and only the CPU's is not finite (float16 conv2d's CPU kernel gave inf for -22.55 in a sweep sample),
        # the CPU is wrong there and snpu is judged by the reference as elsewhere (an inf of snpu's is let pass)
        odd = ~torch.isfinite(r) | (r.abs() > torch.finfo(e.dtype).max)
        if bool(odd.any()):
            torch.testing.assert_close(a[odd], e[odd], equal_nan=True, check_device=False, rtol=0.0, atol=0.0)
        snpu_err = worst_error(a[~odd], r[~odd], dtype)
        cpu_err = worst_error(e[~odd], r[~odd], dtype)
        if snpu_err > max(1.0, cpu_err):
            raise AssertionError(
                f"output {i}: snpu is {snpu_err:.3g} tolerances from the float64 result, "
                f"the CPU's {dtype} result {cpu_err:.3g}"
            )


def in_float64(sample: Any) -> Any:
    """A copy of the sample (input, args, kwargs) with every floating tensor in float64.

    Taken before the sample first runs: an op that writes into its input would otherwise
    give a reference for different values.
    """

    def precise(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        return t.to(REFERENCE_DTYPE) if t.is_floating_point() else t.clone()

    return sample.transform(precise)


def judge(
    actual: Any,
    expected: Any,
    dtype: torch.dtype,
    kernels: Iterable[Any],
    reference: Callable[[], Any] | None,
    cpu_one_thread: Callable[[], Any] | None = None,
) -> None:
    """Raise AssertionError unless ``actual`` (snpu) is right next to ``expected`` (the CPU).

    ``kernels`` are the snpu kernels that ran for the sample (``dispatch.Kernel``);
    ``reference`` computes the float64 result on the CPU (None where the op has no float64).
    ``cpu_one_thread`` computes the CPU's result once more on one thread, as snpu runs its
    kernels: where the sum is ill-conditioned in the dtype, the CPU's own answer depends on how
    its threads split it (a float16 conv2d sample gave 39.25, inf or 40.5 where the float64
    result is -22.55), and snpu is accepted when no farther from the float64 result than the
    CPU in either.
    """
    try:
        compare(actual, expected, dtype)
    except AssertionError as plain:
        if reference is None or not dtype.is_floating_point or not order_dependent(kernels):
            raise
        try:
            result = reference()
        except Exception:  # no reference to judge by: the plain comparison stands
            raise plain from None
        try:
            compare_with_reference(actual, expected, result, dtype)
        except AssertionError:
            if cpu_one_thread is None:
                raise
            compare_with_reference(actual, cpu_one_thread(), result, dtype)
