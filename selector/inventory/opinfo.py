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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crcr.contracts.inventory import Inventory, InventoryTest
from selector.fingerprint import digest, normalised
from selector.inventory.opinfo_scope import UNKNOWN, DeviceScope, bindings, for_device, specialise
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
    kw_fps: dict[str, str] = field(default_factory=dict)  # per keyword argument (a ref inherits the ones it lacks)
    conditional: bool = False  # added under a module-level condition that is not static (a DSL being available)


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


def _is_db_name(name: str) -> bool:
    # The lists op_db / python_ref_db are built from, and the foreach lists (their own kind). Lists derived
    # from op_db at import time (nested.py's njt_op_db = [translate_opinfo(op) for op in op_db]) are not
    # definitions and are left out.
    return name in _OP_DB_LISTS or (name.startswith("foreach_") and name.endswith("op_db"))


def _module_statements(body: list[ast.stmt], consts: dict[str, object] | None = None,
                       conditional: bool = False) -> list[tuple[ast.stmt, bool]]:
    """Module-level statements with whether they run under a condition that is not static. An ``if`` whose
    test the module's constants decide keeps the branch taken; otherwise both branches are kept and marked
    conditional (entries added only when a DSL is available are definitions too, present or not at runtime)."""
    out: list[tuple[ast.stmt, bool]] = []
    for node in body:
        if isinstance(node, ast.If):
            taken = _static(node.test, consts or {})
            if taken is _MISSING:
                out += (_module_statements(node.body, consts, True) + _module_statements(node.orelse, consts, True))
            else:
                out += _module_statements(node.body if taken else node.orelse, consts, conditional)
        else:
            out.append((node, conditional))
    return out


def _feeders(stmts: list[tuple[ast.stmt, bool]]) -> dict[str, str]:
    """Dicts of lists folded into a database: ``for ops in dsl_ops_by_dsl.values(): op_db.extend(ops)``."""
    out: dict[str, str] = {}
    for node, _ in stmts:
        if (isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Attribute)
                and node.iter.func.attr == "values" and isinstance(node.iter.func.value, ast.Name)):
            for sub in ast.walk(node):
                if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "extend"
                        and isinstance(sub.func.value, ast.Name) and _is_db_name(sub.func.value.id)):
                    out[node.iter.func.value.id] = sub.func.value.id
    return out


def _list_owner(node: ast.AST, feeders: dict[str, str]) -> str | None:
    """The database a ``.append``/``.extend`` receiver adds to: ``op_db``, ``D.setdefault(k, [])`` or ``D[k]``
    of a feeder dict D."""
    if isinstance(node, ast.Name) and _is_db_name(node.id):
        return node.id
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setdefault"
            and isinstance(node.func.value, ast.Name)):
        return feeders.get(node.func.value.id)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return feeders.get(node.value.id)
    return None


def _db_statements(tree: ast.Module) -> list[tuple[str, ast.AST, bool]]:
    """Module-level expressions that put entries into a database list, in order: ``op_db = [...]``,
    ``op_db: list[OpInfo] = [...]``, ``op_db += [...]``, ``op_db.append(x)``, ``op_db.extend(xs)``, and
    appends to dicts of lists later folded into op_db; with whether the statement runs under a condition that
    is not static."""
    stmts = _module_statements(tree.body, _module_constants(tree))
    feeders = _feeders(stmts)
    found: list[tuple[str, ast.AST, bool]] = []
    for node, conditional in stmts:
        db: str | None = None
        value: ast.AST | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            db, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            db, value = node.target.id, node.value
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Attribute) and node.value.func.attr in ("append", "extend")
              and len(node.value.args) == 1):
            db = _list_owner(node.value.func.value, feeders)
            arg = node.value.args[0]
            value = ast.List(elts=[arg]) if node.value.func.attr == "append" else arg
        if db is not None and _is_db_name(db) and value is not None:
            if isinstance(value, ast.Attribute | ast.Name | ast.Subscript):
                continue  # op_db += opinfo.definitions.op_db: those files are scanned on their own
            found.append((db, value, conditional))
    return found


def _legacy_db_lists(tree: ast.Module) -> list[tuple[str, ast.AST, bool]]:
    """The scanner before issue 8's exact upgrade: module-level list literals named ``*op_db``."""
    found: list[tuple[str, ast.AST, bool]] = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign | ast.AugAssign) else None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id.endswith(_DB_SUFFIXES) and isinstance(value, ast.List):
            found.append((target.id, value, False))
    return found


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _code_of(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """A helper's normalised code without docstrings (a typo fixed in prod_numpy's docstring changes no test)."""
    import copy

    fn = copy.deepcopy(fn)
    for node in ast.walk(fn):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return normalised(fn)


def _module_constants(tree: ast.Module) -> dict[str, object]:
    """Module-level names bound to literals (tuples of reduction names and the like)."""
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
    return out


_MISSING = UNKNOWN


def _value(node: ast.AST | None, env: dict[str, object]) -> object:
    """A literal value of ``node`` under loop / parameter bindings, or ``_MISSING``."""
    if node is None:
        return _MISSING
    if isinstance(node, ast.Name):
        return env.get(node.id, _MISSING)
    if isinstance(node, ast.IfExp):
        test = _static(node.test, env)
        return _MISSING if test is _MISSING else _value(node.body if test else node.orelse, env)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue) and v.format_spec is None and v.conversion == -1:
                x = _value(v.value, env)
                if x is _MISSING:
                    return _MISSING
                parts.append(str(x))
            else:
                return _MISSING
        return "".join(parts)
    if isinstance(node, ast.BinOp):
        a, b = _value(node.left, env), _value(node.right, env)
        if a is _MISSING or b is _MISSING:
            return _MISSING
        try:
            if isinstance(node.op, ast.Add):
                return a + b  # type: ignore[operator]
            if isinstance(node.op, ast.Mod) and isinstance(a, str):
                return a % b
        except (TypeError, ValueError):
            return _MISSING
        return _MISSING
    if isinstance(node, ast.Tuple | ast.List):
        items = [_value(e, env) for e in node.elts]
        return _MISSING if any(i is _MISSING for i in items) else tuple(items)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and not node.keywords:
        args = [_value(a, env) for a in node.args]
        if all(isinstance(a, int) for a in args) and 1 <= len(args) <= 3:
            return tuple(range(*args))  # type: ignore[arg-type]
        return _MISSING
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _MISSING


def _bind(target: ast.AST, value: object, env: dict[str, object]) -> bool:
    if isinstance(target, ast.Name):
        env[target.id] = value
        return True
    if isinstance(target, ast.Tuple | ast.List) and isinstance(value, tuple | list) and len(value) == len(target.elts):
        return all(_bind(t, v, env) for t, v in zip(target.elts, value, strict=True))
    return False


@dataclass
class _Found:
    call: ast.Call  # the entry's constructor call
    env: dict[str, object]  # loop variables / helper parameters it was built under
    context: list[str]  # normalised call sites and helper bodies it was built through


@dataclass
class _Evaluator:
    """Evaluates what is static in a database list: literal entries, ``*(X for v in (...))``
    comprehensions over literal iterables, and calls to module-level helpers that return entries."""

    funcs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    consts: dict[str, object]
    helpers: _Helpers | None = None  # None: the entry-building helper's own code only (the legacy reading)
    unevaluated: list[tuple[int, str]] = field(default_factory=list)

    def expand(self, node: ast.AST, env: dict[str, object], context: list[str], depth: int = 0) -> list[_Found]:
        if depth > 8:
            self.unevaluated.append((getattr(node, "lineno", 0), "nested too deeply"))
            return []
        if isinstance(node, ast.Starred):
            if isinstance(node.value, ast.Attribute) and _is_db_name(node.value.attr):
                return []  # *fft.op_db in opinfo/definitions/__init__.py: that file is scanned on its own
            return self.expand(node.value, env, context, depth + 1)
        if isinstance(node, ast.List | ast.Tuple):
            return [f for e in node.elts for f in self.expand(e, env, context, depth + 1)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.expand(node.left, env, context, depth + 1) + self.expand(node.right, env, context, depth + 1)
        if isinstance(node, ast.GeneratorExp | ast.ListComp):
            return self._comprehension(node, env, context, depth)
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if isinstance(node.func, ast.Name) and name in self.funcs and not name.endswith("Info"):
                return self._helper(node, env, context, depth)
            if isinstance(node.func, ast.Name) and name in ("list", "tuple") and len(node.args) == 1:
                return self.expand(node.args[0], env, context, depth + 1)
            return [_Found(node, dict(env), context)]
        self.unevaluated.append((getattr(node, "lineno", 0), f"not static: {ast.unparse(node)[:80]}"))
        return []

    def _comprehension(self, node: ast.GeneratorExp | ast.ListComp, env: dict[str, object], context: list[str],
                       depth: int) -> list[_Found]:
        envs = [dict(env)]
        for gen in node.generators:
            nxt = []
            for e in envs:
                values = _value(gen.iter, {**self.consts, **e})
                if values is _MISSING or not isinstance(values, tuple | list):
                    self.unevaluated.append((node.lineno, f"iterable not static: {ast.unparse(gen.iter)[:80]}"))
                    return []
                for v in values:
                    e2 = dict(e)
                    if not _bind(gen.target, v, e2):
                        self.unevaluated.append((node.lineno, "loop target not static"))
                        return []
                    keep = True
                    for cond in gen.ifs:
                        c = _value(cond, {**self.consts, **e2}) if not isinstance(cond, ast.Compare) else _compare(cond, e2)
                        if c is _MISSING:
                            self.unevaluated.append((node.lineno, f"condition not static: {ast.unparse(cond)[:80]}"))
                            return []
                        keep = keep and bool(c)
                    if keep:
                        nxt.append(e2)
            envs = nxt
        # The loop's values are in each entry's bindings; the iterable itself is left out, so adding a
        # variant to ('mean', 'prod') does not change the existing variants. The element is not context either:
        # each entry's own call (read for its bindings) and any helper call it goes through are hashed as such,
        # so a keyword only the 'mean' binding makes differ is not a change to 'amax'.
        shape = [normalised(g.target) + "".join(normalised(c) for c in g.ifs) for g in node.generators]
        ctx = [*context, *shape]
        return [f for e in envs for f in self.expand(node.elt, e, ctx, depth + 1)]

    def _helper(self, call: ast.Call, env: dict[str, object], context: list[str], depth: int) -> list[_Found]:
        fn = self.funcs[_call_name(call)]
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        inner: dict[str, object] = {}
        defaults = fn.args.defaults
        for p, d in zip(params[len(params) - len(defaults):], defaults, strict=True):
            inner[p] = _value(d, {})
        for p, a in zip(params, call.args, strict=False):
            inner[p] = _value(a, env)
        for kw in call.keywords:
            if kw.arg:
                inner[kw.arg] = _value(kw.value, env)
        inner = {k: v for k, v in inner.items() if v is not _MISSING}
        returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return | ast.Yield | ast.YieldFrom) and n.value]
        if len(returns) != 1:
            self.unevaluated.append((call.lineno, f"helper {fn.name} does not return one expression"))
            return []
        body = specialise(fn, bindings(fn, call, env, _static), _static)
        ctx = [*context, normalised(call), _code_of(body)]
        if self.helpers is not None:  # and what the helper's body reaches
            ctx += [self.helpers.codes[n] for n in sorted(self.helpers.reach(set(self.helpers.named_in(body)) - {fn.name}))]
        return self.expand(returns[0].value, inner, ctx, depth + 1)  # type: ignore[arg-type]


def _compare(node: ast.Compare, env: dict[str, object]) -> object:
    left = _value(node.left, env)
    if left is _MISSING or len(node.ops) != 1:
        return _MISSING
    right = _value(node.comparators[0], env)
    if right is _MISSING:
        return _MISSING
    op = node.ops[0]
    try:
        if isinstance(op, ast.In):
            return left in right  # type: ignore[operator]
        if isinstance(op, ast.NotIn):
            return left not in right  # type: ignore[operator]
        if isinstance(op, ast.Eq):
            return left == right
        if isinstance(op, ast.NotEq):
            return left != right
    except TypeError:
        return _MISSING
    return _MISSING


def _static(node: ast.AST, env: dict[str, object]) -> object:
    """A static value (comparisons included), or UNKNOWN."""
    return _compare(node, env) if isinstance(node, ast.Compare) else _value(node, env)


@dataclass
class _Helpers:
    """Module-level helper functions of the OpInfo files, by name, with their normalised code."""

    funcs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    codes: dict[str, str]
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    _direct: dict[str, frozenset[str]] = field(default_factory=dict)
    _reach: dict[str, frozenset[str]] = field(default_factory=dict)

    def named_in(self, node: ast.AST) -> list[str]:
        return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in self.codes]

    def for_module(self, own: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]) -> _Helpers:
        """The helpers as one module's names resolve them: its own functions first (opinfo/definitions/_masked.py
        has its own ``sample_inputs_std_var``, not common_methods_invocations'), then the first definition."""
        mine = {n: fn for n, fn in own.items() if self.funcs.get(n) is not fn}
        if not mine:
            return self
        return _Helpers({**self.funcs, **mine}, {**self.codes, **{n: _code_of(fn) for n, fn in mine.items()}},
                        self.classes)

    def class_default(self, cls_name: str, arg: str) -> object:
        """The static default a class (through its bases) gives constructor argument ``arg``: a dataclass
        field (``gradcheck_nondet_tol: float = 0.0``) or an ``__init__`` parameter default; else UNKNOWN."""
        todo, seen = [cls_name], set()
        while todo:
            cls = self.classes.get(todo.pop(0))
            if cls is None or cls.name in seen:
                continue
            seen.add(cls.name)
            for node in cls.body:
                if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == arg
                        and node.value is not None):
                    return _value(node.value, {})
                if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                    found = bindings(node, None, {}, _static)
                    if arg in found:
                        return found[arg]
            todo += [b.id for b in cls.bases if isinstance(b, ast.Name)]
        return _MISSING

    def canonical(self, call: ast.Call, env: dict[str, object]) -> ast.Call:
        """``call`` as the entry it builds: a keyword whose ``x if c else y`` the bindings decide holds the branch
        taken, and a keyword whose static value is the class's default is left out (passing the default is
        not passing it: ``gradcheck_nondet_tol=... if reduction_type in ('mean', 'prod') else 0.0`` changes
        nothing for amin/amax)."""
        import copy

        out = copy.copy(call)
        out.keywords = []
        for kw in call.keywords:
            value = kw.value
            while isinstance(value, ast.IfExp) and (taken := _static(value.test, env)) is not _MISSING:
                value = value.body if taken else value.orelse
            static = _value(value, env)
            if kw.arg and static is not _MISSING:
                default = self.class_default(_call_name(call), kw.arg)
                if default is not _MISSING and type(default) is type(static) and default == static:
                    continue
            out.keywords.append(ast.keyword(arg=kw.arg, value=value))
        return out

    def reach(self, names: set[str]) -> set[str]:
        """The helpers ``names`` name in their bodies, transitively (a sample-inputs function's shared generator
        is part of what an entry does)."""
        out: set[str] = set()
        todo = list(names)
        while todo:
            n = todo.pop()
            if n not in self._direct:
                self._direct[n] = frozenset(self.named_in(self.funcs[n]))
            for m in self._direct[n] - out:
                out.add(m)
                todo.append(m)
        return out

    def specialised(self, name: str, call: ast.Call | None, env: dict[str, object]) -> ast.FunctionDef | ast.AsyncFunctionDef:
        fn = self.funcs[name]
        return specialise(fn, bindings(fn, call, env, _static), _static)

    def installed_by_class(self, call: ast.Call) -> set[str]:
        """Helpers an entry's class installs as its ``*_func`` when the call does not pass them: defaults of its
        ``__init__`` (``UnaryUfuncInfo(sample_inputs_func=sample_inputs_elementwise_unary)``) and helpers its
        ``__init__`` passes as a ``*_func`` keyword (``error_inputs_func=make_error_inputs_elementwise_binary(...)``),
        through its base classes."""
        passed = {kw.arg for kw in call.keywords}
        out: set[str] = set()
        todo, seen = [_call_name(call)], set()
        while todo:
            cls = self.classes.get(todo.pop())
            if cls is None or cls.name in seen:
                continue
            seen.add(cls.name)
            todo += [b.id for b in cls.bases if isinstance(b, ast.Name)]
            init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
            if init is None:
                continue
            params = init.args.posonlyargs + init.args.args
            for a, d in [*zip(params[len(params) - len(init.args.defaults):], init.args.defaults, strict=True),
                         *zip(init.args.kwonlyargs, init.args.kw_defaults, strict=True)]:
                if isinstance(d, ast.Name) and d.id in self.codes and a.arg not in passed:
                    out.add(d.id)
            for kw in (k for c in ast.walk(init) if isinstance(c, ast.Call) for k in c.keywords):
                if (kw.arg or "").endswith("_func"):
                    out |= {n for n in self.named_in(kw.value) if not isinstance(kw.value, ast.Name)}
        return out

    def codes_for(self, node: ast.AST, env: dict[str, object]) -> list[str]:
        """The code of every helper ``node`` names: one it calls, specialised for that call's static arguments
        (the branches the call does not take are left out); one it only names, whole; and, whole, every helper
        those reach."""
        calls = [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id in self.codes]
        named = self.named_in(node)
        codes: set[str] = set()
        reached: set[str] = set()
        for name in set(named):
            its_calls = [c for c in calls if c.func.id == name]  # type: ignore[attr-defined]
            for c in its_calls:
                fn = self.specialised(name, c, env)
                codes.add(_code_of(fn))
                # reach() gives what its arguments name, not themselves: the helpers the specialised body names
                # count too (reference_masked_std_var(np.std) builds its ref with reference_reduction_numpy)
                direct = set(self.named_in(fn)) - {name}
                reached |= direct | self.reach(direct)
            if named.count(name) > len(its_calls):
                codes.add(self.codes[name])
                reached |= self.reach({name}) - {name}
        if isinstance(node, ast.Call) and _call_name(node).endswith("Info"):
            installed = self.installed_by_class(node) - set(named)
            codes |= {self.codes[n] for n in installed}
            reached |= self.reach(installed)
        return sorted(codes) + [self.codes[n] for n in sorted(reached - set(named))]


def _found_name(found: _Found) -> tuple[str | None, str]:
    call = found.call
    name = _value(call.args[0], found.env) if call.args else _MISSING
    variant: object = ""
    inherited: object = ""
    for kw in call.keywords:
        if kw.arg == "name" and name is _MISSING:
            name = _value(kw.value, found.env)
        elif kw.arg == "variant_test_name":
            variant = _value(kw.value, found.env)
        elif kw.arg == "torch_opinfo_variant_name":
            inherited = _value(kw.value, found.env)
    if variant == "" and inherited:
        variant = inherited  # a PythonRefInfo takes the variant of the op_db entry it refers to
    if not isinstance(name, str) or not isinstance(variant, str):
        return None, ""
    return name, variant


def _json(env: dict[str, object]) -> str:
    import json

    return json.dumps({k: repr(v) for k, v in sorted(env.items())}, sort_keys=True)


@dataclass
class ScanResult:
    entries: dict[str, OpInfoEntry]
    unevaluated: list[str]  # "file:line: why", entries whose name or existence is not static


def scan_all(sources: TorchSources, with_source: bool = False, legacy: bool = False,
             device: str | None = None) -> ScanResult:
    """Every statically evaluable OpInfo entry of one torch version, by key, and what was not evaluable.

    ``device``: fingerprint only what can reach that device type's tests (dtype sets and DecorateInfo of
    other device types left out; see opinfo_scope); None: every device's. ``legacy`` keeps the scanner as
    it was before issue 8's exact upgrade (literal list elements only, no helpers, comprehensions or
    appends, every device), for the benchmark's before/after figure.
    """
    scope = DeviceScope.of(device) if device and not legacy else None
    parsed: list[tuple[str, ast.Module, str]] = []
    funcs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    own: dict[str, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    classes: dict[str, ast.ClassDef] = {}
    for rel in sources.opinfo_files():
        text = sources.read(rel)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for_device(tree, scope)
        parsed.append((rel, tree, text))
        own[rel] = _functions(tree)
        for name, fn in own[rel].items():
            funcs.setdefault(name, fn)
        for name, cls in _classes(tree).items():
            classes.setdefault(name, cls)
    if not legacy:
        for rel in sources.helper_files():
            try:
                helper_tree = for_device(ast.parse(sources.read(rel)), scope)
                for name, fn in _functions(helper_tree).items():
                    funcs.setdefault(name, fn)
                for name, cls in _classes(helper_tree).items():  # type: ignore[arg-type]
                    classes.setdefault(name, cls)
            except SyntaxError:
                continue
    helpers = {name: normalised(fn) if legacy else _code_of(fn) for name, fn in funcs.items()}
    known = _Helpers(funcs, helpers, classes)
    entries: dict[str, OpInfoEntry] = {}
    refs: dict[str, tuple[str, str, set[str]]] = {}
    unevaluated: list[str] = []
    for rel, tree, text in parsed:
        mod = known if legacy else known.for_module(own[rel])
        ev = _Evaluator(mod.funcs, _module_constants(tree), None if legacy else mod)
        for db, value, conditional in (_legacy_db_lists(tree) if legacy else _db_statements(tree)):
            if legacy:
                found = [_Found(e, {}, []) for e in value.elts if isinstance(e, ast.Call)]  # type: ignore[attr-defined]
            else:
                found = ev.expand(value, {}, [])
            for f in found:
                name, variant = _found_name(f)
                if not name:
                    if not legacy:
                        unevaluated.append(f"{INTERNAL}/{rel}:{f.call.lineno}: entry name not static")
                    continue
                if db not in _OP_DB_LISTS and db.startswith("foreach_") and not name.startswith("_foreach_"):
                    name = f"_foreach_{name}"  # as ForeachFuncInfo names itself
                key = f"{name}.{variant}" if variant else name
                used = sorted({n.id for n in ast.walk(f.call) if isinstance(n, ast.Name) and n.id in helpers})
                call = f.call if legacy else mod.canonical(f.call, f.env)
                codes = [helpers[h] for h in used] if legacy else mod.codes_for(call, f.env)
                fp = digest(normalised(call), _json(f.env), *f.context, *codes)
                entry = OpInfoEntry(key, name, variant, db, f"{INTERNAL}/{rel}", f.call.lineno, fp, used,
                                    conditional=conditional)
                if not legacy:
                    env_ctx = (_json(f.env), *f.context)
                    entry.kw_fps = {kw.arg or "**": digest(normalised(kw.value), *env_ctx,
                                                           *mod.codes_for(kw.value, f.env))
                                    for kw in call.keywords}
                if with_source:
                    entry.source = ast.get_source_segment(text, f.call) or ""
                # An op_db entry beats any other list's entry of the same key; within a kind the first
                # definition wins, as in op_db's own order (later duplicates are rare).
                held = entries.get(key)
                if held is None or (db in _OP_DB_LISTS and held.db not in _OP_DB_LISTS):
                    entries[key] = entry
                    ref = {kw.arg: _value(kw.value, f.env) for kw in f.call.keywords
                           if kw.arg in ("torch_opinfo_name", "torch_opinfo_variant_name")}
                    if isinstance(ref.get("torch_opinfo_name"), str):
                        variant_ref = ref.get("torch_opinfo_variant_name", "")
                        refs[key] = (str(ref["torch_opinfo_name"]), variant_ref if isinstance(variant_ref, str) else "",
                                     {kw.arg for kw in f.call.keywords if kw.arg})
        unevaluated += [f"{INTERNAL}/{rel}:{line}: {why}" for line, why in ev.unevaluated]
    if not legacy:
        _inherit_torch_opinfo(entries, refs, _NOT_INHERITED | _set_by_inherit(funcs.get("_inherit_constructor_args")))
    return ScanResult(entries, sorted(set(unevaluated)))


# What opinfo/refs.py's _inherit_constructor_args does not take from the op_db entry (it drops skips and
# decorators, and sets the name, op and variants itself).
_NOT_INHERITED = frozenset({"skips", "decorators", "name", "op", "aliases", "method_variant", "inplace_variant",
                            "supports_scripting", "variant_test_name"})


def _set_by_inherit(fn: ast.FunctionDef | ast.AsyncFunctionDef | None) -> frozenset[str]:
    """Arguments opinfo/refs.py's ``_inherit_constructor_args`` drops or sets itself, read from that version: the
    keys of its dict literals, of ``kwargs["x"] = ...`` / ``del kwargs["x"]`` and of ``"x" in kwargs`` (2.12
    sets ``supports_autograd``, ``supports_forward_ad`` ... to False for every reference)."""
    if fn is None:
        return frozenset()
    keys: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Dict):
            keys |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                keys.add(node.slice.value)
        elif (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)
              and isinstance(node.ops[0], ast.In)):
            keys.add(node.left.value)
    return frozenset(keys - {"kwargs"})


def _inherit_torch_opinfo(entries: dict[str, OpInfoEntry], refs: dict[str, tuple[str, str, set[str]]],
                          not_inherited: frozenset[str] = _NOT_INHERITED) -> None:
    """A PythonRefInfo copies the constructor arguments of the op_db entry it names (torch_opinfo_name /
    torch_opinfo_variant_name) that it does not set itself, so a change to one of those arguments is a
    change to the reference entry too; a change to an argument the ref overrides is not."""
    for key, (name, variant, own) in refs.items():
        target = entries.get(f"{name}.{variant}" if variant else name)
        if key in entries and target is not None:
            inherited = [f"{k}={v}" for k, v in sorted(target.kw_fps.items()) if k not in own and k not in not_inherited]
            entries[key].fingerprint = digest(entries[key].fingerprint, *inherited)


def scan(sources: TorchSources, with_source: bool = False) -> dict[str, OpInfoEntry]:
    """Every statically evaluable OpInfo entry of one torch version, by key."""
    return scan_all(sources, with_source).entries


def opinfo_inventory(sources: TorchSources, runtime_keys: set[str] | None = None,
                     device: str | None = None,
                     unmet: set[str] | Callable[[], set[str]] | None = None) -> Inventory:
    """An OpInfo-granularity inventory: one pseudo-test per OpInfo entry.

    ``runtime_keys``: the keys the imported module's databases hold (for the installed torch). An entry
    the module holds but the static evaluation did not see gets a "not evaluated" fingerprint of its
    version (so it always counts as changed) and an error record; so does every database expression
    whose entries could not be evaluated statically. Nothing is dropped silently. An entry found only
    under a module-level condition that is not static (``if "cutedsl" in dsl_ops_by_dsl:``) is left out
    when the imported module's databases do not hold it, or its key is in ``unmet`` (``unmet_conditions``:
    this environment does not meet its condition, read from the installed torch; any version's entry of that
    key is left out, so an upgrade between versions that both define it does not call it added; a callable is
    called only when the version has such entries). ``device``: fingerprints of what applies to that device type's tests only (recorded in the inventory's
    ``device``).
    """
    from crcr.contracts.inventory import InventoryError

    result = scan_all(sources, device=device)
    if callable(unmet):
        unmet = unmet() if any(e.conditional for e in result.entries.values()) else set()
    tests = [
        InventoryTest(id=f"{e.file}::{e.db}::{e.key}", file=e.file, cls=e.db, method=e.key, op=e.key,
                      fingerprint=e.fingerprint, opinfo_fingerprint=e.fingerprint)
        for e in result.entries.values()
        if not (e.conditional and (e.key in (unmet or set()) or (runtime_keys and e.key not in runtime_keys)))
    ]
    errors = [InventoryError(file=u.split(":", 1)[0], error_class="NotEvaluated", torch_version=sources.version,
                             message=u.split(":", 1)[1].strip()[:300]) for u in result.unevaluated]
    for key in sorted((runtime_keys or set()) - set(result.entries)):
        fp = digest("not evaluated statically", sources.version or "")
        file = f"{INTERNAL}/common_methods_invocations.py"
        tests.append(InventoryTest(id=f"{file}::runtime::{key}", file=file, cls="runtime", method=key, op=key,
                                   fingerprint=fp, opinfo_fingerprint=fp))
        errors.append(InventoryError(file=file, error_class="NotEvaluated", missing=key, torch_version=sources.version,
                                     message=f"{key}: in the imported op_db, not found statically"))
    inv = Inventory(source="opinfo", granularity="opinfo", torch_version=sources.version, device=device, tests=tests,
                    errors=errors)
    inv.tests.sort(key=lambda t: t.id)
    return inv


def installed_keys(data_dir: Path) -> set[str]:
    """Keys of the installed torch's op_db, python_ref_db and foreach databases, read from the imported module."""
    from selector.inventory.opdb import load_opdb

    lists = load_opdb(data_dir)["lists"]
    keys: set[str] = set(lists.get("op_db", [])) | set(lists.get("python_ref_db", []))
    for name, members in lists.items():
        if name.startswith("foreach_") and name.endswith("op_db"):
            keys |= {m if m.startswith("_foreach_") else f"_foreach_{m}" for m in members}
    return keys


def _cached_json(cache: Path, build: Callable[[], object]) -> object:
    """The JSON in ``cache``, or ``build()`` written there (a scan takes seconds)."""
    import json

    from crcr.fileio import atomic_write_text

    if cache.is_file():
        try:
            return json.loads(cache.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass  # rebuilt below
    value = build()
    atomic_write_text(cache, json.dumps(value, sort_keys=True))
    return value


def unmet_conditions(data_dir: Path) -> set[str]:
    """Keys of the installed torch's entries that are defined under a runtime condition (a DSL being available)
    and that its imported databases do not hold: the condition is not met in this environment. Cached per
    torch version in the data dir; empty when the installed op_db cannot be read."""
    from selector.errors import SelectorInputError
    from selector.inventory.sources import installed_torch_dir

    try:
        sources = TorchSources(installed_torch_dir())
        keys = installed_keys(data_dir)
    except SelectorInputError:
        return set()
    cache = data_dir / "selector" / f"opinfo-unmet-v1-{sources.version or 'unknown'}.json"
    return set(_cached_json(cache, lambda: sorted(
        k for k, e in scan_all(sources).entries.items() if e.conditional and k not in keys)))  # type: ignore[arg-type]


def opinfo_source(sources: TorchSources, op: str) -> OpInfoEntry | None:
    """The OpInfo entry for ``op`` (``name`` or ``name.variant``) with its source text."""
    return scan(sources, with_source=True).get(op)


def cached_fingerprints(sources: TorchSources, data_dir: Path) -> dict[str, str]:
    """OpInfo fingerprints by key for one torch version, cached in the data dir (a scan takes seconds)."""
    cache = data_dir / "selector" / f"opinfo-fps-v3-{sources.version or 'unknown'}.json"
    return dict(_cached_json(cache, lambda: {k: e.fingerprint for k, e in scan(sources).items()}))  # type: ignore[call-overload]
