"""Pick latency: the whole upstream suite (every file of test-times.json) and a 100,000-test plan,
with a 300-file diff. Prints seconds per pick and the ratio to a baseline measured in the same run
(reading the diff and scoring path keywords only).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/pick_latency.py

Needs the cached torch import graph and op table in the data dir (the first ``crcr select pick``
builds them; this script builds them too, outside the timed part).
"""

from __future__ import annotations

import statistics
import time
from importlib.metadata import version

from crcr.contracts.inventory import InventoryTest
from crcr.data import TEST_TIMES
from crcr.settings import get_settings
from selector.diffparse import parse_diff
from selector.filepick import pick_files
from selector.importgraph import cached_torch_graph, graph_cache
from selector.inventory.opdb import load_opdb
from selector.inventory.sources import installed_torch_dir
from selector.inventory.test_times import file_times
from selector.signals.base import Change
from selector.signals.keywords import PathKeywords
from selector.universe import build_universe

REPEAT = 3


def _diff(n: int, graph: dict) -> str:
    mods = sorted(m for m in graph if m.count(".") >= 2)[:: max(1, len(graph) // n)][:n]
    out = []
    for m in mods:
        path = m.replace(".", "/") + ".py"
        out.append(f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -10,3 +10,3 @@ def add(a, b):\n-x\n+y\n")
    return "".join(out)


def _time(fn) -> float:
    runs = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    data = get_settings().data_dir
    graph = cached_torch_graph(installed_torch_dir(), graph_cache(data, version("torch")))
    opdb = load_opdb(data)
    times = file_times(TEST_TIMES, all_configs=True)
    text = _diff(300, graph)
    files = sorted(times)
    big = [InventoryTest(id=f"{files[i % len(files)]}::TestX::test_{i}", file=files[i % len(files)], method=f"test_{i}",
                         fingerprint="0") for i in range(100_000)]
    from crcr.contracts.inventory import Inventory

    for label, inv in (("1,115 files (file level)", None), ("100,000-test inventory", Inventory(source="embedded", tests=big))):
        def run() -> None:
            u = build_universe(None, times, inv, torch_modules=graph, opdb=opdb)
            change = Change.from_diffs(parse_diff(text))
            pick_files(change, u, budget_s=sum(u.durations.values()) * 0.25)

        def baseline() -> None:
            u = build_universe(None, times, inv, opdb=None)
            change = Change.from_diffs(parse_diff(text))
            pick_files(change, u, signals=(PathKeywords(),), budget_s=sum(u.durations.values()) * 0.25, fill=False)

        t, b = _time(run), _time(baseline)
        print(f"{label}, 300-file diff: pick {t:.3f}s; baseline (parse + path keywords) {b:.3f}s; ratio {t / b:.1f}x")


if __name__ == "__main__":
    main()
