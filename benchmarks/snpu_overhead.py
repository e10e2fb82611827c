"""Simulator overhead: wall time of snpu kernels against CPU eager on the same inputs.

    .venv/bin/python benchmarks/snpu_overhead.py [--repeat 7] [--threads N]

Each case has at least one million elements. The ratio is snpu time / CPU time, both
measured in this run, interleaved, best of --repeat after a warm-up; the aim is <= 3x.
snpu runs each tile single-threaded (one tile, one core); --threads sets the CPU
reference's intra-op threads (default: torch's default).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import runners.snpu


def best_of_interleaved(a: Callable[[], object], b: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best times of a and b, run alternately so machine load hits both alike."""
    a()
    b()
    ta, tb = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a()
        ta.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        b()
        tb.append(time.perf_counter() - t0)
    return min(ta), min(tb)


def cases() -> dict[str, tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]]:
    torch.manual_seed(0)
    return {
        "matmul 1024x1024 @ 1024x1024 fp32": (
            torch.matmul,
            (torch.randn(1024, 1024), torch.randn(1024, 1024)),
        ),
        "softmax 1024x1024 fp32 (dim -1)": (lambda x: F.softmax(x, dim=-1), (torch.randn(1024, 1024),)),
        "layer_norm 1024x1024 fp32": (lambda x: F.layer_norm(x, (1024,)), (torch.randn(1024, 1024),)),
        "sdpa 4x8x512x64 fp32 (causal)": (
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            tuple(torch.randn(4, 8, 512, 64) for _ in range(3)),
        ),
        "add 1024x1024 fp32 (broadcast row)": (torch.add, (torch.randn(1024, 1024), torch.randn(1024))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="CPU intra-op threads for the reference")
    args = parser.parse_args()
    runners.snpu.install()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(f"{'case':40} {'cpu ms':>9} {'snpu ms':>9} {'ratio':>7}")
    for name, (fn, inputs) in cases().items():
        dev = tuple(t.to("snpu") for t in inputs)
        cpu_s, snpu_s = best_of_interleaved(
            lambda fn=fn, inputs=inputs: fn(*inputs), lambda fn=fn, dev=dev: fn(*dev), args.repeat
        )
        torch.testing.assert_close(fn(*dev).cpu(), fn(*inputs), rtol=1e-4, atol=1e-4)
        print(f"{name:40} {cpu_s * 1e3:9.2f} {snpu_s * 1e3:9.2f} {snpu_s / cpu_s:6.2f}x")


if __name__ == "__main__":
    main()
