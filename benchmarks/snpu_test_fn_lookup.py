"""CPU time of the capability sweep and of its test file with upstream's running-test lookup and with crcr's.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/snpu_test_fn_lookup.py [--ops 60] [--rounds 2] [-k "add or sin"]

Upstream's ``extract_test_fn`` walks ``inspect.stack()``; ``runners.testfn.fast_test_fn_lookup`` puts the same
walk without ``inspect`` in its place (the probes, ``sweeping()``, the trace children, the OpInfo test file). Two
measurements, each arm alternating with the other (``--rounds`` times), the ratio upstream / crcr in the same run:

- the sweep (``opinfo_sweep.sweep``) over the first ``--ops`` op_db entries, float32/float16/bfloat16, 3 samples
  each, in this process (``time.process_time``);
- ``tests/runners/snpu/test_snpu_opinfo.py -k EXPR`` under pytest in a child (its user+system CPU), whose ``@ops``
  wrapper asks for the running test once per test.

"upstream" replaces ``runners.testfn.fast_test_fn_lookup`` by a context that changes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = (
    "import contextlib\n"
    "def pytest_configure(config):\n"
    "    import runners.testfn\n"
    "    runners.testfn.fast_test_fn_lookup = contextlib.nullcontext\n"
)


def _sweep_cpu(ops: list, upstream: bool) -> float:
    import runners.testfn
    from runners.snpu.opinfo_sweep import sweep

    fast = runners.testfn.fast_test_fn_lookup
    if upstream:
        runners.testfn.fast_test_fn_lookup = contextlib.nullcontext  # type: ignore[assignment]
    try:
        start = time.process_time()
        sweep(ops, sample_limit=3)
        return time.process_time() - start
    finally:
        runners.testfn.fast_test_fn_lookup = fast


def _pytest_cpu(expr: str, upstream: bool, plugin_dir: str) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), plugin_dir])}
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-k",
        expr,
        "tests/runners/snpu/test_snpu_opinfo.py",
    ]
    if upstream:
        args[3:3] = ["-p", "crcr_upstream_lookup"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, (done.stdout.strip().splitlines() or ["no output"])[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("-k", default="add or mul or sum or sin or cos")
    args = parser.parse_args()
    import runners.snpu

    runners.snpu.install()
    from torch.testing._internal.common_methods_invocations import op_db

    ops = list(op_db)[: args.ops]
    _sweep_cpu(ops[:5], upstream=False)  # imports and first-call costs out of the measurement
    times: dict[str, dict[str, list[float]]] = {
        "sweep": {"upstream": [], "crcr": []},
        "pytest": {"upstream": [], "crcr": []},
    }
    with tempfile.TemporaryDirectory() as plugin_dir:
        Path(plugin_dir, "crcr_upstream_lookup.py").write_text(PLUGIN, encoding="utf-8")
        for _ in range(args.rounds):
            for arm in ("upstream", "crcr"):
                times["sweep"][arm].append(_sweep_cpu(ops, upstream=arm == "upstream"))
                cpu, summary = _pytest_cpu(args.k, arm == "upstream", plugin_dir)
                times["pytest"][arm].append(cpu)
                print(f"{arm}: pytest -k {args.k!r}: {cpu:.2f} s CPU ({summary})", flush=True)
    for what, label in (
        ("sweep", f"sweep of {len(ops)} op_db entries x 3 dtypes, 3 samples"),
        ("pytest", f"test_snpu_opinfo.py -k {args.k!r} under pytest"),
    ):
        up, fast = min(times[what]["upstream"]), min(times[what]["crcr"])
        print(
            f"{label}: upstream lookup {up:.2f} s CPU, crcr's {fast:.2f} s; ratio {up / fast:.2f}x "
            f"(all: {times[what]})"
        )
    print(
        f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}, "
        f"{time.strftime('%H:%M UTC', time.gmtime())}"
    )


if __name__ == "__main__":
    main()
