"""A coverage map of our own: which torch functions each upstream test file executes.

Made by running test files, one at a time and each under a timeout, with ``coverage``
measuring the installed torch's Python sources. A torch function counts for a test
file when a line of its body ran (a ``def`` line runs at import, a body line only when
called). Functions that a baseline run (import torch and the test harness, one empty
test) already executes are left out: a change to them reaches every test alike, so
they say nothing about which file to pick. What is stored per test file: torch source
path -> sorted function names (unqualified, as git's hunk headers and the diff parser
name them).

The map is data (JSON, gzip); ``crcr select coverage-map`` rebuilds it. PyTorch's own
published coverage maps are never an input: they are what picks are judged by.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
SHIPPED = Path(__file__).resolve().parent / "data" / "coverage-map.json.gz"
BASELINE_TEST = '''"""Baseline for the coverage map: torch and the test harness imported, one empty test."""
import torch
from torch.testing._internal.common_utils import TestCase, run_tests


class TestBaseline(TestCase):
    def test_nothing(self):
        self.assertTrue(torch.ones(1).sum().item() == 1.0)


if __name__ == "__main__":
    run_tests()
'''


@dataclass
class CoverageMap:
    """test file (``test/...py``) -> torch source (``torch/...py``) -> functions it executes."""

    tests: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # torch version, how each file was run
    _inverse: dict[str, dict[str, frozenset[str]]] | None = field(default=None, repr=False)

    def covering(self, source: str) -> dict[str, frozenset[str]]:
        """test file -> the functions of ``source`` it executes (files that execute none are absent)."""
        if self._inverse is None:
            inv: dict[str, dict[str, frozenset[str]]] = {}
            for test, sources in self.tests.items():
                for src, funcs in sources.items():
                    inv.setdefault(src, {})[test] = frozenset(funcs)
            self._inverse = inv
        return self._inverse.get(source, {})

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "meta": self.meta,
                "tests": {t: {s: sorted(f) for s, f in sorted(src.items())} for t, src in sorted(self.tests.items())}}

    def save(self, path: Path) -> None:
        raw = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(gzip.compress(raw, mtime=0))  # no name, mtime 0: the same map gives the same bytes
        tmp.replace(path)


def load_map(path: Path) -> CoverageMap:
    """Read a map written by :meth:`CoverageMap.save` (gzip JSON; plain JSON is accepted too)."""
    data = path.read_bytes()
    try:
        d = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a coverage map ({exc})") from None
    if not isinstance(d, dict) or d.get("schema_version") != SCHEMA_VERSION or not isinstance(d.get("tests"), dict):
        raise ValueError(f"{path}: not a coverage map (schema_version {SCHEMA_VERSION})")
    tests: dict[str, dict[str, list[str]]] = {}
    for t, sources in d["tests"].items():
        if not isinstance(sources, dict):
            raise ValueError(f"{path}: entry {t!r} is not a mapping")
        tests[str(t)] = {str(s): [str(f) for f in funcs] for s, funcs in sources.items() if isinstance(funcs, list)}
    return CoverageMap(tests, dict(d.get("meta") or {}))


def shipped_map() -> CoverageMap | None:
    """The map shipped with the package (None when it is absent)."""
    return load_map(SHIPPED) if SHIPPED.is_file() else None


def function_lines(source: str) -> dict[int, str]:
    """Line -> the innermost function whose body holds it (def lines and decorators excluded)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    spans: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            spans.append((node.body[0].lineno, node.end_lineno or node.body[-1].lineno, node.name))
    out: dict[int, str] = {}
    for start, end, name in sorted(spans, key=lambda s: s[1] - s[0], reverse=True):  # inner spans overwrite
        for line in range(start, end + 1):
            out[line] = name
    return out


def executed_functions(lines_by_file: dict[str, Iterable[int]], torch_dir: Path) -> dict[str, set[str]]:
    """torch/<rel>.py (paths from the package's parent) -> names of functions with an executed body line."""
    out: dict[str, set[str]] = {}
    root = torch_dir.resolve().parent
    prefix = torch_dir.resolve().name + "/"  # torch/ (a fixture package in tests)
    for fname, lines in lines_by_file.items():
        p = Path(fname).resolve()
        try:
            rel = p.relative_to(root).as_posix()
        except ValueError:
            continue
        if not rel.startswith(prefix) or not rel.endswith(".py"):
            continue
        try:
            owner = function_lines(p.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        funcs = {owner[n] for n in lines if n in owner}
        if funcs:
            out[rel] = funcs
    return out


def _read_data(data_file: Path) -> dict[str, list[int]]:
    import coverage

    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    return {f: sorted(data.lines(f) or ()) for f in data.measured_files()}


def run_under_coverage(test_file: Path, cwd: Path, torch_dir: Path, *, timeout_s: float,
                       pythonpath: Iterable[Path] = (), pytest_args: Iterable[str] = ()) -> tuple[dict[str, set[str]], str]:
    """Run one test file with pytest under coverage of ``torch_dir``; (functions executed, how it ended).

    On timeout the run gets SIGTERM, on which coverage saves what it measured so far
    (``sigterm = true``): a file too long to finish still gives a partial map.
    """
    with tempfile.TemporaryDirectory(prefix="crcr-cov-") as tmp:
        rc = Path(tmp) / "coveragerc"
        data_file = Path(tmp) / "data"
        rc.write_text(f"[run]\nsource = {torch_dir.resolve()}\ndata_file = {data_file}\nsigterm = true\n"
                      "disable_warnings = no-data-collected, module-not-measured, module-not-imported\n")
        env = dict(os.environ)
        extra = [str(Path(p).resolve()) for p in pythonpath]
        env["PYTHONPATH"] = os.pathsep.join(extra + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.setdefault("PYTORCH_TEST_WITH_SLOW", "0")
        cmd = [sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest", str(test_file), "-q",
               "-p", "no:cacheprovider", "-p", "no:randomly", *pytest_args]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
            how = f"exit {code} after {time.monotonic() - start:.0f}s"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=120)  # coverage writes its data on SIGTERM
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            how = f"stopped at the {timeout_s:g}s timeout (partial)"
        if not data_file.exists():
            return {}, how + ", no coverage data"
        return executed_functions(_read_data(data_file), torch_dir), how


def baseline_functions(torch_dir: Path, *, timeout_s: float = 300) -> dict[str, set[str]]:
    """What importing torch and the test harness and running one empty test executes."""
    with tempfile.TemporaryDirectory(prefix="crcr-cov-base-") as tmp:
        f = Path(tmp) / "test_crcr_baseline.py"
        f.write_text(BASELINE_TEST)
        funcs, _ = run_under_coverage(f, Path(tmp), torch_dir, timeout_s=timeout_s)
        return funcs


def build_map(roots: list[tuple[Path, list[str], str]], torch_dir: Path, *, timeout_s: float,
              previous: CoverageMap | None = None, pythonpath: Iterable[Path] = (),
              baseline: dict[str, set[str]] | None = None,
              progress: Callable[[str], None] = lambda s: None) -> CoverageMap:
    """Run each (root, test files relative to root, origin) under coverage; merge into ``previous``.

    A test file's key is its path relative to its root (``test/test_x.py``), as in
    test-times.json. Entries of ``previous`` for files not run again are kept.
    """
    import torch

    base = baseline if baseline is not None else baseline_functions(torch_dir, timeout_s=timeout_s)
    cmap = CoverageMap({k: dict(v) for k, v in (previous.tests if previous else {}).items()},
                       dict(previous.meta) if previous else {})
    cmap.meta["torch"] = torch.__version__
    cmap.meta.setdefault("runs", {})
    for root, files, origin in roots:
        for rel in files:
            funcs, how = run_under_coverage(root / rel, root, torch_dir, timeout_s=timeout_s, pythonpath=pythonpath)
            kept = {src: sorted(fs - base.get(src, set())) for src, fs in funcs.items()}
            cmap.tests[rel] = {src: fs for src, fs in kept.items() if fs}
            n = sum(len(v) for v in cmap.tests[rel].values())
            cmap.meta["runs"][rel] = f"{origin}: {how}; {n} torch functions beyond the baseline"
            progress(f"{rel}: {how}; {n} functions in {len(cmap.tests[rel])} torch files")
    cmap._inverse = None
    return cmap
