"""The candidate upstream test files of a pick, and the data signals consult about them.

Candidates are the files of test-times.json (every config) and of the inventory that
the plan runs: a file counts when its file-level entry or any of its known tests
resolves to run / xfail / xfail_strict. With ``unplanned=True`` files the plan has no
file for count too (a backend planning at file level, or an evaluation of the whole
upstream suite). Durations: the backend's own results where it ran the file, else
test-times.json, else one second per known test.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from crcr.contracts.inventory import Inventory, InventoryTest
from crcr.contracts.plan import Plan
from crcr.contracts.results import RunResults
from selector.covmap import CoverageMap
from selector.importgraph import ImportGraph, checkout_imports
from selector.inventory.test_times import FILE_LEVEL_ID
from selector.signals.base import Universe
from selector.signals.owners import owner_modules

RUNNABLE = ("run", "xfail", "xfail_strict")
DEFAULT_TEST_S = 1.0
_NAMESPACES = ("nn.functional.", "nn.", "linalg.", "fft.", "special.", "_refs.", "sparse.", "masked.", "_masked.",
               "nested.", "signal.windows.", "_native.")


def op_tables(opdb: dict[str, Any] | None) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(OpInfo key -> list names, name used in code -> OpInfo keys) from ``load_opdb``'s table."""
    families: dict[str, set[str]] = defaultdict(set)
    names: dict[str, set[str]] = defaultdict(set)
    if not opdb:
        return {}, {}
    for list_name, keys in sorted(opdb.get("lists", {}).items()):
        for key in keys:
            families[key].add(list_name)
    infos = opdb.get("ops", {})
    for key in sorted(families):
        info = infos.get(key, {})
        base = info.get("name") or (key if key.startswith(_NAMESPACES) else key.split(".")[0])
        cands = {key, base, base.replace(".", "_"), base.rsplit(".", 1)[-1]}
        if info.get("aten_name"):
            cands.add(info["aten_name"])
        for c in cands:
            if c and len(c) > 2:
                names[c].add(key)
    return dict(families), dict(names)


def _file_runnable(plan: Plan, file: str, tests: list[InventoryTest]) -> bool | None:
    """True/False when the plan decides the file; None when it has no file for it."""
    if file not in plan.files:
        return None
    if plan.resolve(f"{file}::{FILE_LEVEL_ID}").mode in RUNNABLE:
        return True
    return any(plan.resolve(t.id).mode in RUNNABLE for t in tests)


def build_universe(plan: Plan | None, times: dict[str, float], inventory: Inventory | None = None, *,
                   unplanned: bool = False, results: list[RunResults] | None = None,
                   torch_modules: dict[str, set[str]] | None = None, checkout: Path | None = None,
                   opdb: dict[str, Any] | None = None, coverage: CoverageMap | None = None) -> Universe:
    tests: dict[str, list[InventoryTest]] = defaultdict(list)
    for t in sorted(inventory.tests if inventory else (), key=lambda t: t.id):
        if t.method != FILE_LEVEL_ID:
            tests[t.file].append(t)
    candidates = sorted(set(times) | set(tests))
    durations: dict[str, float] = {}
    for f in candidates:
        ok = _file_runnable(plan, f, tests.get(f, [])) if plan is not None else None
        if ok is False or (ok is None and plan is not None and not unplanned):
            continue
        if plan is not None and f in tests:
            tests[f] = [t for t in tests[f] if plan.resolve(t.id).mode in RUNNABLE]
        durations[f] = times.get(f, DEFAULT_TEST_S * max(len(tests.get(f, [])), 1))
    failures: dict[str, int] = defaultdict(int)
    own: dict[str, float] = defaultdict(float)
    for run in results or ():
        for r in run.tests:
            f = r.id.split("::", 1)[0]
            own[f] += r.duration_s
        for r in run.failed():
            failures[r.id.split("::", 1)[0]] += 1
    for f, secs in own.items():
        if f in durations and secs > 0:
            durations[f] = round(secs / max(len(results or ()), 1), 3)  # the backend's own time per run
    graph = None
    if torch_modules is not None:
        real = checkout_imports(checkout) if checkout is not None and (checkout / "test").is_dir() else {}
        imports = {f: (real[f] | {"torch.testing._internal.common_utils"}) if f in real else owner_modules(f)
                   for f in durations}
        graph = ImportGraph(torch_modules, imports)
    families, names = op_tables(opdb)
    return Universe(durations=durations, tests={f: v for f, v in tests.items() if f in durations}, graph=graph,
                    op_families=families, op_names=names, failures=dict(failures), coverage=coverage)
