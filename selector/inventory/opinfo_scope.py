"""What of an OpInfo definition can reach one device's tests, decided statically.

An upgrade is planned for one backend's device. Parts of an OpInfo entry that only apply to
another device type cannot change that device's tests:

- ``dtypesIfCUDA=``, ``backward_dtypesIfXPU=``, ``dtypesIf={'mps': ...}`` ...: OpInfo's
  ``supported_dtypes(device_type)`` reads ``dtypesIf[<device type>]`` (falling back to
  ``dtypes``) and ``supported_backward_dtypes`` the matching ``backward_dtypesIf<X>``
  (falling back to ``backward_dtypes``). ROCm and XPU inherit CUDA's sets, so the three
  count as one family. (The one cross-device read in torch's harness,
  ``OpDTypes.any_common_cpu_cuda_one``, is used only by CUDA/XPU-only templates.)
- ``DecorateInfo(..., device_type='cuda')`` (or, from 2.14, a tuple of device types) in
  ``skips``/``decorators``: ``is_active`` needs the device type to be equal (or in the
  tuple). A ``skips``/``decorators`` left empty is the default. A PrivateUse1 backend's tests are decorated while their class
  still says ``privateuse1``, so both that name and the backend's own name apply.

``for_device`` removes those parts from a parsed module (in place), so fingerprints of both
versions of an upgrade only see what applies to the device. ``specialise`` partially
evaluates a helper function for one call's static arguments: an ``if`` on a parameter the
call fixes keeps only the branch taken (``skips_mvlgamma()`` never runs its
``if skip_redundant:`` branch, so a change there changes nothing for its callers).
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable
from dataclasses import dataclass

# Device types torch knows by name; any other name is a PrivateUse1 backend (snpu, ...).
BUILTIN_DEVICE_TYPES = frozenset({
    "cpu", "cuda", "rocm", "hip", "xpu", "mps", "hpu", "meta", "mtia", "xla", "lazy", "ipu", "ve", "fpga", "maia",
    "vulkan", "ort", "mkldnn", "opengl", "opencl", "ideep"})
_GPU_FAMILY = frozenset({"cuda", "rocm", "hip", "xpu"})
_EMPTY_DEFAULT = frozenset({"skips", "decorators"})
_DTYPE_KEYWORD = re.compile(r"^(?:backward_)?dtypesIf([A-Za-z0-9_]+)$")


@dataclass(frozen=True)
class DeviceScope:
    """The device types whose dtype sets and DecorateInfo apply to one device's tests."""

    device: str
    dtype_devices: frozenset[str]  # lower-case X of dtypesIfX / backward_dtypesIfX / dtypesIf['x'] that apply
    decorate_devices: frozenset[str]  # DecorateInfo device_type values that apply

    @classmethod
    def of(cls, device: str) -> DeviceScope:
        d = device.lower()
        if d in _GPU_FAMILY:
            return cls(d, _GPU_FAMILY, frozenset({d, "cuda"}))
        if d not in BUILTIN_DEVICE_TYPES:
            return cls(d, frozenset({d, "privateuse1"}), frozenset({d, "privateuse1"}))
        return cls(d, frozenset({d}), frozenset({d}))

    def keyword_applies(self, name: str | None) -> bool:
        m = _DTYPE_KEYWORD.match(name or "")
        return m is None or m.group(1).lower() in self.dtype_devices

    def decorate_info_applies(self, node: ast.AST) -> bool:
        """False only for a ``DecorateInfo(...)`` call whose device_type is a literal naming another device."""
        if not (isinstance(node, ast.Call) and _name(node.func) == "DecorateInfo"):
            return True
        for kw in node.keywords:
            if kw.arg != "device_type":
                continue
            names = kw.value.elts if isinstance(kw.value, ast.Tuple | ast.List) else [kw.value]  # 2.14: a sequence
            if all(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in names):
                return any(n.value.lower() in self.decorate_devices for n in names)  # type: ignore[attr-defined]
        return True


def _name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


class _ForDevice(ast.NodeTransformer):
    def __init__(self, scope: DeviceScope) -> None:
        self.scope = scope

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        # skips=() / decorators=() (emptied here or written so) is what leaving them out gives: both default to ()
        node.keywords = [kw for kw in node.keywords if self.scope.keyword_applies(kw.arg) and not (
            kw.arg in _EMPTY_DEFAULT and isinstance(kw.value, ast.Tuple | ast.List) and not kw.value.elts)]
        for kw in node.keywords:  # dtypesIf={'cuda': ..., 'mps': ...}: literal keys of other devices
            if kw.arg == "dtypesIf" and isinstance(kw.value, ast.Dict):
                pairs = [(k, v) for k, v in zip(kw.value.keys, kw.value.values, strict=True)
                         if not (isinstance(k, ast.Constant) and isinstance(k.value, str)
                                 and k.value.lower() not in self.scope.dtype_devices)]
                kw.value.keys, kw.value.values = [k for k, _ in pairs], [v for _, v in pairs]
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        # skips_mvlgamma() + (<mps-only DecorateInfo>, ...): once emptied, ``x + ()`` is ``x``
        self.generic_visit(node)
        if isinstance(node.op, ast.Add):
            for kept, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(other, ast.Tuple | ast.List) and not other.elts:
                    return kept
        return node

    def _elements(self, node: ast.List | ast.Tuple | ast.Set) -> ast.AST:
        self.generic_visit(node)
        node.elts = [e for e in node.elts if self.scope.decorate_info_applies(e)]
        return node

    visit_List = visit_Tuple = visit_Set = _elements


def for_device(tree: ast.AST, scope: DeviceScope | None) -> ast.AST:
    """``tree`` without what applies only to other device types (changed in place; None: unchanged)."""
    return tree if scope is None else _ForDevice(scope).visit(tree)


_UNKNOWN = object()


def _truth(node: ast.AST, env: dict[str, object], value: Callable[[ast.AST, dict[str, object]], object]) -> object:
    """The truth value of a condition over static bindings, or _UNKNOWN."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _truth(node.operand, env, value)
        return inner if inner is _UNKNOWN else not inner
    if isinstance(node, ast.BoolOp):
        parts = [_truth(v, env, value) for v in node.values]
        if isinstance(node.op, ast.And):
            return False if any(p is not _UNKNOWN and not p for p in parts) else (
                _UNKNOWN if any(p is _UNKNOWN for p in parts) else True)
        return True if any(p is not _UNKNOWN and p for p in parts) else (
            _UNKNOWN if any(p is _UNKNOWN for p in parts) else False)
    if isinstance(node, ast.Name | ast.Constant | ast.Compare):
        v = value(node, env)
        return _UNKNOWN if v is _UNKNOWN else bool(v)
    return _UNKNOWN


class _Specialise(ast.NodeTransformer):
    def __init__(self, env: dict[str, object], value: Callable[[ast.AST, dict[str, object]], object]) -> None:
        self.env, self.value = env, value

    def visit_If(self, node: ast.If) -> ast.AST | list[ast.stmt]:
        taken = _truth(node.test, self.env, self.value)
        if taken is _UNKNOWN:
            return self.generic_visit(node)
        return [self.visit(s) for s in (node.body if taken else node.orelse)]

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        taken = _truth(node.test, self.env, self.value)
        return self.generic_visit(node) if taken is _UNKNOWN else self.visit(node.body if taken else node.orelse)


def bindings(fn: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call | None, env: dict[str, object],
             value: Callable[[ast.AST, dict[str, object]], object]) -> dict[str, object]:
    """Static values of ``fn``'s parameters for ``call`` (defaults included); parameters the body rebinds,
    or any call with ``*args``/``**kwargs``, bind nothing."""
    if call is not None and (any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)):
        return {}
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    out: dict[str, object] = {}
    for p, d in zip(params[len(params) - len(fn.args.defaults):], fn.args.defaults, strict=True):
        out[p] = value(d, {})
    for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True):
        if d is not None:
            out[a.arg] = value(d, {})
    if call is not None:
        for p, a in zip(params, call.args, strict=False):
            out[p] = value(a, env)
        for kw in call.keywords:
            out[str(kw.arg)] = value(kw.value, env)
    rebound = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del)}
    rebound |= {n for s in ast.walk(fn) if isinstance(s, ast.Global | ast.Nonlocal) for n in s.names}
    return {k: v for k, v in out.items() if v is not _UNKNOWN and k not in rebound}


def specialise(fn: ast.FunctionDef | ast.AsyncFunctionDef, env: dict[str, object],
               value: Callable[[ast.AST, dict[str, object]], object]) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """A copy of ``fn`` with every ``if`` decided by ``env`` (static parameter values) reduced to its branch.
    ``value(node, env)`` evaluates a static expression and returns ``UNKNOWN`` when it cannot."""
    if not env:
        return fn
    out = _Specialise(env, value).visit(copy.deepcopy(fn))
    for node in ast.walk(out):  # a body emptied by pruning stays valid Python
        for attr in ("body", "orelse", "finalbody"):
            if attr == "body" and isinstance(getattr(node, attr, None), list) and not getattr(node, attr):
                setattr(node, attr, [ast.Pass()])
    return out


UNKNOWN = _UNKNOWN
