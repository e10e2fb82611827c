"""The embedded op suite on snpu: ids generated, and wall time per 1,000 tests.

Collects the whole suite on snpu (no CRCR_SUITE_OPS), then runs one deterministic shard
of it (`--shard 1/N`, default 1/30: about 500 tests spread over every template) through
`crcr run` with the default rerun and timeout, and scales the wall time to 1,000 tests.
The same shard run on cpu is the baseline for the ratio.

    .venv/bin/python benchmarks/runner_suite.py [--shards 30]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def crcr(*args: str, env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "crcr.cli.main", "run", *args], env=env, cwd=cwd,
                          capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"crcr run {args} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=30)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "CRCR_SUITE_OPS")}
    with tempfile.TemporaryDirectory() as tmp:
        collect_s = crcr("--device", "snpu", "--collect-only", "--inventory", f"{tmp}/inv.json", env=env, cwd=tmp)
        inventory = json.loads(Path(f"{tmp}/inv.json").read_text())
        per_template = Counter(t.get("template") or t["method"] for t in inventory["tests"])
        print(f"embedded suite on snpu: {len(inventory['tests'])} test ids (collection {collect_s:.1f} s)")
        for template, count in sorted(per_template.items()):
            print(f"  {template}: {count}")
        rows = []
        for device in ("cpu", "snpu"):
            out = f"{tmp}/{device}.json"
            wall = crcr("--device", device, "--shard", f"1/{args.shards}", "--results", out, env=env, cwd=tmp)
            results = json.loads(Path(out).read_text())
            n = len(results["tests"])
            counts = Counter(t["outcome"] for t in results["tests"])
            rows.append((device, n, wall, counts))
            print(f"{device}: shard 1/{args.shards} = {n} tests in {wall:.1f} s -> {1000 * wall / n:.0f} s per 1,000 tests; "
                  + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
        (_, n_cpu, w_cpu, _), (_, n_snpu, w_snpu, _) = rows
        print(f"ratio snpu/cpu per test: {(w_snpu / n_snpu) / (w_cpu / n_cpu):.2f}")


if __name__ == "__main__":
    main()
