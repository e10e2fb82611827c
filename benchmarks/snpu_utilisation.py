"""Modelled matmul utilisation of snpu's systolic arrays, computed from the tile plan.

    .venv/bin/python benchmarks/snpu_utilisation.py

Utilisation = modelled MACs / (peak MACs per cycle x the cycles the plan takes). Plans
are costed without executing them (4096^3 would take minutes to run on the CPU).
"""

from __future__ import annotations

import time

import torch

from runners.snpu.machine import Machine
from runners.snpu.planner import plan_matmul, utilisation

SHAPES = [
    ("4096^3", 1, 4096, 4096, 4096),
    ("2048^3", 1, 2048, 2048, 2048),
    ("1024^3", 1, 1024, 1024, 1024),
    ("512^3", 1, 512, 512, 512),
    ("128^3", 1, 128, 128, 128),
    ("64^3", 1, 64, 64, 64),
    ("batch 8 x 128x128x64 (attention-like)", 8, 128, 128, 64),
    ("4096x4096x64 (skinny K)", 1, 4096, 4096, 64),
    ("8x4096x4096 (GEMV-like, M=8)", 1, 8, 4096, 4096),
    ("4095x4097x4093 (ragged)", 1, 4095, 4097, 4093),
    ("100x37x1000 (odd)", 1, 100, 37, 1000),
]


def main() -> None:
    machine = Machine()
    print(f"{'shape':40} {'dtype':8} {'util':>6} {'cycles':>12} {'ms@1GHz':>8} {'tiles':>6} {'plan s':>7}")
    for dtype in (torch.float16, torch.float32):
        for name, b, m, n, k in SHAPES:
            t0 = time.perf_counter()
            plan = plan_matmul(b, m, n, k, dtype, machine)
            elapsed = time.perf_counter() - t0
            rec = plan.record("mm")
            util = utilisation(plan, dtype, machine)
            print(
                f"{name:40} {str(dtype).removeprefix('torch.'):8} {util * 100:5.1f}% {rec.cycles:12d} "
                f"{rec.cycles / machine.clock_hz * 1e3:8.3f} {rec.tiles:6d} {elapsed:7.3f}"
            )


if __name__ == "__main__":
    main()
