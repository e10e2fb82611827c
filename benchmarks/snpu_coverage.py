"""Coverage: how many op_db entries pass all their samples on snpu, per dtype.

    .venv/bin/python benchmarks/snpu_coverage.py [--sample-limit N]

Runs every OpInfo entry's samples (all of them by default) on snpu and on the CPU at
the dtype's usual tolerances (runners.snpu.opinfo_sweep); an entry counts in a dtype
when every sample passes. Prints the counts against the number of op_db entries, and
the most common failure classes.
"""

from __future__ import annotations

import argparse
import collections
import time

import torch

from runners.snpu.opinfo_sweep import sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample-limit", type=int, default=None)
    args = parser.parse_args()
    from torch.testing._internal.common_methods_invocations import op_db

    t0 = time.perf_counter()
    result = sweep(list(op_db), sample_limit=args.sample_limit)
    elapsed = time.perf_counter() - t0
    print(f"torch {torch.__version__}: {len(op_db)} op_db entries, swept in {elapsed:.0f} s")
    for dtype in ("float32", "float16", "bfloat16"):
        rows = [o for o in result.outcomes if o.dtype == dtype]
        applicable = sum(1 for o in rows if o.status != "n/a")
        passing = len(result.passing(dtype))
        errors = collections.Counter(o.error for o in rows if o.status == "fail").most_common(4)
        print(
            f"{dtype:9} pass {passing:4d} / {len(op_db)} entries ({applicable} have {dtype} samples); failures: {errors}"
        )


if __name__ == "__main__":
    main()
