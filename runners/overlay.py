"""Overlay a checkout's torch Python sources on the installed torch (``crcr run --overlay DIR``).

A backend's CI tests upstream *commits*, and most upstream changes that break a
backend are Python: ``torch/nn/functional.py``, ``torch/_refs``, ``torch/_decomp``.
Without building torch, a run can still execute a commit's Python code: for every
``torch/**.py`` file in ``DIR`` whose text differs from the installed module's, the
top-level functions whose source differs (or that are new) are compiled from the
overlay file and bound in the installed module, before any test module imports
``torch.testing._internal`` (whose ``op_db`` binds functions at import time).

Only functions are replaced: re-running a whole module would re-register C docstrings
and operators, which torch refuses. A file that maps to no importable torch module is
reported, not guessed at.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class OverlayReport:
    replaced: list[str] = field(default_factory=list)  # module.function
    skipped: list[str] = field(default_factory=list)  # "path: why"


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def apply(root: Path) -> OverlayReport:
    """Bind the changed top-level functions of ``root/torch/**.py`` into the installed torch."""
    report = OverlayReport()
    base = root / "torch"
    if not base.is_dir():
        report.skipped.append(f"{root}: no torch/ folder")
        return report
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(root)
        name = _module_name(rel)
        try:
            module = importlib.import_module(name)
            installed = Path(inspect.getsourcefile(module) or "")
            old_text = installed.read_text(encoding="utf-8")
        except (ImportError, OSError, TypeError) as exc:
            report.skipped.append(f"{rel}: no installed module {name} ({type(exc).__name__})")
            continue
        new_text = path.read_text(encoding="utf-8")
        if new_text == old_text:
            continue
        try:
            new_tree = ast.parse(new_text, filename=str(path))
        except SyntaxError as exc:
            # a commit with a syntax error breaks every importer: make the run fail loudly
            raise SyntaxError(f"overlay {rel} does not parse: {exc}") from exc
        old_funcs = _functions(ast.parse(old_text))
        for fname, node in _functions(new_tree).items():
            old = old_funcs.get(fname)
            if old is not None and ast.dump(old) == ast.dump(node):
                continue
            code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
            exec(code, module.__dict__)  # noqa: S102 - running the commit's code is the point of the run
            report.replaced.append(f"{name}.{fname}")
    return report
