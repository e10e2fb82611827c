"""OpInfo-level inventory, read statically from ``common_methods_invocations.py`` and
``opinfo/definitions/*.py`` (nothing is imported or executed).

Each OpInfo entry (``UnaryUfuncInfo('abs', ...)``) in a module-level list ending in ``op_db`` or
``python_ref_db`` gets a fingerprint of its normalised constructor call plus the
module-level helper functions it names (``sample_inputs_func=...`` and friends), so a
change to an op's samples counts as a change to the op. Both versions of an upgrade are
hashed by this same code, so added / removed / changed / unchanged is meaningful.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from crcr.contracts.inventory import Inventory, InventoryTest
from selector.fingerprint import digest, normalised
from selector.inventory.sources import INTERNAL, TorchSources

_DB_SUFFIXES = ("op_db", "python_ref_db")
# op_db itself is built from the lists named exactly op_db / python_ref_db (common_methods_invocations
# adds opinfo.definitions.*.op_db to it). Other lists ending in op_db hold entries of their own kind:
# ForeachFuncInfo('add') is torch's "_foreach_add", so the foreach lists must not answer for "add".
_OP_DB_LISTS = ("op_db", "python_ref_db")


@dataclass
class OpInfoEntry:
    key: str  # name, or name.variant
    name: str
    variant: str
    db: str
    file: str
    line: int
    fingerprint: str
    helpers: list[str] = field(default_factory=list)
    source: str = ""


def _const_str(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _call_name(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return ""


def _entry_name(call: ast.Call) -> tuple[str | None, str]:
    name = _const_str(call.args[0]) if call.args else None
    variant = ""
    for kw in call.keywords:
        if kw.arg == "name" and name is None:
            name = _const_str(kw.value)
        elif kw.arg == "variant_test_name":
            variant = _const_str(kw.value) or ""
    return name, variant


def _db_lists(tree: ast.Module) -> list[tuple[str, ast.List]]:
    found: list[tuple[str, ast.List]] = []
    for node in tree.body:
        target: ast.AST | None = None
        value: ast.AST | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id.endswith(_DB_SUFFIXES) and isinstance(value, ast.List):
            found.append((target.id, value))
    return found


def _functions(tree: ast.Module) -> dict[str, str]:
    """Module-level functions by name, normalised (docstrings count as code: they rarely change)."""
    return {
        n.name: normalised(n) for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def scan(sources: TorchSources, with_source: bool = False) -> dict[str, OpInfoEntry]:
    """Every statically visible OpInfo entry of one torch version, by key."""
    parsed: list[tuple[str, ast.Module, str]] = []
    helpers: dict[str, str] = {}
    for rel in sources.opinfo_files():
        text = sources.read(rel)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        parsed.append((rel, tree, text))
        for name, body in _functions(tree).items():
            helpers.setdefault(name, body)
    entries: dict[str, OpInfoEntry] = {}
    for rel, tree, text in parsed:
        for db, lst in _db_lists(tree):
            for elt in lst.elts:
                if not isinstance(elt, ast.Call):
                    continue
                name, variant = _entry_name(elt)
                if not name:
                    continue
                if db not in _OP_DB_LISTS and db.startswith("foreach_") and not name.startswith("_foreach_"):
                    name = f"_foreach_{name}"  # as ForeachFuncInfo names itself
                key = f"{name}.{variant}" if variant else name
                used = sorted({n.id for n in ast.walk(elt) if isinstance(n, ast.Name) and n.id in helpers})
                fp = digest(normalised(elt), *[helpers[h] for h in used])
                entry = OpInfoEntry(key, name, variant, db, f"{INTERNAL}/{rel}", elt.lineno, fp, used)
                if with_source:
                    entry.source = ast.get_source_segment(text, elt) or ""
                # An op_db entry beats any other list's entry of the same key; within a kind the first
                # definition wins, as in op_db's own order (later duplicates are rare).
                held = entries.get(key)
                if held is None or (db in _OP_DB_LISTS and held.db not in _OP_DB_LISTS):
                    entries[key] = entry
    return entries


def opinfo_inventory(sources: TorchSources) -> Inventory:
    """An OpInfo-granularity inventory: one pseudo-test per OpInfo entry."""
    tests = [
        InventoryTest(
            id=f"{e.file}::{e.db}::{e.key}",
            file=e.file,
            cls=e.db,
            method=e.key,
            op=e.key,
            fingerprint=e.fingerprint,
            opinfo_fingerprint=e.fingerprint,
        )
        for e in scan(sources).values()
    ]
    inv = Inventory(source="opinfo", granularity="opinfo", torch_version=sources.version, tests=tests)
    inv.tests.sort(key=lambda t: t.id)
    return inv


def opinfo_source(sources: TorchSources, op: str) -> OpInfoEntry | None:
    """The OpInfo entry for ``op`` (``name`` or ``name.variant``) with its source text."""
    return scan(sources, with_source=True).get(op)


def cached_fingerprints(sources: TorchSources, data_dir: Path) -> dict[str, str]:
    """OpInfo fingerprints by key for one torch version, cached in the data dir (a scan takes seconds)."""
    import json

    from crcr.fileio import atomic_write_text

    cache = data_dir / "selector" / f"opinfo-fps-{sources.version or 'unknown'}.json"
    if cache.is_file():
        try:
            return dict(json.loads(cache.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            pass  # rebuilt below
    fps = {k: e.fingerprint for k, e in scan(sources).items()}
    atomic_write_text(cache, json.dumps(fps, sort_keys=True))
    return fps
