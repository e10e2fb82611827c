"""Mutation cases for ``crcr select evaluate``: seeded faults in torch Python sources, through an overlay.

The installed torch is never modified, and no copy of torch is kept: each mutant is one
mutated module written to a temporary directory, loaded in place of the installed one by
an import hook (a ``sitecustomize.py`` on ``PYTHONPATH``), so nothing else changes.

The reference is independent of the pick. The candidate upstream test files are fixed up
front (every ``test/**/test_*.py`` of a scratch checkout read from pytorch/pytorch, never
committed), and:

1. each candidate file runs once, alone, under coverage of the installed torch's Python
   sources: its per-test outcomes (JUnit) are the reference outcomes, and its executed
   lines say which mutants it can possibly notice;
2. mutation points are every single-line comparison, boolean operator, arithmetic
   operator, ``not``, small integer / boolean constant and returned value inside a
   function body of a torch module that some candidate file executes, excluding lines that
   ``import torch`` itself executes (a fault there breaks every file and says nothing about
   selection), in the user-facing subfolders of ``TARGETS`` (fixed before any case was
   generated). ``--seed`` shuffles them; at most ``--per-module`` mutants per module and
   ``--per-subfolder`` per torch subfolder are taken, in that order;
3. each mutant runs every candidate file that executes its line (a file that never executes
   the changed statement behaves exactly as without it), with the per-test timeout; a test
   that passed in the reference and fails, errors or does not run under the mutant is a
   failing test. Mutants no test notices are reported and left out.

Each case says which tune / held-out half it belongs to (from a hash of its id and the seed,
fixed before any pick ran on it), so a change to the pick tuned on one half is measured
on the other.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/mutation_cases.py \\
        --checkout /work/scratch/i11-pick/upstream --work /work/scratch/i11-pick/work \\
        --out benchmarks/cases/mutation.jsonl
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from selector.evaluate import subfolder_of

RUN_TIMEOUT_S = 600
TEST_TIMEOUT_S = 60
MEMORY_LIMIT = 6_000_000_000  # address space: a mutant that loops while allocating dies, the machine is shared
SKIP_PREFIXES = ("testing/_internal/", "_vendor/", "include/", "share/", "utils/hipify/")
# The torch code the cases are about, fixed before any case was generated: the user-facing Python
# subfolders (not the import machinery, dynamo or device runtimes that test infrastructure touches).
TARGETS = ("nn/", "_refs/", "_decomp/", "_prims_common/", "_prims/", "optim/", "autograd/", "distributions/",
           "utils/data/", "fx/", "masked/", "special/", "_tensor.py", "_tensor_str.py", "functional.py",
           "testing/_comparison.py", "testing/_creation.py", "utils/_pytree.py", "utils/checkpoint.py",
           "utils/module_tracker.py", "utils/_appending_byte_serializer.py", "nested/", "func/", "_functorch/",
           "futures/", "distributed/optim/")

HOOK = '''
import importlib.abc, importlib.util, os, sys
_TARGET, _PATH, _PKG = os.environ["CRCR_MUTANT_MODULE"], os.environ["CRCR_MUTANT_PATH"], os.environ.get("CRCR_MUTANT_PKG")
class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname == _TARGET:
            return importlib.util.spec_from_file_location(
                fullname, _PATH, submodule_search_locations=[_PKG] if _PKG else None)
        return None
sys.meta_path.insert(0, _Finder())
'''


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def subfolder(torch_rel: str) -> str:
    return subfolder_of([f"torch/{torch_rel}"])


def split_of(case_id: str, seed: int) -> str:
    return "held-out" if hashlib.sha256(f"{seed}:{case_id}".encode()).digest()[0] % 2 else "tune"


def junit_outcomes(junit: Path) -> dict[str, str]:
    """Test id (``test/<file>.py::Class::name``) -> passed / failed / skipped."""
    out: dict[str, str] = {}
    if not junit.is_file():
        return out
    try:
        root = ET.parse(junit).getroot()
    except ET.ParseError:
        return out
    for case in root.iter("testcase"):
        file = case.get("file") or ""
        parts = (case.get("classname") or "").rsplit(".", 1)
        stem = Path(file).stem
        cls = parts[-1] if parts[-1] != stem else ""
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        test_id = f"{file}::{cls}::{case.get('name')}" if cls else f"{file}::{case.get('name')}"
        out[test_id] = "failed" if out.get(test_id) == "failed" else outcome  # setup + call errors: one id
    return out


def _pytest(checkout: Path, files: list[str], junit: Path, env: dict[str, str], prefix: list[str]) -> None:
    cmd = [*prefix, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "--rootdir", str(checkout),
           "-o", "addopts=", "-o", "junit_family=xunit1", f"--junitxml={junit}", f"--timeout={TEST_TIMEOUT_S}"]
    try:
        subprocess.run(cmd, cwd=checkout, env={**os.environ, **env}, capture_output=True, text=True, check=False,
                       timeout=RUN_TIMEOUT_S, preexec_fn=_limits)
    except subprocess.TimeoutExpired:
        pass  # what the JUnit file holds (often nothing) is what ran


def _executed(cov_data: Path, torch_dir: Path) -> dict[str, list[int]]:
    """Torch file (relative) -> executed lines, read from the coverage data (no report: torch is large)."""
    from coverage import CoverageData

    data = CoverageData(basename=str(cov_data))
    data.read()
    out: dict[str, list[int]] = {}
    for path in data.measured_files():
        try:
            rel = Path(path).resolve().relative_to(torch_dir).as_posix()
        except ValueError:
            continue
        out[rel] = sorted(data.lines(path) or ())
    return out


def reference(checkout: Path, files: list[str], torch_dir: Path, work: Path) -> tuple[dict, dict, set]:
    """Per file: reference outcomes and executed torch lines; plus the lines ``import torch`` executes."""
    work.mkdir(parents=True, exist_ok=True)
    include = f"--include={torch_dir}/*"
    imp = work / "import-only.json"
    if not imp.is_file():
        script = work / "import_only.py"
        script.write_text("import torch\nimport torch.testing._internal.common_utils\n")
        subprocess.run([sys.executable, "-m", "coverage", "run", f"--data-file={work / 'import.cov'}", include,
                        str(script)], check=True, capture_output=True)
        imp.write_text(json.dumps(_executed(work / "import.cov", torch_dir)))
    at_import = {(p, n) for p, lines in json.loads(imp.read_text()).items() for n in lines}
    outcomes: dict[str, dict[str, str]] = {}
    executed: dict[str, dict[str, list[int]]] = {}
    for f in files:
        key = f.replace("/", "__")
        done = work / f"{key}.ref.json"
        if not done.is_file():
            print(f"reference run (under coverage): {f}", flush=True)
            (work / f"{key}.cov").unlink(missing_ok=True)
            _pytest(checkout, [f], work / f"{key}.xml", {},
                    [sys.executable, "-m", "coverage", "run", f"--data-file={work / (key + '.cov')}", include])
            done.write_text(json.dumps({"outcomes": junit_outcomes(work / f"{key}.xml"),
                                        "executed": _executed(work / f"{key}.cov", torch_dir)}))
        ref = json.loads(done.read_text())
        outcomes[f], executed[f] = ref["outcomes"], ref["executed"]
    return outcomes, executed, at_import


@dataclass(frozen=True)
class Mutant:
    path: str  # under torch/
    line: int  # 1-based line of the changed text
    stmt: int  # first line of the innermost statement holding it (what coverage records)
    col: int
    end_col: int
    new: str
    op: str

    @property
    def id(self) -> str:
        stem = self.path.removesuffix(".py").replace("/", "-").replace("_", "")
        return f"mut-{stem}-L{self.line}-{self.op}"


_CMP_SWAP = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
             ast.LtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
_BIN_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult,
             ast.Mod: ast.FloorDiv}


def _variants(node: ast.AST) -> list[tuple[str, ast.AST | str]]:
    """(operator name, mutated node or replacement text) for one expression node."""
    import copy

    out: list[tuple[str, ast.AST | str]] = []
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_SWAP:
        m = copy.deepcopy(node)
        m.ops = [_CMP_SWAP[type(node.ops[0])]()]
        out.append(("cmp", m))
    elif isinstance(node, ast.BoolOp):
        m = copy.deepcopy(node)
        m.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        out.append(("bool", m))
    elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAP:
        m = copy.deepcopy(node)
        m.op = _BIN_SWAP[type(node.op)]()
        out.append(("arith", m))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        out.append(("not", node.operand))
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        out.append(("const", ast.Constant(not node.value)))
    elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 64:
        out.append(("const", ast.Constant(node.value + 1)))
    elif isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        out.append(("return", "return None"))
    return out


def mutation_points(rel: str, source: str, covered: set[int], at_import: set[int]) -> list[Mutant]:
    """Every single-line mutant inside a function body whose statement a candidate file executes."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    out: list[Mutant] = []

    def visit_body(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit_def(stmt)
                continue
            live = stmt.lineno in covered and stmt.lineno not in at_import
            for node in _own_nodes(stmt) if live else ():
                if not isinstance(node, ast.expr | ast.Return) or node.end_lineno != node.lineno:
                    continue
                text = lines[node.lineno - 1].encode()
                for op, new in _variants(node):
                    new_text = new if isinstance(new, str) else ast.unparse(new)
                    col, end = node.col_offset, node.end_col_offset
                    start = len(text[:col].decode(errors="replace"))
                    stop = len(text[:end].decode(errors="replace"))
                    out.append(Mutant(rel, node.lineno, stmt.lineno, start, stop, new_text, op))
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(stmt, field, None)
                if isinstance(block, list):
                    visit_body([b for b in block if isinstance(b, ast.stmt)] +
                               [s for h in block if isinstance(h, ast.ExceptHandler) for s in h.body])
            if isinstance(stmt, ast.Match):
                for c in stmt.cases:
                    visit_body(c.body)

    def visit_def(node: ast.AST) -> None:
        if isinstance(node, ast.ClassDef):
            for s in node.body:
                if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    visit_def(s)
        else:
            visit_body(node.body)  # type: ignore[attr-defined]

    for top in tree.body:
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            visit_def(top)
    return out


def _own_nodes(stmt: ast.stmt) -> list[ast.AST]:
    """The statement itself and its expressions, not the statements nested in its blocks."""
    nodes: list[ast.AST] = [stmt] if isinstance(stmt, ast.Return) else []
    stack = [c for c in ast.iter_child_nodes(stmt) if not isinstance(c, ast.stmt | ast.ExceptHandler | ast.match_case)]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Lambda | ast.JoinedStr):
            continue
        nodes.append(n)
        stack.extend(ast.iter_child_nodes(n))
    return sorted(nodes, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0), type(n).__name__))


def choose(points: list[Mutant], seed: int, per_module: int, per_subfolder: int) -> list[Mutant]:
    rng = random.Random(seed)
    order = sorted(points, key=lambda m: (m.path, m.line, m.col, m.op))
    rng.shuffle(order)
    by_module: dict[str, int] = {}
    by_sub: dict[str, int] = {}
    seen_lines: set[tuple[str, int]] = set()
    out = []
    for m in order:
        sub = subfolder(m.path)
        if by_module.get(m.path, 0) >= per_module or by_sub.get(sub, 0) >= per_subfolder:
            continue
        if (m.path, m.line) in seen_lines:
            continue
        seen_lines.add((m.path, m.line))
        by_module[m.path] = by_module.get(m.path, 0) + 1
        by_sub[sub] = by_sub.get(sub, 0) + 1
        out.append(m)
    return out


def run_mutant(m: Mutant, torch_dir: Path, checkout: Path, files: list[str], ref: dict[str, dict[str, str]],
               work: Path) -> dict | None:
    src = (torch_dir / m.path).read_text(encoding="utf-8")
    lines = src.splitlines(True)
    line = lines[m.line - 1]
    lines[m.line - 1] = line[:m.col] + m.new + line[m.end_col:]
    mutated = "".join(lines)
    try:
        ast.parse(mutated)
    except SyntaxError:
        return None
    d = work / "mutants" / m.id
    (d / "site").mkdir(parents=True, exist_ok=True)
    (d / "site" / "sitecustomize.py").write_text(HOOK)
    copy = d / Path(m.path).name
    copy.write_text(mutated)
    module = "torch." + m.path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    if m.path == "__init__.py":
        return None
    env = {"PYTHONPATH": f"{d / 'site'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "CRCR_MUTANT_MODULE": module, "CRCR_MUTANT_PATH": str(copy)}
    if m.path.endswith("/__init__.py"):
        env["CRCR_MUTANT_PKG"] = str((torch_dir / m.path).parent)
    junit = d / "junit.xml"
    junit.unlink(missing_ok=True)
    _pytest(checkout, files, junit, env, [sys.executable])
    got = junit_outcomes(junit)
    failing = []
    for f in files:
        for t, v in ref[f].items():
            if v == "passed" and got.get(t, "missing") in ("failed", "missing"):
                failing.append(t)
    diff = "".join(difflib.unified_diff(src.splitlines(True), mutated.splitlines(True),
                                        f"a/torch/{m.path}", f"b/torch/{m.path}", n=3))
    return {"diff": f"diff --git a/torch/{m.path} b/torch/{m.path}\n" + diff, "failing": sorted(failing)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, required=True, help="scratch folder with upstream test/ files")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder for coverage data and mutant runs")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--per-module", type=int, default=2)
    ap.add_argument("--per-subfolder", type=int, default=5)
    ap.add_argument("--max-mutants", type=int, default=0, help="only the first N chosen mutants (0: all)")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once (the machine is shared: keep it small)")
    ap.add_argument("--append", action="store_true",
                    help="keep the cases already in --out and skip mutants already run in --work (a larger batch)")
    ap.add_argument("--list", action="store_true", help="only list the chosen mutants")
    args = ap.parse_args()
    import importlib.util

    torch_dir = Path(importlib.util.find_spec("torch").submodule_search_locations[0]).resolve()
    checkout = args.checkout.resolve()
    files = sorted(p.relative_to(checkout).as_posix() for p in (checkout / "test").rglob("test_*.py"))
    outcomes, executed, at_import = reference(checkout, files, torch_dir, args.work.resolve())
    print(f"reference: {len(files)} files, {sum(v == 'passed' for o in outcomes.values() for v in o.values())} "
          f"passed of {sum(len(o) for o in outcomes.values())} tests", flush=True)
    covered: dict[str, set[int]] = {}
    for f in files:
        for rel, lines in executed[f].items():
            covered.setdefault(rel, set()).update(lines)
    points: list[Mutant] = []
    for rel in sorted(covered):
        if rel.startswith(SKIP_PREFIXES) or not rel.startswith(TARGETS) or not rel.endswith(".py"):
            continue
        imp = {n for p, n in at_import if p == rel}
        points += mutation_points(rel, (torch_dir / rel).read_text(encoding="utf-8"), covered[rel], imp)
    chosen = choose(points, args.seed, args.per_module, args.per_subfolder)
    if args.max_mutants:
        chosen = chosen[:args.max_mutants]
    print(f"{len(points)} mutation points in {len({p.path for p in points})} modules; {len(chosen)} chosen "
          f"(seed {args.seed})", flush=True)
    if args.list:
        for m in chosen:
            print(f"  {m.id}: {m.path}:{m.line} -> {m.new!r}")
        return
    cases, dropped = [], []
    if args.append and args.out.is_file():
        cases = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
        chosen = [m for m in chosen if not (args.work / "mutants" / m.id / "junit.xml").is_file()]
        print(f"--append: {len(cases)} cases kept, {len(chosen)} mutants not run yet", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def one(item: tuple[int, Mutant]) -> None:
        i, m = item
        runs = [f for f in files if m.stmt in set(executed[f].get(m.path, ()))]
        got = run_mutant(m, torch_dir, checkout, runs, outcomes, args.work.resolve())
        with lock:
            if got is None or not got["failing"]:
                dropped.append(m.id)
                print(f"[{i}/{len(chosen)}] {m.id}: no failing test ({len(runs)} file(s) run)", flush=True)
                return
            failing = got["failing"]
            case = {"id": m.id, "kind": "mutation", "diff": got["diff"], "subfolder": subfolder(m.path),
                    "split": split_of(m.id, args.seed), "failing_files": sorted({t.split("::", 1)[0] for t in failing}),
                    "failing_tests": failing, "ran_files": runs, "reference_files": files,
                    "source": f"seeded overlay mutant ({m.op}) of torch/{m.path}:{m.line} on the installed torch; "
                              f"reference: the {len(files)} candidate files of pytorch/pytorch test/ in the scratch "
                              f"checkout, each file that executes the line run with and without it"}
            cases.append(case)
            print(f"[{i}/{len(chosen)}] {m.id}: {len(failing)} failing test(s) in {case['failing_files']}", flush=True)
            # a cut-short run keeps its cases
            args.out.write_text("".join(json.dumps(c, sort_keys=True) + "\n" for c in cases))

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, enumerate(chosen, 1)))
    args.out.write_text("".join(json.dumps(c, sort_keys=True) + "\n" for c in sorted(cases, key=lambda c: c["id"])))
    print(f"{len(cases)} cases -> {args.out}; {len(dropped)} mutants no candidate test noticed")


if __name__ == "__main__":
    main()
