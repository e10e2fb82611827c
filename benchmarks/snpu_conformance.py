"""Conformance: does snpu raise what the CPU raises and keep the CPU's output layouts, over op_db?

    .venv/bin/python benchmarks/snpu_conformance.py [--check errors|layout] [--sample-limit N] [--list N]

``errors``: every op_db entry's ``error_inputs`` (built for snpu, as upstream's
``test_errors`` builds them) on the CPU and on snpu: agree (both raise the expected type
and message), refused (snpu's own unsupported-op / dtype error), disagree; CPU misses
(the CPU itself does not raise as expected) and inputs snpu cannot build are counted
apart. ``layout``: every float32 sample, plus a channels-last (4-D/5-D) or transposed
(2-D/3-D) copy of its input, on both: same output memory format / strides, different,
snpu failed (the coverage sweep's business), or the CPU refused the relaid input.
The harness is ``runners.snpu.conformance``; disagreements are listed (``--list``).
"""

from __future__ import annotations

import argparse
import collections
import time

import torch

from runners.snpu import conformance


def _print(title: str, report: conformance.Report, order: tuple[str, ...], show: tuple[str, ...], limit: int) -> None:
    counts = report.counts()
    total = sum(counts.values())
    entries = len({f.op for f in report.findings})
    parts = ", ".join(f"{v} {counts.get(v, 0)}" for v in order)
    print(f"{title}: {total} inputs of {entries} op_db entries: {parts}")
    for verdict in show:
        found = report.having(verdict)
        ops = collections.Counter(f.op for f in found)
        print(f"  {verdict}: {len(found)} inputs in {len(ops)} entries")
        for f in found[:limit]:
            print(f"    {f.op} #{f.index}: {f.detail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="append", choices=("errors", "layout"))
    parser.add_argument("--sample-limit", type=int, default=None, help="layout: samples per entry")
    parser.add_argument("--list", type=int, default=40, help="list at most this many findings per verdict")
    args = parser.parse_args()
    checks = args.check or ["errors", "layout"]
    print(f"torch {torch.__version__}")
    if "errors" in checks:
        t0 = time.perf_counter()
        report = conformance.run(conformance.check_errors)
        order = (conformance.AGREE, conformance.REFUSED, conformance.DISAGREE, conformance.CPU_MISS, conformance.UNBUILT)
        _print(f"errors ({time.perf_counter() - t0:.0f} s)", report, order, (conformance.DISAGREE,), args.list)
    if "layout" in checks:
        t0 = time.perf_counter()
        report = conformance.run(lambda op: conformance.check_layout(op, limit=args.sample_limit))
        order = (conformance.SAME, conformance.DIFFERENT, conformance.FAILED, conformance.CPU_ERROR)
        _print(f"layout, float32 ({time.perf_counter() - t0:.0f} s)", report, order, (conformance.DIFFERENT,), args.list)
        relaid = report.failed_only_relaid()
        print(f"  failed on a relaid copy only (the sample as given passes): {len(relaid)}")
        for f in relaid[: args.list]:
            print(f"    {f.op} #{f.index}: {f.detail}")


if __name__ == "__main__":
    main()
