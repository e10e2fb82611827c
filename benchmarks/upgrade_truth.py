"""Ground truth for benchmarks/upgrade_exactness.py: one torch version's OpInfo entries as they are at runtime.

    python benchmarks/upgrade_truth.py [--device D] [TORCH_ROOT]   # prints {key: {attribute: digest}} as JSON

Runs in a throwaway child process. Without TORCH_ROOT it imports the installed torch's
``common_methods_invocations``. With TORCH_ROOT (a directory holding a wheel's extracted ``torch/testing/_internal``),
it imports that version's ``torch.testing._internal`` on top of the installed torch (importing the
2.14.1 wheel whole is impossible here: it is a CUDA build needing libcuda, cuDNN, cuBLAS, NCCL ...): names the installed torch
lacks are replaced by named placeholders and listed on stderr, so the entries still build.

Each entry (op_db, python_ref_db and the foreach lists, keyed name[.variant_test_name] as op_db keys
them; foreach entries as _foreach_<name>) is fingerprinted from what it is: every attribute of the
object, functions by their normalised source and that of every function of the OpInfo definition modules
(common_methods_invocations, opinfo/*) they reach by global name or a function-local import, transitively, DecorateInfo by its decorators, class, test,
device type and dtypes, dtype sets sorted. This shares no code with crcr's static scanner.

v5 (branch i8-upgrade29): a lambda is its whole expression read from the parsed file (``inspect.getsource``
stops at the end of the lambda's first line), and a closure is described with the values its cells hold
(``unittest.skip(reason)``'s decorator holds the reason; ``reference_masked_std_var(np.std)`` returns a closure
over ``reference_reduction_numpy``'s wrapper).

With --device D, only what D's tests can see is fingerprinted, read from the runtime objects the
way torch's harness reads them: the per-device dtype attributes (``dtypesIf``, ``backward_dtypesIf*``)
are replaced by what ``op.supported_dtypes(D)`` and ``op.supported_backward_dtypes(D)`` return (a name
torch does not know is registered as the PrivateUse1 backend first, as snpu is), and a ``DecorateInfo``
whose ``device_type`` is set to another device type (neither D nor ``privateuse1`` for a PrivateUse1
backend; for cuda/rocm/xpu also ``cuda``) is left out wherever it appears.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import json
import re
import sys
import textwrap
import types
from typing import Any


class Missing:
    """Stands for a name the installed torch lacks (only when importing another version's sources)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"<missing {self._name}>"

    def __call__(self, *a: Any, **k: Any) -> Missing:
        return Missing(self._name + "()")

    def __getattr__(self, n: str) -> Missing:
        if n.startswith("__"):
            raise AttributeError(n)
        return Missing(f"{self._name}.{n}")

    def __hash__(self) -> int:
        return hash(self._name)

    def __eq__(self, o: object) -> bool:
        return isinstance(o, Missing) and o._name == self._name


def _import_other(root: str) -> tuple[Any, list[str]]:
    import torch
    import torch._dynamo
    import torch._inductor
    import torch.testing._internal as ti
    import torch.testing._internal.common_methods_invocations  # noqa: F401  the installed deps, loaded first

    patched: list[str] = []
    attr = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")
    name_from = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
    ti.__path__[:] = [f"{root}/torch/testing/_internal"]
    for _ in range(200):
        for m in [m for m in list(sys.modules) if m.startswith("torch.testing._internal.")]:
            del sys.modules[m]
        try:
            import torch.testing._internal.common_dtype as cd

            orig = cd._validate_dtypes
            cd._validate_dtypes = lambda *ds, _o=orig: _o(*[d for d in ds if not isinstance(d, Missing)]) + tuple(
                d for d in ds if isinstance(d, Missing))
            import torch.testing._internal.common_methods_invocations as cmi

            return cmi, patched
        except (AttributeError, ImportError) as exc:
            m, m2 = attr.search(str(exc)), name_from.search(str(exc))
            if m:
                mod, name = m.group(1), m.group(2)
            elif m2:
                name, mod = m2.group(1), m2.group(2)
            else:
                raise
            setattr(importlib.import_module(mod), name, Missing(f"{mod}.{name}"))
            patched.append(f"{mod}.{name}")
    raise RuntimeError("too many missing names")


_ADDR = re.compile(r" at 0x[0-9a-f]+")


_MODULE_TREES: dict[str, ast.Module] = {}


def _lambda_source(fn: Any) -> str | None:
    """A lambda's whole expression: ``inspect.getsource`` stops at the end of the lambda's first line, so a
    lambda continued on the next lines (prelu's ``ref=lambda x, weight:`` in 2.9-2.10) lost its body. Read
    from the parsed file: the lambda nodes starting on the code object's first line with its parameters."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_name != "<lambda>":
        return None
    try:
        path = inspect.getsourcefile(fn)
        if path not in _MODULE_TREES:
            _MODULE_TREES[path] = ast.parse("".join(inspect.findsource(fn)[0]))
    except (OSError, TypeError, SyntaxError):
        return None
    params = list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
    nodes = [n for n in ast.walk(_MODULE_TREES[path]) if isinstance(n, ast.Lambda) and n.lineno == code.co_firstlineno]
    exact = [n for n in nodes if [a.arg for a in n.args.posonlyargs + n.args.args + n.args.kwonlyargs] == params]
    return " ".join(ast.dump(n) for n in exact or nodes) or None


def _source(fn: Any) -> str:
    whole = _lambda_source(fn)
    if whole is not None:
        return whole
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return f"<nosource {getattr(fn, '__qualname__', repr(fn))}>"
    try:
        tree = ast.parse(src)
    except SyntaxError:  # a lambda in the middle of a call: its lines, whitespace-normalised
        return " ".join(src.split())
    for node in ast.walk(tree):  # docstrings are not behaviour
        body = getattr(node, "body", None)
        if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


_BUILTIN = {"cpu", "cuda", "rocm", "hip", "xpu", "mps", "hpu", "meta", "mtia", "xla", "lazy", "ipu", "ve", "fpga", "maia",
            "vulkan", "ort", "mkldnn", "opengl", "opencl", "ideep"}
_DECORATE_TYPES: set[str] | None = None  # DecorateInfo device types that apply (None: every one)


def _applies(x: Any) -> bool:
    from torch.testing._internal.opinfo.core import DecorateInfo

    if _DECORATE_TYPES is None or not isinstance(x, DecorateInfo) or x.device_type is None:
        return True
    types_ = x.device_type if isinstance(x.device_type, list | tuple) else [x.device_type]  # 2.14: a sequence
    return any(str(t).lower() in _DECORATE_TYPES for t in types_)


_DEFINITION_MODULES = ("torch.testing._internal.common_methods_invocations", "torch.testing._internal.opinfo")
_CALLEES: dict[Any, list[Any]] = {}


def _names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def _local_imports(code: types.CodeType) -> list[tuple[str, str]]:
    """(module, name) of every ``from module import name`` inside a function (_masked.py's
    ``sample_inputs_masked_std_var`` imports common_methods_invocations' ``sample_inputs_std_var`` locally)."""
    import dis

    out: list[tuple[str, str]] = []
    module = ""
    for ins in dis.get_instructions(code):
        if ins.opname == "IMPORT_NAME":
            module = str(ins.argval)
        elif ins.opname == "IMPORT_FROM" and module:
            out.append((module, str(ins.argval)))
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += _local_imports(c)
    return out


def _callees(fn: Any) -> list[Any]:
    """Module-level functions of the OpInfo definition modules that ``fn`` reaches by global name, transitively
    (a sample-inputs function's shared generator is part of what the entry does), in a stable order."""
    if fn in _CALLEES:
        return _CALLEES[fn]
    _CALLEES[fn] = []  # cycles
    seen: dict[str, Any] = {}
    todo = [fn]
    while todo:
        f = inspect.unwrap(todo.pop())  # a decorated sample-inputs generator: the function it wraps
        code, glb = getattr(f, "__code__", None), getattr(f, "__globals__", {})
        if code is None:
            continue
        found = [glb.get(n) for n in _names(code)]
        found += [getattr(sys.modules.get(m), n, None) for m, n in _local_imports(code) if m.startswith(_DEFINITION_MODULES)]
        for g in found:
            g = inspect.unwrap(g) if callable(g) else g
            if (isinstance(g, types.FunctionType) and g is not fn and str(g.__module__).startswith(_DEFINITION_MODULES)
                    and f"{g.__module__}.{g.__qualname__}" not in seen):
                seen[f"{g.__module__}.{g.__qualname__}"] = g
                todo.append(g)
    _CALLEES[fn] = [seen[k] for k in sorted(seen)]
    return _CALLEES[fn]


def _cell(c: Any) -> Any:
    try:
        return c.cell_contents
    except ValueError:  # an empty cell
        return "<empty cell>"


def describe(x: Any, depth: int = 0) -> Any:
    import torch
    from torch.testing._internal.opinfo.core import OpInfo

    if depth > 6:
        return "<deep>"
    if x is None or isinstance(x, bool | int | float | str):
        return x
    if isinstance(x, torch.dtype):
        return str(x)
    if isinstance(x, Missing):
        return repr(x)
    if isinstance(x, OpInfo):
        return f"<OpInfo {x.name}.{x.variant_test_name}>"  # a reference to another entry, by key
    if isinstance(x, set | frozenset):
        return sorted(str(describe(v, depth + 1)) for v in x)
    if isinstance(x, list | tuple):
        return [type(x).__name__, *[describe(v, depth + 1) for v in x if _applies(v)]]
    if isinstance(x, dict):
        return {str(describe(k, depth + 1)): describe(v, depth + 1) for k, v in x.items()}
    if isinstance(x, functools.partial):
        return ["partial", describe(x.func, depth + 1), describe(x.args, depth + 1), describe(x.keywords, depth + 1)]
    if isinstance(x, types.FunctionType | types.MethodType):
        fn = getattr(x, "__func__", x)
        inner = getattr(fn, "__wrapped__", None)
        if inner is not None:  # a decorator's wrapper (torch.no_grad() on a partial of a sample-inputs generator)
            # a wrapper the OpInfo modules define does work of its own (opinfo/utils.py's
            # reference_reduction_numpy wraps np.amax with functools.wraps and checks the mask): its code counts
            # (functools.wraps copies the wrapped function's __module__: the wrapper's globals say where it is)
            own = ([_source(fn.__code__), *[_source(f) for f in _callees(fn)]]  # getsource(fn) would unwrap it
                   if str(getattr(fn, "__globals__", {}).get("__name__", "")).startswith(_DEFINITION_MODULES) else [])
            return ["wrapped", getattr(fn, "__qualname__", ""), *own, describe(inner, depth + 1)]
        # the values a closure holds are part of what it does (unittest.skip(reason)'s decorator holds the reason)
        cells = [describe(_cell(c), depth + 1) for c in (getattr(fn, "__closure__", None) or ())]
        return ["fn", getattr(x, "__qualname__", ""), _source(x), *[_source(f) for f in _callees(fn)],
                *([["closure", cells]] if cells else [])]
    if isinstance(x, types.BuiltinFunctionType | types.ModuleType) or (callable(x) and not hasattr(x, "__dict__")):
        return _ADDR.sub("", repr(x))
    slots = [n for c in type(x).__mro__ for n in getattr(c, "__slots__", ())]
    if slots:  # DecorateInfo: decorators, cls_name, test_name, device_type, dtypes, active_if
        return [type(x).__name__, {n: describe(getattr(x, n, None), depth + 1) for n in sorted(set(slots))}]
    if hasattr(x, "__dict__"):
        return [type(x).__name__, {k: describe(v, depth + 1) for k, v in sorted(vars(x).items())}]
    return _ADDR.sub("", repr(x))


def _device_arg(device: str | None) -> str | None:
    """What to pass torch's OpInfo methods for ``device``; sets the DecorateInfo device types that apply."""
    global _DECORATE_TYPES
    if device is None:
        return None
    import torch

    d = device.lower()
    if d in _BUILTIN:
        _DECORATE_TYPES = {d, "cuda"} if d in ("cuda", "rocm", "hip", "xpu") else {d}
        return d
    torch.utils.rename_privateuse1_backend(d)  # as the backend itself does; OpInfo resolves privateuse1 to it
    _DECORATE_TYPES = {d, "privateuse1"}
    return "privateuse1"


def _device_view(op: Any, attrs: dict[str, Any], arg: str) -> None:
    """Per-device dtype attributes replaced by what the harness asks the entry for on this device."""
    for k in [k for k in attrs if k == "dtypesIf" or k.startswith("backward_dtypesIf") or k.startswith("dtypesIf")]:
        del attrs[k]
    attrs["supported_dtypes(device)"] = describe(set(op.supported_dtypes(arg)))
    attrs["supported_backward_dtypes(device)"] = describe(set(op.supported_backward_dtypes(arg)))


def _defaults(op: Any) -> dict[str, Any]:
    """The described default of each dataclass field of the entry's class."""
    import dataclasses

    out: dict[str, Any] = {}
    for f in dataclasses.fields(op):
        if f.default is not dataclasses.MISSING:
            out[f.name] = describe(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = describe(f.default_factory())
    return out


def dump(root: str | None, device: str | None = None) -> dict[str, Any]:
    arg = _device_arg(device)
    if root:
        cmi, patched = _import_other(root)
    else:
        import torch.testing._internal.common_methods_invocations as cmi

        patched = []
    lists = {"op_db": cmi.op_db, "python_ref_db": cmi.python_ref_db}
    lists.update({n: getattr(cmi, n) for n in dir(cmi) if n.startswith("foreach_") and n.endswith("op_db")})
    out: dict[str, dict[str, str]] = {}
    for list_name in sorted(lists):
        for op in lists[list_name]:
            key = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
            if key in out:
                continue
            # per attribute, so attributes one version's OpInfo class lacks (2.14.1 added XPU dtype fields to
            # every entry) can be left out of the comparison
            attrs = {"__class__": type(op).__name__}
            # _original_*_args are copies of the constructor's arguments, all fields included (so every
            # entry of a version whose OpInfo class gained a field differs there); what they set is compared
            # in the attributes themselves
            attrs.update({k: describe(v) for k, v in sorted(vars(op).items()) if not k.startswith("_original_")})
            if arg is not None:
                _device_view(op, attrs, arg)
            # an attribute at its class's default is marked "d:" so that a field only one version has counts as a
            # change only where the entry sets it (2.13's has_nondeterministic_output=True on empty)
            defaults = _defaults(op)
            out[key] = {k: ("d:" if k in defaults and defaults[k] == v else "")
                        + hashlib.sha256(json.dumps(v, sort_keys=True, default=str).encode()).hexdigest()[:16]
                        for k, v in attrs.items()}
    return {"entries": out, "patched": sorted(set(patched))}


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("root", nargs="?")
    ap.add_argument("--device", help="fingerprint only what this device type's tests see")
    a = ap.parse_args()
    data = dump(a.root, a.device)
    print(f"placeholders for names the installed torch lacks: {data['patched']}", file=sys.stderr)
    json.dump(data, sys.stdout, sort_keys=True)
