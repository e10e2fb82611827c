"""Inventory of a PyTorch checkout by static AST parsing of ``test/**/test_*.py``.

No upstream code runs: classes, test methods, decorators and the module-level
``instantiate_device_type_tests`` / ``instantiate_parametrized_tests`` calls are read
from the syntax tree; ``@ops(...)`` is expanded against the installed torch's op table
(:mod:`selector.inventory.opdb`); ``@dtypes(...)`` against static dtype expressions.
Ids follow PyTorch's instantiation rules for a PrivateUse1 backend: class
``<Cls>PRIVATEUSE1`` and methods ``<test>[_<op>]_<device>[_<dtype>]``. Forms that
cannot be read statically (computed op lists, dynamic parametrize) are expanded
conservatively and flagged in ``params`` so reviewers can see the approximation.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crcr.contracts.inventory import Inventory, InventoryTest
from selector.fingerprint import combine, node_fingerprint
from selector.inventory.dtypes import dtype_variants, dtypes_of

MAX_TEST_FILE_BYTES = 4 * 1024 * 1024
# Decorators whose presence classification cares about (prefix match on the name).
DECORATOR_PREFIXES = (
    "only", "skip", "dtypes", "deviceCountAtLeast", "largeTensorTest", "slowTest", "expectedFailure",
    "onlyOn", "precisionOverride", "toleranceOverride", "serialTest", "requires", "unittest.skip",
    "ops", "parametrize", "tf32_on_and_off", "xfail", "serialTest",
)
FEATURE_MARKERS: dict[str, tuple[str, ...]] = {
    "distributed": ("torch.distributed", "dist.", "ProcessGroup", "init_process_group"),
    "sparse": ("to_sparse", "sparse_coo", "sparse_csr", "torch.sparse"),
    "quantized": ("quantize", "torch.ao.", "qint8", "quint8"),
    "compile": ("torch.compile", "torch._dynamo", "torch._inductor", "make_fx"),
    "cuda_api": ("torch.cuda.", "torch.backends.cudnn", "cuda_graph", "CUDAGraph"),
    "autograd": (".backward(", "gradcheck", "gradgradcheck", "torch.autograd"),
    "out": ("out=",),
    "jit": ("torch.jit.",),
}


@dataclass(frozen=True)
class Naming:
    """How a backend's instantiated tests are named."""

    device: str = "snpu"  # the renamed PrivateUse1 device, as it appears in method names
    class_suffix: str = "PRIVATEUSE1"
    device_key: str = "privateuse1"  # what only_for / except_for name


def decorator_name(dec: ast.expr) -> str:
    target = dec.func if isinstance(dec, ast.Call) else dec
    try:
        return ast.unparse(target)
    except Exception:  # pragma: no cover - unparse handles every expr
        return "?"


def decorator_text(dec: ast.expr, limit: int = 120) -> str:
    text = ast.unparse(dec)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _matters(name: str) -> bool:
    short = name.rsplit(".", 1)[-1]
    return short.startswith(DECORATOR_PREFIXES) or name.startswith(DECORATOR_PREFIXES)


def features_of(source: str, path: str) -> list[str]:
    found = {f for f, markers in FEATURE_MARKERS.items() if any(m in source for m in markers)}
    if "/distributed/" in path or path.startswith("test/distributed"):
        found.add("distributed")
    return sorted(found)


def _literal_strs(node: ast.AST | None) -> list[str] | None:
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        vals = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return vals if len(vals) == len(node.elts) else None
    return None


@dataclass
class _Instantiation:
    device_generic: bool
    only_for: list[str] | None = None
    except_for: list[str] | None = None


def _instantiations(tree: ast.Module, device_key: str) -> dict[str, _Instantiation]:
    """How each class is instantiated; a class instantiated several times counts if any includes the device."""
    found: dict[str, _Instantiation] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if not node.args or not isinstance(node.args[0], ast.Name):
            continue
        cls = node.args[0].id
        if node.func.id == "instantiate_device_type_tests":
            kw = {k.arg: k.value for k in node.keywords}
            new = _Instantiation(True, _literal_strs(kw.get("only_for")), _literal_strs(kw.get("except_for")))
            if cls not in found or not found[cls].device_generic or not _includes(found[cls], device_key):
                found[cls] = new
        elif node.func.id == "instantiate_parametrized_tests":
            found.setdefault(cls, _Instantiation(False))
    return found


def _includes(how: _Instantiation, device_key: str) -> bool:
    if how.only_for is not None and device_key not in how.only_for:
        return False
    return not (how.except_for is not None and device_key in how.except_for)


def _parametrize_suffixes(decs: list[ast.expr]) -> tuple[list[tuple[str, dict[str, str]]], bool]:
    """Name suffixes of ``@parametrize("x", [1, 2])`` stacks; (suffixes, exact)."""
    combos: list[tuple[str, dict[str, str]]] = [("", {})]
    exact = True
    for dec in decs:
        if not (isinstance(dec, ast.Call) and decorator_name(dec).rsplit(".", 1)[-1] == "parametrize"):
            continue
        if len(dec.args) < 2 or not isinstance(dec.args[0], ast.Constant) or not isinstance(dec.args[1], ast.List | ast.Tuple):
            exact = False
            continue
        names = [n.strip() for n in str(dec.args[0].value).split(",")]
        values: list[list[Any]] = []
        for elt in dec.args[1].elts:
            vals = list(elt.elts) if isinstance(elt, ast.Tuple) and len(names) > 1 else [elt]
            if not all(isinstance(v, ast.Constant) for v in vals) or len(vals) != len(names):
                exact = False
                values = []
                break
            values.append([v.value for v in vals])  # type: ignore[attr-defined]
        if not values:
            continue
        # upstream applies the innermost decorator first; the outermost suffix comes last
        new: list[tuple[str, dict[str, str]]] = []
        for value in values:
            part = "_".join(f"{n}_{_param_str(v)}" for n, v in zip(names, value, strict=True))
            for suffix, params in combos:
                new.append((f"_{part}{suffix}", {**params, **{n: str(v) for n, v in zip(names, value, strict=True)}}))
        combos = new
    return combos, exact


def _param_str(value: Any) -> str:
    return str(value).replace(".", "_").replace("-", "_").replace(" ", "_")


class _FileScanner:
    def __init__(self, rel: str, text: str, opdb: dict[str, Any], opinfo_fps: dict[str, str], naming: Naming) -> None:
        self.rel = rel
        self.text = text
        self.opdb = opdb
        self.opinfo_fps = opinfo_fps
        self.naming = naming
        self.tree = ast.parse(text)

    def _classes(self) -> dict[str, ast.ClassDef]:
        return {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}

    def _methods(self, cls: ast.ClassDef, classes: dict[str, ast.ClassDef], seen: set[str] | None = None) -> dict[str, ast.FunctionDef]:
        seen = seen or set()
        methods: dict[str, ast.FunctionDef] = {}
        for base in cls.bases:  # same-file bases contribute their tests
            if isinstance(base, ast.Name) and base.id in classes and base.id not in seen:
                methods.update(self._methods(classes[base.id], classes, seen | {cls.name}))
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                methods[node.name] = node
        return methods

    def tests(self) -> Iterator[InventoryTest]:
        classes = self._classes()
        inst = _instantiations(self.tree, self.naming.device_key)
        for name, cls in sorted(classes.items()):
            how = inst.get(name)
            if how is None and not any(
                isinstance(n, ast.FunctionDef) and n.name.startswith("test") for n in cls.body
            ):
                continue
            if how is not None and how.device_generic and not _includes(how, self.naming.device_key):
                continue
            if how is None and not _looks_like_testcase(cls, classes):
                continue
            for method in self._methods(cls, classes).values():
                yield from self._expand(name, method, how)

    def _expand(self, cls_name: str, fn: ast.FunctionDef, how: _Instantiation | None) -> Iterator[InventoryTest]:
        decs = list(fn.decorator_list)
        dec_names = [decorator_text(d) for d in decs if _matters(decorator_name(d))]
        source = ast.get_source_segment(self.text, fn) or ""
        src_fp = node_fingerprint(fn)
        feats = features_of(source, self.rel)
        param_suffixes, exact = _parametrize_suffixes(decs)
        base_params = {} if exact else {"approximate": "parametrize not expanded statically"}
        if how is None or not how.device_generic:
            for suffix, params in param_suffixes:
                method = fn.name + suffix
                yield self._test(cls_name, method, fn.name, None, None, None, {**base_params, **params},
                                 dec_names, feats, src_fp, None)
            return
        inst_cls = cls_name + self.naming.class_suffix
        dev = self.naming.device
        ops_dec = next((d for d in decs if isinstance(d, ast.Call) and decorator_name(d).rsplit(".", 1)[-1] == "ops"), None)
        dtype_dec = next((d for d in decs if isinstance(d, ast.Call) and decorator_name(d) == "dtypes"), None)
        if ops_dec is not None:
            for key, op, dtype, params in self._op_variants(ops_dec):
                for suffix, pparams in param_suffixes:
                    dsfx = f"_{dtype}" if dtype else ""
                    method = f"{fn.name}{suffix}_{op['formatted_name']}_{dev}{dsfx}"
                    yield self._test(inst_cls, method, fn.name, dev, dtype, key, {**base_params, **params, **pparams},
                                     dec_names, feats, src_fp, self.opinfo_fps.get(key))
            return
        variants: list[list[str]] | None = [[]]
        if dtype_dec is not None:
            variants = dtype_variants(dtype_dec) or None
        if variants is None:
            variants = [[]]
            base_params = {**base_params, "approximate": "dtypes not expanded statically"}
        for dts in variants:
            for suffix, pparams in param_suffixes:
                dsfx = "".join(f"_{d}" for d in dts)
                method = f"{fn.name}{suffix}_{dev}{dsfx}"
                yield self._test(inst_cls, method, fn.name, dev, "_".join(dts) or None, None,
                                 {**base_params, **pparams}, dec_names, feats, src_fp, None)

    def _op_variants(self, dec: ast.Call) -> Iterator[tuple[str, dict[str, Any], str | None, dict[str, str]]]:
        lists: dict[str, list[str]] = self.opdb.get("lists", {})
        ops: dict[str, dict[str, Any]] = self.opdb.get("ops", {})
        params: dict[str, str] = {}
        arg = dec.args[0] if dec.args else None
        keys: list[str]
        if isinstance(arg, ast.Name) and arg.id in lists:
            keys = lists[arg.id]
        elif isinstance(arg, ast.BinOp) and all(isinstance(s, ast.Name) and s.id in lists for s in (arg.left, arg.right)):
            keys = lists[arg.left.id] + lists[arg.right.id]  # type: ignore[union-attr]
        else:
            # A computed list (filter, comprehension): all of op_db, flagged as approximate.
            keys = lists.get("op_db", [])
            params["approximate"] = f"ops list {ast.unparse(arg) if arg else '?'} expanded as op_db"
        kw = {k.arg: k.value for k in dec.keywords}
        mode = "supported"
        fixed: list[str] | None = None
        if "dtypes" in kw:
            d = kw["dtypes"]
            if isinstance(d, ast.Attribute) and isinstance(d.value, ast.Name) and d.value.id == "OpDTypes":
                mode = d.attr
            else:
                fixed = dtypes_of(d)
        allowed = dtypes_of(kw["allowed_dtypes"]) if "allowed_dtypes" in kw else None
        for key in dict.fromkeys(keys):
            op = ops.get(key)
            if op is None:
                continue
            supported = list(op["dtypes"])
            if fixed is not None:
                chosen: list[str | None] = [d for d in fixed if d in supported]
            elif mode == "none":
                chosen = [None]
            elif mode in ("any_one", "any_common_cpu_cuda_one"):
                pick = "float32" if "float32" in supported else (supported[0] if supported else None)
                chosen = [pick] if pick else []
            elif mode == "unsupported":
                chosen = []  # needs the full dtype universe; rarely planned for a backend
            else:
                chosen = list(supported)
            if allowed is not None:
                chosen = [d for d in chosen if d is None or d in allowed]
            for dtype in chosen:
                yield key, op, dtype, dict(params)

    def _test(self, cls: str, method: str, template: str, device: str | None, dtype: str | None, op: str | None,
              params: dict[str, str], decorators: list[str], features: list[str], src_fp: str,
              op_fp: str | None) -> InventoryTest:
        return InventoryTest(
            id=f"{self.rel}::{cls}::{method}", file=self.rel, cls=cls, method=method, template=template,
            device=device, dtype=dtype, op=op, params=params, decorators=decorators, features=features,
            fingerprint=combine([src_fp, op_fp]), source_fingerprint=src_fp, opinfo_fingerprint=op_fp,
        )


def _looks_like_testcase(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> bool:
    for base in cls.bases:
        name = decorator_name(base)
        if name.endswith("TestCase") or name.startswith("unittest"):
            return True
        if isinstance(base, ast.Name) and base.id in classes and _looks_like_testcase(classes[base.id], classes):
            return True
    return False


def test_files(root: Path) -> list[Path]:
    test_dir = root / "test"
    if not test_dir.is_dir():
        return []
    return sorted(p for p in test_dir.rglob("test_*.py") if p.is_file() and not p.is_symlink())


def scan_checkout(root: Path, opdb: dict[str, Any], opinfo_fps: dict[str, str], naming: Naming | None = None,
                  progress: Callable[[int, int], None] | None = None) -> tuple[Inventory, list[str]]:
    """Inventory every test file under ``root/test``; returns the inventory and per-file problems."""
    naming = naming or Naming()
    problems: list[str] = []
    tests: list[InventoryTest] = []
    files = test_files(root)
    for i, path in enumerate(files):
        rel = path.relative_to(root).as_posix()
        try:
            if path.stat().st_size > MAX_TEST_FILE_BYTES:
                problems.append(f"{rel}: larger than {MAX_TEST_FILE_BYTES} bytes, not parsed")
                continue
            scanner = _FileScanner(rel, path.read_text(encoding="utf-8", errors="replace"), opdb, opinfo_fps, naming)
            tests.extend(scanner.tests())
        except (SyntaxError, ValueError, RecursionError) as exc:
            problems.append(f"{rel}: not parsed ({type(exc).__name__}: {exc})")
        if progress:
            progress(i + 1, len(files))
    seen: dict[str, InventoryTest] = {}
    for t in tests:
        seen.setdefault(t.id, t)
    inv = Inventory(source="pytorch-src", device=naming.device, torch_version=opdb.get("torch"),
                    tests=sorted(seen.values(), key=lambda t: t.id))
    return inv, problems
