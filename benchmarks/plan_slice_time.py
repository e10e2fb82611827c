"""Time of a planned upstream slice on snpu against the CPU, on the same tests.

    python benchmarks/plan_slice_time.py CHECKOUT --plan PLAN_DIR --file test/test_binary_ufuncs.py@1/4 ...

CHECKOUT is a PyTorch source checkout (never part of this repository); PLAN_DIR a snpu plan for it
(``crcr select plan --pytorch-src CHECKOUT``). For each ``FILE@I/N`` the same command runs twice:
``crcr run --device snpu --plan PLAN_DIR --pytorch-src CHECKOUT --file FILE --shard I/N`` and the same
with ``--device cpu`` and the plan's ids translated to the CPU's (``TestFooPRIVATEUSE1::test_x_snpu`` ->
``TestFooCPU::test_x_cpu``), so both devices run exactly the tests the plan runs and skip the rest.
Prints wall seconds per device (the crcr process, collection included), tests run and passed, and the
snpu / cpu ratio.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_plan(plan: Path, dest: Path) -> Path:
    """The snpu plan with every id (exact or pattern) moved to the CPU's class and device names."""
    shutil.copytree(plan, dest)
    for path in dest.rglob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"PRIVATEUSE1(?=::|\\\\:|:)", "CPU", text)
        text = text.replace("_snpu", "_cpu").replace("backend: snpu", "backend: cpu")
        path.write_text(text, encoding="utf-8")
    return dest


def run(device: str, plan: Path, checkout: Path, file: str, shard: str, results: Path) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "crcr.cli.main", "run", "--device", device, "--plan", str(plan),
           "--pytorch-src", str(checkout), "--file", file, "--shard", shard, "--no-rerun", "--timeout", "120",
           "--results", str(results)]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    tests = json.loads(results.read_text())["tests"] if results.is_file() else []
    ran = [t for t in tests if t["outcome"] not in ("skipped",)]
    return wall, {"ran": len(ran), "passed": sum(t["outcome"] in ("passed", "flaky", "xpassed") for t in ran),
                  "ids": sorted(re.sub(r"(PRIVATEUSE1|CPU)::", "::", t["id"]).replace("_snpu", "_dev")
                                .replace("_cpu", "_dev") for t in ran)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path)
    parser.add_argument("--plan", type=Path, required=True, help="snpu plan directory for the checkout")
    parser.add_argument("--file", action="append", required=True, help="FILE@I/N: upstream file and shard")
    args = parser.parse_args()
    totals = {"snpu": 0.0, "cpu": 0.0}
    with tempfile.TemporaryDirectory(prefix="crcr-slice-time-") as tmp:
        cplan = cpu_plan(args.plan, Path(tmp) / "plan-cpu")
        for spec in args.file:
            file, _, shard = spec.partition("@")
            shard = shard or "1/1"
            stem = file.replace("/", "_")
            ws, s = run("snpu", args.plan, args.checkout, file, shard, Path(tmp) / f"{stem}.snpu.json")
            wc, c = run("cpu", cplan, args.checkout, file, shard, Path(tmp) / f"{stem}.cpu.json")
            totals["snpu"] += ws
            totals["cpu"] += wc
            same = len(set(s["ids"]) & set(c["ids"]))
            print(f"{file} shard {shard}: snpu {ws:.1f}s ({s['ran']} run, {s['passed']} passed); "
                  f"cpu {wc:.1f}s ({c['ran']} run, {c['passed']} passed); {same} tests run on both; "
                  f"snpu / cpu = {ws / wc:.2f}x")
    print(f"all: snpu {totals['snpu']:.1f}s, cpu {totals['cpu']:.1f}s, snpu / cpu = {totals['snpu'] / totals['cpu']:.2f}x")


if __name__ == "__main__":
    main()
