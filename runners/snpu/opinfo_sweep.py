"""Run upstream OpInfo samples on snpu and compare them with the CPU.

Used by ``crcr snpu capabilities`` (which OpInfo entries snpu covers, per dtype), by the
coverage benchmark and, on a deterministic subset of samples, by the test suite. Every
op is tried in-process: an exception is a failure of that op with its error class.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from runners.snpu.sample_compare import REFERENCE_DTYPE, in_float64, judge

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# kernel categories that move data rather than compute: every sample needs them
_MOVEMENT = frozenset({"data_movement", "fill", "view", "scalar"})


@dataclass
class OpOutcome:
    """One OpInfo entry in one dtype: passed, failed (with why) or not applicable."""

    name: str
    dtype: str
    status: str  # "pass" | "fail" | "n/a"
    samples: int = 0
    error: str | None = None
    message: str | None = None
    # compute kernels that ran whole-tensor for this entry (data movement not counted)
    whole_ops: list[str] = field(default_factory=list)


@dataclass
class SweepResult:
    outcomes: list[OpOutcome] = field(default_factory=list)

    def passing(self, dtype: str) -> list[str]:
        return sorted(o.name for o in self.outcomes if o.dtype == dtype and o.status == "pass")

    def failing(self, dtype: str) -> dict[str, str]:
        return {o.name: o.error or "" for o in self.outcomes if o.dtype == dtype and o.status == "fail"}


def opinfo_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def to_device(sample: Any, device: str) -> Any:
    return sample.transform(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t)


def run_sample(op: Any, sample: Any, dtype: torch.dtype, device: str = "snpu") -> None:
    """Run one sample on the CPU and on ``device``; raise if ``device``'s result is wrong.

    Wrong is judged by ``runners.snpu.sample_compare.judge``: the CPU's result at the
    dtype's usual tolerances, or, for a sample that ran an accumulating kernel, no farther
    from the sample's float64 result than the CPU's own.

    ``device="cpu"`` is the baseline: the CPU against itself (what a perfect backend
    would reach with this harness; nondeterministic and sample-mutating ops miss).
    """
    from runners.snpu import dispatch

    reference = cpu_one_thread = None
    if device != "cpu" and dtype.is_floating_point and REFERENCE_DTYPE in op.supported_dtypes("cpu"):
        precise = in_float64(sample)  # both copies taken before the sample first runs (an op may write its input)
        again = sample.transform(lambda t: t.clone() if isinstance(t, torch.Tensor) else t)

        def reference() -> Any:
            return op(precise.input, *precise.args, **precise.kwargs)

        def cpu_one_thread() -> Any:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                return op(again.input, *again.args, **again.kwargs)
            finally:
                torch.set_num_threads(threads)

    expected = op(sample.input, *sample.args, **sample.kwargs)
    # a copy either way: ``.to("snpu")`` copies, so the CPU baseline clones
    dev = (
        to_device(sample, device)
        if device != "cpu"
        else sample.transform(lambda t: t.clone() if isinstance(t, torch.Tensor) else t)
    )
    kernels: set[Any] = set()
    outer = dispatch.observer

    def observe(kernel: Any) -> None:
        kernels.add(kernel)
        if outer is not None:
            outer(kernel)

    dispatch.observer = observe
    try:
        actual = op(dev.input, *dev.args, **dev.kwargs)
    finally:
        dispatch.observer = outer
    judge(actual, expected, dtype, kernels, reference, cpu_one_thread)


def samples_for(op: Any, dtype: torch.dtype, limit: int | None) -> Iterator[Any]:
    """The op's CPU samples in ``dtype``, seeded, at most ``limit`` of them.

    Calls the OpInfo's sample generator directly: ``op.sample_inputs`` inside a test
    crawls the interpreter stack (inspect.stack) per sample to track inputs, which
    costs a quarter of a second per test under pytest.
    """
    torch.manual_seed(0)
    for i, sample in enumerate(op.sample_inputs_func(op, "cpu", dtype, False)):
        if limit is not None and i >= limit:
            return
        yield sample


@contextlib.contextmanager
def _no_fallback() -> Iterator[None]:
    old = os.environ.pop("CRCR_SNPU_FALLBACK", None)
    try:
        yield
    finally:
        if old is not None:
            os.environ["CRCR_SNPU_FALLBACK"] = old


@contextlib.contextmanager
def sweeping() -> Iterator[None]:
    """What every op_db sweep runs under: snpu installed, no CPU fallback, upstream warnings muted, and upstream's
    running-test lookup without its stack walk (``runners.testfn``: ``op.sample_inputs`` and ``@ops`` tests ask
    it; :func:`samples_for` itself does not).

    Without the fallback a missing kernel is the op's outcome, never a silent CPU run.
    """
    from runners.snpu import install
    from runners.testfn import fast_test_fn_lookup

    install()
    with _no_fallback(), fast_test_fn_lookup(), warnings.catch_warnings():
        # upstream samples trigger deprecation and user warnings by design: not ours to show
        warnings.simplefilter("ignore")
        yield


def all_ops() -> list[Any]:
    """Every OpInfo entry of the installed torch (``op_db``)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


def sweep(
    ops: list[Any] | None = None,
    dtypes: tuple[torch.dtype, ...] = DTYPES,
    sample_limit: int | None = None,
    progress: Callable[[str], None] | None = None,
    device: str = "snpu",
) -> SweepResult:
    """Try every OpInfo entry (or ``ops``) in ``dtypes`` on snpu (or ``device``)."""
    from runners.snpu import dispatch

    whole: set[str] = set()

    def observe(kernel: Any) -> None:
        if kernel.execution == "whole" and kernel.category not in _MOVEMENT:
            whole.add(kernel.name)

    result = SweepResult()
    with sweeping():
        for op in all_ops() if ops is None else ops:
            name = opinfo_name(op)
            if progress:
                progress(name)
            supported = op.supported_dtypes("cpu")
            for dtype in dtypes:
                dname = str(dtype).removeprefix("torch.")
                if dtype not in supported:
                    result.outcomes.append(OpOutcome(name, dname, "n/a"))
                    continue
                outcome = OpOutcome(name, dname, "pass")
                whole.clear()
                dispatch.observer = observe
                try:
                    for sample in samples_for(op, dtype, sample_limit):
                        outcome.samples += 1
                        run_sample(op, sample, dtype, device)
                except Exception as exc:  # any failure is this op's outcome, not the sweep's
                    outcome.status = "fail"
                    outcome.error = type(exc).__name__
                    outcome.message = str(exc).splitlines()[0][:300] if str(exc) else ""
                finally:
                    dispatch.observer = None
                outcome.whole_ops = sorted(whole)
                if outcome.samples == 0 and outcome.status == "pass":
                    outcome.status = "n/a"
                result.outcomes.append(outcome)
    return result
