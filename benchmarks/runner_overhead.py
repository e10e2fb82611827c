"""Overhead of `crcr run` over plain pytest on the same selection, measured in one run.

Both run the embedded op suite on cpu over the same ops and -k expression, in a fresh
interpreter, alternating, `--repeats` times; the ratio of medians is printed. crcr's
cost is its supervisor, plugin (events, watchdog, plan), results and JUnit writing.

    .venv/bin/python benchmarks/runner_overhead.py [--ops add,mul,...] [-k EXPR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
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


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"{argv[:4]} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed


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
        plain_s, crcr_s = [], []
        for _ in range(args.repeats):
            plain_s.append(timed(plain, env, EMBEDDED_ROOT))
            crcr_s.append(timed(crcr, env, Path(tmp)))
        from crcr.contracts.results import load_results

        tests = len(load_results(f"{tmp}/r.json").tests)
    p, c = statistics.median(plain_s), statistics.median(crcr_s)
    print(f"selection: {tests} tests (ops {args.ops}; -k {args.k!r})")
    print(f"plain pytest: median {p:.2f} s, min {min(plain_s):.2f} s  {['%.2f' % s for s in plain_s]}")
    print(f"crcr run:     median {c:.2f} s, min {min(crcr_s):.2f} s  {['%.2f' % s for s in crcr_s]}")
    # on a shared machine noise only adds time: the ratio of minima is the steadier figure
    print(f"ratio crcr/plain: median {c / p:.3f}, min {min(crcr_s) / min(plain_s):.3f}")


if __name__ == "__main__":
    main()
