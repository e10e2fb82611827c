"""How often a float32 sweep verdict hangs on summation order: the plain comparison against the sweep's.

    .venv/bin/python benchmarks/snpu_sweep_order.py [--seeds 40] [--op matmul --op bmm ...]
    ATEN_CPU_CAPABILITY=default .venv/bin/python benchmarks/snpu_sweep_order.py   # ATen's scalar path

Runs each op's float32 OpInfo samples under ``--seeds`` different seeds (the sweep uses
seed 0) on snpu and on the CPU, and counts the samples that fail the plain comparison (snpu
against the CPU at the usual tolerance, what the sweep did before) and the samples that
fail the sweep's judgement (``runners.snpu.sample_compare.judge``: no farther from the
float64 result than the CPU's own float32 result). Also prints the worst distances seen, in
tolerance units: snpu to the CPU, snpu to float64, the CPU to float64. A verdict that
moves with the seed here moves with the machine's SIMD path too (it changes the sample
values and the CPU's summation order).
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from runners.snpu.opinfo_sweep import opinfo_name, sweeping, to_device
from runners.snpu.sample_compare import compare, in_float64, judge, worst_error

OPS = ("matmul", "__rmatmul__", "bmm", "mm", "addmm", "baddbmm", "nn.functional.linear")


def _leaves(x: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _one(op: Any, sample: Any, dtype: torch.dtype, worst: dict[str, float]) -> tuple[bool, bool]:
    from runners.snpu import dispatch

    precise = in_float64(sample)
    expected = op(sample.input, *sample.args, **sample.kwargs)
    dev = to_device(sample, "snpu")
    kernels: set[Any] = set()
    dispatch.observer = kernels.add
    try:
        actual = op(dev.input, *dev.args, **dev.kwargs)
    finally:
        dispatch.observer = None
    reference = op(precise.input, *precise.args, **precise.kwargs)
    for a, e, r in zip(_leaves(actual), _leaves(expected), _leaves(reference), strict=True):
        a = a.cpu()
        worst["snpu-cpu"] = max(worst["snpu-cpu"], worst_error(a, e, dtype))
        worst["snpu-f64"] = max(worst["snpu-f64"], worst_error(a, r, dtype))
        worst["cpu-f64"] = max(worst["cpu-f64"], worst_error(e, r, dtype))
    plain = judged = True
    try:
        compare(actual, expected, dtype)
    except AssertionError:
        plain = False
    try:
        judge(actual, expected, dtype, kernels, lambda: reference)
    except AssertionError:
        judged = False
    return plain, judged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--op", action="append", help=f"OpInfo entry (default: {', '.join(OPS)})")
    args = parser.parse_args()
    from torch.testing._internal.common_methods_invocations import op_db

    names = args.op or list(OPS)
    dtype = torch.float32
    print(
        f"torch {torch.__version__}, ATen CPU capability {torch.backends.cpu.get_cpu_capability()}, seeds 0..{args.seeds - 1}"
    )
    print(
        f"{'entry':22} {'samples':>7} {'plain fails':>11} {'sweep fails':>11}   worst: snpu-cpu snpu-f64 cpu-f64"
    )
    totals = [0, 0, 0]
    with sweeping():
        for op in [op for op in op_db if opinfo_name(op) in names]:
            worst = {"snpu-cpu": 0.0, "snpu-f64": 0.0, "cpu-f64": 0.0}
            n = plain_fails = judged_fails = 0
            for seed in range(args.seeds):
                torch.manual_seed(seed)
                for sample in op.sample_inputs_func(op, "cpu", dtype, False):
                    plain, judged = _one(op, sample, dtype, worst)
                    n += 1
                    plain_fails += not plain
                    judged_fails += not judged
            totals = [totals[0] + n, totals[1] + plain_fails, totals[2] + judged_fails]
            print(
                f"{opinfo_name(op):22} {n:7d} {plain_fails:11d} {judged_fails:11d}"
                f"   {worst['snpu-cpu']:8.2f} {worst['snpu-f64']:8.2f} {worst['cpu-f64']:7.2f}"
            )
    print(f"{'all':22} {totals[0]:7d} {totals[1]:11d} {totals[2]:11d}")


if __name__ == "__main__":
    main()
