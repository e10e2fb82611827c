"""Coverage: how many op_db entries pass all their samples on snpu, against the CPU baseline.

    .venv/bin/python benchmarks/snpu_coverage.py [--dtype float32] [--sample-limit N] [--no-baseline] [--proof]

Runs every OpInfo entry's samples (all of them by default) on snpu and on the CPU at
the dtype's usual tolerances (runners.snpu.opinfo_sweep, the harness behind
``crcr snpu capabilities``); an entry counts in a dtype when every sample passes. The
baseline, measured in the same run with the same harness, is the CPU against itself
(a fresh copy of each sample): what a perfect backend would reach here. Also prints how
many passing entries needed a whole-tensor (untiled) compute kernel, and the most
common reasons entries fail. ``--proof`` sweeps the passing entries again under the
tiling proof (``poison_outside_tiles``) and lists those that fail under it: a real
kernel that reads outside its tile.
"""

from __future__ import annotations

import argparse
import collections
import re
import time

import torch

from runners.snpu.opinfo_sweep import sweep


def _reason(outcome: object) -> str:
    message = getattr(outcome, "message", "") or ""
    missing = re.search(r"aten op (\S+) is not implemented", message)
    if missing:
        return f"missing {missing.group(1)}"
    return f"{getattr(outcome, 'error', '')}: {message[:70]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", action="append", choices=("float32", "float16", "bfloat16"))
    parser.add_argument("--sample-limit", type=int, default=None)
    parser.add_argument("--no-baseline", action="store_true", help="skip the CPU-against-itself sweep")
    parser.add_argument(
        "--proof", action="store_true", help="sweep the passing entries under the tiling proof"
    )
    args = parser.parse_args()
    from torch.testing._internal.common_methods_invocations import op_db

    dtypes = tuple(getattr(torch, d) for d in (args.dtype or ["float32"]))
    t0 = time.perf_counter()
    result = sweep(list(op_db), dtypes=dtypes, sample_limit=args.sample_limit)
    snpu_s = time.perf_counter() - t0
    baseline = None
    if not args.no_baseline:
        t0 = time.perf_counter()
        baseline = sweep(list(op_db), dtypes=dtypes, sample_limit=args.sample_limit, device="cpu")
        cpu_s = time.perf_counter() - t0
    print(f"torch {torch.__version__}: {len(op_db)} op_db entries; snpu swept in {snpu_s:.0f} s")
    for dtype in dtypes:
        dname = str(dtype).removeprefix("torch.")
        rows = [o for o in result.outcomes if o.dtype == dname]
        passing = [o for o in rows if o.status == "pass"]
        whole = sum(1 for o in passing if o.whole_ops)
        line = (
            f"{dname:9} snpu pass {len(passing):4d} / {len(op_db)}"
            f" ({len(passing) - whole} with tiled compute kernels only, {whole} using a whole-tensor kernel)"
        )
        if baseline is not None:
            base = len(baseline.passing(dname))
            line += f"; cpu vs itself {base} ({cpu_s:.0f} s); snpu / cpu = {len(passing) / max(base, 1):.3f}"
        print(line)
        reasons = collections.Counter(_reason(o) for o in rows if o.status == "fail").most_common(8)
        for reason, count in reasons:
            print(f"    {count:3d}  {reason}")
        if args.proof:
            from runners.snpu.kernels.common import poison_outside_tiles
            from runners.snpu.opinfo_sweep import opinfo_name

            names = {o.name for o in passing}
            ops = [op for op in op_db if opinfo_name(op) in names]
            with poison_outside_tiles():
                proved = sweep(ops, dtypes=(dtype,), sample_limit=args.sample_limit)
            caught = [o for o in proved.outcomes if o.status == "fail"]
            print(
                f"    tiling proof: {len(caught)} of {len(ops)} passing entries fail under poison_outside_tiles()"
            )
            for o in caught:
                print(f"        {o.name}: {o.error}: {(o.message or '')[:80]}")


if __name__ == "__main__":
    main()
