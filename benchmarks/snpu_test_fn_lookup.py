"""CPU time of the capability sweep and of its test file with upstream's running-test lookup and with crcr's.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/snpu_test_fn_lookup.py [--ops 60] [--rounds 2] [-k "add or sin"]

Upstream's ``extract_test_fn`` walks ``inspect.stack()``; ``runners.testfn.fast_test_fn_lookup`` puts the same
walk without ``inspect`` in its place (the probes, ``sweeping()``, the trace children, the OpInfo test file). Three
measurements, each arm alternating with the other (``--rounds`` times; the least of each arm's runs and their
ratio, upstream / crcr, from the same run):

- the sweep (``opinfo_sweep.sweep``) over the first ``--ops`` op_db entries, float32/float16/bfloat16, 3 samples
  each, in this process (``time.process_time``);
- ``tests/runners/snpu/test_snpu_opinfo.py -k EXPR`` under pytest in a child, whose ``@ops`` wrapper asks for the
  running test once per test: the child's user+system CPU, and the CPU of its tests after collection;
- a CPU-trace child (``runners.cpu_trace``, as ``crcr select plan --trace-with cpu`` runs it) over the
  ``test_samples`` twins of the first ``--trace-ops`` op_db entries at float32 in a one-file checkout this script
  writes (an ``@ops`` template whose body runs the op on each of ``op.sample_inputs``): the child's user+system
  CPU, and the CPU of its runs after the file's import.

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
    "import contextlib, os, time\n"
    "_start = [0.0]\n"
    "def pytest_configure(config):\n"
    "    if os.environ['CRCR_BENCH_ARM'] == 'upstream':\n"
    "        import runners.testfn\n"
    "        runners.testfn.fast_test_fn_lookup = contextlib.nullcontext\n"
    "def pytest_collection_finish(session):\n"
    "    _start[0] = time.process_time()\n"
    "def pytest_sessionfinish(session, exitstatus):\n"
    "    with open(os.environ['CRCR_BENCH_OUT'], 'w') as f:\n"
    "        f.write(str(time.process_time() - _start[0]))\n"
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


def _pytest_cpu(expr: str, upstream: bool, plugin_dir: str) -> tuple[float, float, str]:
    """(the child's CPU, its tests' CPU after collection, pytest's summary line)."""
    phase = Path(plugin_dir, "phase.txt")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), plugin_dir]),
        "CRCR_BENCH_ARM": "upstream" if upstream else "crcr",
        "CRCR_BENCH_OUT": str(phase),
    }
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "crcr_lookup_clock",
        "-k",
        expr,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [*args, "tests/runners/snpu/test_snpu_opinfo.py"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, float(phase.read_text()), (done.stdout.strip().splitlines() or ["no output"])[-1]


SAMPLES_FILE = """
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase


class TestSamples(TestCase):
    @ops(op_db)
    def test_samples(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            op(sample.input, *sample.args, **sample.kwargs)


instantiate_device_type_tests(TestSamples, globals())
"""

TRACE_CHILD = (
    "import contextlib, sys, time\n"
    "argv = list(sys.argv)  # torch's common_utils rewrites sys.argv when the test file imports it\n"
    "import runners.testfn\n"
    "if argv[3] == 'upstream':\n"
    "    runners.testfn.fast_test_fn_lookup = contextlib.nullcontext\n"
    "import runners.cpu_trace\n"
    "real = runners.cpu_trace.run_traces\n"
    "def timed(*args):\n"
    "    start = time.process_time()\n"
    "    real(*args)\n"
    "    open(argv[4], 'w').write(str(time.process_time() - start))\n"
    "runners.cpu_trace.run_traces = timed\n"
    "sys.exit(runners.cpu_trace.main(argv[:3]))\n"
)


def _trace_cpu(tests: list[list[str]], upstream: bool, tmp: str) -> tuple[float, float, str]:
    """(the child's CPU, the CPU of its traces after the file was imported, the outcomes)."""
    import json

    src, dst = Path(tmp, "in.json"), Path(tmp, "out.jsonl")
    dst.unlink(missing_ok=True)
    root = Path(tmp, "checkout")
    (root / "test").mkdir(parents=True, exist_ok=True)
    (root / "test" / "test_samples.py").write_text(SAMPLES_FILE, encoding="utf-8")
    src.write_text(json.dumps({"root": str(root), "file": "test/test_samples.py", "tests": tests}))
    arm = "upstream" if upstream else "crcr"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", TRACE_CHILD, str(src), str(dst), arm, str(Path(tmp, "trace-phase.txt"))],
        cwd=ROOT,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    outcomes: dict[str, int] = {}
    for line in dst.read_text().splitlines() if dst.is_file() else []:
        rec = json.loads(line)
        if "outcome" in rec:
            outcomes[rec["outcome"]] = outcomes.get(rec["outcome"], 0) + 1
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    phase = float(Path(tmp, "trace-phase.txt").read_text())
    return cpu, phase, ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("-k", default="add or mul or sum or sin or cos")
    parser.add_argument("--trace-ops", type=int, default=40)
    args = parser.parse_args()
    import runners.snpu

    runners.snpu.install()
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    ops = list(op_db)[: args.ops]
    traced = [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")][: args.trace_ops]
    cls = "TestSamplesPRIVATEUSE1"
    tests = [
        [
            f"test/test_samples.py::{cls}::test_samples_{op.formatted_name}_snpu_float32",
            cls,
            f"test_samples_{op.formatted_name}_snpu_float32",
            "snpu",
        ]
        for op in traced
    ]
    _sweep_cpu(ops[:5], upstream=False)  # imports and first-call costs out of the measurement
    times: dict[str, dict[str, list[float]]] = {
        "sweep": {"upstream": [], "crcr": []},
        "pytest": {"upstream": [], "crcr": []},
        "pytest tests": {"upstream": [], "crcr": []},
        "trace": {"upstream": [], "crcr": []},
        "trace runs": {"upstream": [], "crcr": []},
    }
    with tempfile.TemporaryDirectory() as plugin_dir:
        Path(plugin_dir, "crcr_lookup_clock.py").write_text(PLUGIN, encoding="utf-8")
        for _ in range(args.rounds):
            for arm in ("upstream", "crcr"):
                times["sweep"][arm].append(_sweep_cpu(ops, upstream=arm == "upstream"))
                cpu, phase, summary = _pytest_cpu(args.k, arm == "upstream", plugin_dir)
                times["pytest"][arm].append(cpu)
                times["pytest tests"][arm].append(phase)
                print(
                    f"{arm}: pytest -k {args.k!r}: {cpu:.2f} s CPU, tests {phase:.2f} ({summary})", flush=True
                )
                cpu, phase, summary = _trace_cpu(tests, arm == "upstream", plugin_dir)
                times["trace"][arm].append(cpu)
                times["trace runs"][arm].append(phase)
                print(
                    f"{arm}: cpu_trace child, {len(tests)} twins: {cpu:.2f} s CPU, runs {phase:.2f} ({summary})"
                )
    for what, label in (
        ("sweep", f"sweep of {len(ops)} op_db entries x 3 dtypes, 3 samples"),
        ("pytest", f"test_snpu_opinfo.py -k {args.k!r} under pytest, the whole child"),
        ("pytest tests", "  the same, its tests after collection"),
        ("trace", f"cpu_trace child over {len(tests)} test_samples twins, the whole child"),
        ("trace runs", "  the same, its runs after the file's import"),
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
