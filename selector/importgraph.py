"""A static import graph: which ``torch`` modules each upstream test file reaches.

Edges come from module-level ``import`` / ``from ... import`` statements (also inside
module-level ``if`` / ``try`` blocks, not inside functions or classes), read with
``ast`` and never executed:

- test file -> module, from a checkout's ``test/**/*.py``;
- torch module -> torch module, from the installed torch sources.

Reach is transitive with a depth per module. Every test imports ``torch``, whose
``__init__`` imports nearly all of it, so the walk never expands a package's
``__init__`` reached only as a parent: the edge ``a -> torch.nn.functional`` names
``torch.nn.functional``, not everything ``torch.nn`` pulls in.

Tests mostly reach torch through attributes (``torch.nn.Conv2d``, ``nn.utils.rnn.pad_sequence``,
``F.relu``), not imports: a test file's edges also include every attribute chain rooted at
a name bound to a torch module. A package's re-exports (``from .conv import Conv2d`` in
``torch/nn/modules/__init__.py``, followed through ``from .modules import *``) are nodes of
their own, ``torch.nn.Conv2d -> torch.nn.modules.conv``, so such a chain reaches the module
that defines the name instead of the whole package.
"""

from __future__ import annotations

import ast
import json
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from crcr.fileio import atomic_write_text

GRAPH_VERSION = 2
MAX_DEPTH = 4
MAX_CHAIN = 4  # attributes followed in ``torch.a.b.c.d``


def module_of(path: str) -> str | None:
    """``torch/nn/functional.py`` -> ``torch.nn.functional``; ``torch/fx/__init__.py`` -> ``torch.fx``."""
    if not path.endswith((".py", ".pyi")) or not path.startswith("torch/"):
        return None
    parts = path.rsplit(".", 1)[0].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if all(p.isidentifier() for p in parts) else None


def _module_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _module_level(node.body)
            for h in node.handlers:
                yield from _module_level(h.body)
            yield from _module_level(node.orelse)
            yield from _module_level(node.finalbody)
        elif isinstance(node, ast.With):
            yield from _module_level(node.body)


def parse_imports(source: str, module: str = "", *, is_package: bool = False, prefix: str = "torch") -> set[str]:
    """Modules under ``prefix`` a source imports at module level (relative imports resolved)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    out: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in _module_level(tree.body):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".") if package else []
                if node.level - 1 > len(base_parts):
                    continue
                base = ".".join(base_parts[: len(base_parts) - (node.level - 1)])
                root = f"{base}.{node.module}" if node.module else base
            else:
                root = node.module or ""
            # ``from torch.nn import functional`` may name a submodule: keep both candidates;
            # the graph keeps only names that exist.
            names = [root] + [f"{root}.{a.name}" for a in node.names if a.name != "*"]
        else:
            continue
        for name in names:
            if name == prefix or name.startswith(prefix + "."):
                out.add(name)
    return out


def _bindings(tree: ast.Module, prefix: str) -> dict[str, str]:
    """Local names bound to torch modules by module-level imports (``nn`` -> ``torch.nn``)."""
    out: dict[str, str] = {}
    for node in _module_level(tree.body):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == prefix or a.name.startswith(prefix + "."):
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and (
                node.module == prefix or node.module.startswith(prefix + ".")):
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def parse_usage(source: str, prefix: str = "torch") -> set[str]:
    """Attribute chains anywhere in a source rooted at a name bound to a torch module, as dotted names
    (``torch.nn.Conv2d(...)`` -> ``torch.nn.Conv2d``; with ``import torch.nn.utils.rnn as rnn_utils``,
    ``rnn_utils.pad_sequence`` -> ``torch.nn.utils.rnn.pad_sequence``)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    bound = _bindings(tree, prefix)
    if not bound:
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        chain: list[str] = []
        cur: ast.expr = node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if isinstance(cur, ast.Name) and cur.id in bound:
            parts = [bound[cur.id], *reversed(chain)]
            out.add(".".join(parts[: 1 + MAX_CHAIN]))
    return out


def _exports(tree: ast.Module, module: str, prefix: str) -> tuple[dict[str, str], list[str]]:
    """A package's re-exported names (name -> module it comes from) and the modules it star-imports."""
    names: dict[str, str] = {}
    stars: list[str] = []
    for node in _module_level(tree.body):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            parts = module.split(".")
            base = ".".join(parts[: len(parts) - (node.level - 1)]) if node.level - 1 <= len(parts) else ""
            src = f"{base}.{node.module}" if node.module else base
        else:
            src = node.module or ""
        if not (src == prefix or src.startswith(prefix + ".")):
            continue
        for a in node.names:
            if a.name == "*":
                stars.append(src)
            else:
                names[a.asname or a.name] = f"{src}.{a.name}"
    return names, stars


class ImportGraph:
    """Module -> imported modules, plus test file -> imported modules; walks reach with depth."""

    def __init__(self, modules: dict[str, set[str]], tests: dict[str, set[str]] | None = None) -> None:
        self.modules = modules
        self.tests = tests or {}
        self._reach: dict[frozenset[str], dict[str, int]] = {}  # files sharing imports share their reach
        self._edges: dict[str, tuple[str, ...]] = {}

    def _known(self, name: str) -> str | None:
        """The longest known module that ``name`` is or lies in (``torch.nn.functional.relu`` -> its module)."""
        while name:
            if name in self.modules:
                return name
            name = name.rpartition(".")[0]
        return None

    def reach(self, test_file: str) -> dict[str, int]:
        """Module -> import depth (1 = imported by the file itself), bounded by ``MAX_DEPTH``."""
        key = frozenset(self.tests.get(test_file, ()))
        cached = self._reach.get(key)
        if cached is not None:
            return cached
        depth: dict[str, int] = {}
        queue: deque[tuple[str, int]] = deque()
        for name in sorted(key):
            known = self._known(name) or name
            if known not in depth:
                depth[known] = 1
                queue.append((known, 1))
        while queue:
            mod, d = queue.popleft()
            if d >= MAX_DEPTH or mod == "torch":
                continue  # torch/__init__ imports everything: reaching it says nothing
            for known in self._resolved(mod):
                if known not in depth:
                    depth[known] = d + 1
                    queue.append((known, d + 1))
        self._reach[key] = depth
        return depth

    def _resolved(self, mod: str) -> tuple[str, ...]:
        edges = self._edges.get(mod)
        if edges is None:
            edges = tuple(sorted({k for k in (self._known(n) for n in self.modules.get(mod, ())) if k}))
            self._edges[mod] = edges
        return edges

    def to_json(self) -> dict:
        return {"version": GRAPH_VERSION, "modules": {k: sorted(v) for k, v in sorted(self.modules.items())},
                "tests": {k: sorted(v) for k, v in sorted(self.tests.items())}}

    @classmethod
    def from_json(cls, data: dict) -> ImportGraph:
        return cls({k: set(v) for k, v in data.get("modules", {}).items()},
                   {k: set(v) for k, v in data.get("tests", {}).items()})


def torch_module_graph(torch_dir: Path) -> dict[str, set[str]]:
    """Edges between the modules of an installed torch (``torch_dir`` is the ``torch`` package folder)."""
    root = torch_dir.parent
    modules: dict[str, set[str]] = {}
    exports: dict[str, tuple[dict[str, str], list[str]]] = {}
    for path in sorted(torch_dir.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        mod = module_of(rel)
        if mod is None:
            continue
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        modules[mod] = parse_imports(source, mod, is_package=path.name == "__init__.py")
        if path.name == "__init__.py":
            try:
                exports[mod] = _exports(ast.parse(source), mod, "torch")
            except (SyntaxError, ValueError):
                pass
    for mod in modules:
        modules[mod] = {m for m in modules[mod] if m != mod}
    # Re-exported names become nodes ``package.Name -> defining module``; star imports pass them on.
    resolved: dict[str, dict[str, str]] = {p: dict(names) for p, (names, _) in exports.items()}
    for _ in range(3):
        for p, (_, stars) in sorted(exports.items()):
            for src in stars:
                for name, target in resolved.get(src, {}).items():
                    resolved[p].setdefault(name, target)
    for p, names in resolved.items():
        for name, target in names.items():
            node = f"{p}.{name}"
            if node not in modules:
                known = target if target in modules else target.rpartition(".")[0]
                if known in modules and known != p:
                    modules[node] = {known}
    return modules


def checkout_imports(checkout: Path) -> dict[str, set[str]]:
    """``test/<file>.py`` -> the torch modules it imports at module level and the torch attribute chains it
    uses, for a checkout's ``test/``."""
    out: dict[str, set[str]] = {}
    test_dir = checkout / "test"
    for path in sorted(test_dir.rglob("*.py")):
        rel = path.relative_to(checkout).as_posix()
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        out[rel] = parse_imports(source) | parse_usage(source)
    return out


def graph_cache(data_dir: Path, torch_version: str) -> Path:
    """Where the installed torch's graph is cached (one file per graph version: versions never overwrite)."""
    return data_dir / "selector" / f"torch-imports-{torch_version}-v{GRAPH_VERSION}.json"


def cached_torch_graph(torch_dir: Path, cache: Path | None) -> dict[str, set[str]]:
    """The installed torch's module graph, cached as JSON (a full parse takes seconds)."""
    if cache is not None and cache.is_file():
        try:
            data = json.loads(cache.read_text(encoding="utf-8"))
            if data.get("version") == GRAPH_VERSION:
                return {k: set(v) for k, v in data["modules"].items()}
        except (OSError, ValueError, KeyError):
            pass
    modules = torch_module_graph(torch_dir)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cache, json.dumps({"version": GRAPH_VERSION,
                                             "modules": {k: sorted(v) for k, v in sorted(modules.items())}}))
    return modules
