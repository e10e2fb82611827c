"""Plan loading and resolution, as ``crcr select pick`` and ``crcr run`` do them for the snpu
plan (configs/selections/snpu, 2,501 entries, 1,206 of them patterns) over every test of
an inventory: PyYAML's pure-Python safe loader against the libyaml one, and a scan of
every pattern (the resolver before the literal index) against the indexed resolver (cold:
no id resolved before). Prints seconds (median of --repeat) and the ratios; checks that
both resolvers decide the same for every id.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/plan_load_resolve.py --inventory INVENTORY.json

INVENTORY.json: e.g. the one ``crcr demo`` collects (``<data dir>/downstream/inventory-snpu.json``,
15,270 tests of the embedded suite).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import yaml

from crcr.contracts import plan as plan_mod
from crcr.contracts.plan import SOURCE_RANK, Decision, PlanFile, load_plan


def scan_resolve(pf: PlanFile, test_id: str) -> Decision:
    """The resolver before the index: every pattern's literal checked, then its regex."""
    exact, patterns = pf._index
    lits = pf._literals
    best, chosen = None, None
    candidates = [(1, i, e) for i, e in exact.get(test_id, ())]
    candidates += [(0, i, e) for i, e in patterns if lits[i] in test_id and e.id != test_id and e.regex.fullmatch(test_id)]
    for is_exact, index, entry in candidates:
        key = (SOURCE_RANK[entry.source], is_exact, index)
        if best is None or key > best:
            best, chosen = key, entry
    if chosen is None:
        return Decision(pf.defaults.mode, pf.defaults.reason, "default", None, pf.upstream.file)
    return Decision(chosen.mode, chosen.reason, chosen.source, chosen, pf.upstream.file)


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", type=Path, default=Path("configs/selections/snpu"))
    ap.add_argument("--inventory", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    ids = [t["id"] for t in json.loads(args.inventory.read_text())["tests"]]

    def load_with(loader: object):
        def run():
            plan_mod._SAFE_LOADER = loader
            return load_plan(args.plan)
        return run

    c_loader = getattr(yaml, "CSafeLoader", None)
    py_s, _ = timed(load_with(yaml.SafeLoader), args.repeat)
    c_s, plan = timed(load_with(c_loader or yaml.SafeLoader), args.repeat)
    plan_mod._SAFE_LOADER = c_loader or yaml.SafeLoader

    def scan():
        return [scan_resolve(plan.files[i.split("::", 1)[0]], i.split("::", 1)[1]) if i.split("::", 1)[0] in plan.files
                else plan.resolve(i) for i in ids]

    def indexed():
        fresh = load_plan(args.plan)  # cold: no cached decisions
        started = time.perf_counter()
        out = [fresh.resolve(i) for i in ids]
        return time.perf_counter() - started, out

    scan_s, scanned = timed(scan, args.repeat)
    runs = [indexed() for _ in range(args.repeat)]
    index_s = statistics.median(r[0] for r in runs)
    same = all((a.mode, a.source, a.entry_id) == (b.mode, b.source, b.entry_id) for a, b in zip(scanned, runs[0][1]))
    entries = sum(len(f.tests) for f in plan)
    print(f"plan {args.plan}: {len(plan.files)} files, {entries} entries; {len(ids)} test ids; libyaml "
          f"{'available' if c_loader else 'MISSING'}")
    print(f"load, pure-Python SafeLoader (baseline): {py_s:.3f}s   libyaml CSafeLoader: {c_s:.3f}s   "
          f"ratio {py_s / c_s:.1f}x")
    print(f"resolve every id, scan of every pattern (baseline): {scan_s:.3f}s   indexed: {index_s:.3f}s   "
          f"ratio {scan_s / index_s:.1f}x   same decisions: {same}")


if __name__ == "__main__":
    main()
