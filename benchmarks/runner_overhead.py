"""Overhead of `crcr run` over plain pytest on the same selection, measured in one run.

Both run the embedded op suite on cpu over the same ops and -k expression, in a fresh
interpreter, alternating, `--repeats` times; the ratio of medians is printed. crcr's
cost is its supervisor, plugin (events, watchdog, plan), results and JUnit writing.

    .venv/bin/python benchmarks/runner_overhead.py [--ops add,mul,...] [-k EXPR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runners.suites import EMBEDDED_ROOT

DEFAULT_OPS = ("add,mul,sub,div,abs,neg,exp,log,sqrt,rsqrt,sin,cos,sum,mean,amax,amin,var,nn.functional.relu,"
               "nn.functional.gelu,nn.functional.silu,sigmoid,tanh,clamp,where,cat,stack,matmul,mm,bmm,addmm,"
               "softmax,log_softmax,nn.functional.layer_norm,nn.functional.linear,nn.functional.embedding")


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process tree: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        sys.exit(f"{argv[:4]} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=DEFAULT_OPS)
    parser.add_argument("-k", default="float32 and not test_dtypes")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    env = dict(os.environ, CRCR_SUITE_OPS=args.ops, PYTORCH_TESTING_DEVICE_ONLY_FOR="cpu",
               PYTORCH_PRINT_REPRO_ON_FAILURE="0")
    env.pop("CI", None)
    with tempfile.TemporaryDirectory() as tmp:
        plain = [sys.executable, "-m", "pytest", "-c", str(EMBEDDED_ROOT / "pytest.ini"), "--rootdir",
                 str(EMBEDDED_ROOT), "-q", "-p", "no:cacheprovider", "-k", args.k, "test"]
        crcr = [sys.executable, "-m", "crcr.cli.main", "run", "--device", "cpu", "-k", args.k,
                "--results", f"{tmp}/r.json", "--junit", f"{tmp}/j.xml"]
        timed(plain, env, EMBEDDED_ROOT)  # warm the file cache for both
        plain_runs, crcr_runs = [], []
        for _ in range(args.repeats):
            plain_runs.append(timed(plain, env, EMBEDDED_ROOT))
            crcr_runs.append(timed(crcr, env, Path(tmp)))
        from crcr.contracts.results import load_results

        results = load_results(f"{tmp}/r.json")
    counts = {k: v for k, v in results.counts().items() if v}
    print(f"selection: {len(results.tests)} tests {counts} (ops {args.ops}; -k {args.k!r})")
    for label, index in (("wall", 0), ("cpu", 1)):
        p = [r[index] for r in plain_runs]
        c = [r[index] for r in crcr_runs]
        print(f"{label:>4}: plain pytest median {statistics.median(p):.2f} s min {min(p):.2f} s | "
              f"crcr run median {statistics.median(c):.2f} s min {min(c):.2f} s | "
              f"ratio median {statistics.median(c) / statistics.median(p):.3f}, min {min(c) / min(p):.3f}")
    # on a shared machine wall time swings with other load; CPU time of the process tree
    # (user + system) is the steadier measure of what crcr adds


if __name__ == "__main__":
    main()
