"""The deterministic agent: decides what rules leave undecided by reading, not guessing.

For each test it reads the test's source and the capability file through the same
read-only tools the Claude agent gets, collects the torch operations the source calls
(from the AST: docstrings and comments are never read as instructions), and decides:
``skip`` when a call has no kernel on the backend, ``run`` otherwise. Every reason says
what was read and which calls decided it.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re

from crcr.contracts.cputrace import CpuTrace
from crcr.contracts.inventory import InventoryTest
from selector.agent.base import MAX_REASON_CHARS, AgentAnswer, Usage
from selector.agent.tools import Tools
from selector.capabilities import Capabilities
from selector.fingerprint import digest
from selector.plaintext import plain

# Calls that build inputs or inspect results, not operators under test.
NEUTRAL = frozenset(
    """tensor zeros ones empty randn rand randint arange full manual_seed device Size zeros_like ones_like
    empty_like randn_like rand_like full_like no_grad enable_grad float32 float16 bfloat16 get_default_dtype
    set_default_dtype is_tensor to cpu item size dim numel tolist clone contiguous view reshape copy_ fill_
    detach requires_grad_ numpy type is_contiguous stride storage_offset data_ptr expand stack cat equal
    allclose isclose testing assert_close backward grad linspace eye as_strided unsqueeze squeeze permute
    transpose t flatten narrow select index_select new_empty new_zeros new_ones new_full from_numpy
    broadcast_tensors result_type promote_types can_cast finfo iinfo is_floating_point is_complex numel
    uniform_ normal_ zero_ sum mean""".split()
)
_TORCH_ROOTS = {"torch", "F", "nn"}
# Modules whose calls never reach the device: the standard library, NumPy, and torch's own test
# harness and utilities (``torch.testing.get_all_dtypes()`` lists dtypes, it is no operator).
_HOST_ROOTS = frozenset(
    """np numpy math random itertools functools operator warnings unittest sys os re collections copy
    contextlib string json time typing inspect dataclasses enum pickle io tempfile""".split()
)
_HOST_TORCH = ("torch.testing", "torch.utils", "torch.backends", "torch._")
# Methods of Python's own containers and strings: ``shape.append(...)``, ``"{}".format(...)``.
_PY_METHODS = frozenset(
    """append extend insert items keys values get setdefault update format join rsplit strip lstrip
    rstrip startswith endswith replace lower upper encode decode splitlines""".split()
)
# Dtype-list helpers of the test harness, however they are reached (``common_dtype.all_types_and(...)``).
_DTYPE_HELPER = re.compile(
    r"^(get_all_\w*dtypes|(all|floating|integral|complex|floating_and_complex)_types(_and\w*)?|"
    r"all_types_and_complex(_and)?|\w+_dtypes)$"
)


def snake(name: str) -> str:
    """``AdaptiveAvgPool1d`` -> ``adaptive_avg_pool1d`` (how aten names a module's functional op)."""
    out = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return re.sub(r"_(\d)", r"\1", out)


def _body_nodes(fn: ast.FunctionDef, dtype: str | None = None, device: str | None = None):
    """The nodes of the test's body: its decorators (``@dtypes(*get_all_dtypes())``) and default
    arguments are evaluated when the class is built, never on the device. With the test's ``dtype``,
    the branches that dtype never takes (``if dtype.is_complex: ...``, ``x if dtype in (torch.cfloat,)
    else y``) are left out: their code never runs in this test."""
    for stmt in fn.body:
        yield from _live(stmt, dtype, device)


def _live(node: ast.AST, dtype: str | None, device: str | None = None):
    yield node
    if isinstance(node, (ast.If, ast.IfExp)):
        taken = _truth(node.test, dtype, device)
        yield from _live(node.test, dtype, device)
        for branch, when in ((node.body, True), (node.orelse, False)):
            if taken is None or taken is when:
                for child in branch if isinstance(branch, list) else [branch]:
                    yield from _live(child, dtype, device)
        return
    for child in ast.iter_child_nodes(node):
        yield from _live(child, dtype, device)


def _dtype_name(node: ast.AST) -> str | None:
    """``torch.cfloat`` -> ``complex64``; None for anything else."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        name = _DTYPE_ALIASES.get(node.attr, node.attr)
        return name if _DTYPE_NAME.match(name) else None
    return None


def _truth(test: ast.AST, dtype: str | None, device: str | None) -> bool | None:
    """The value of a branch condition from what is known of the test: its dtype (:func:`_dtype_truth`)
    or its device type (:func:`_device_truth`), with ``not``/``and``/``or`` over both; None otherwise."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        value = _truth(test.operand, dtype, device)
        return None if value is None else not value
    if isinstance(test, ast.BoolOp):
        values = [_truth(v, dtype, device) for v in test.values]
        decisive = isinstance(test.op, ast.Or)
        if decisive in values:
            return decisive
        return (not decisive) if all(v is not None for v in values) else None
    value = _dtype_truth(test, dtype)
    if value is None and _cuda_available_call(test):
        return _cuda_built()
    return value if value is not None else _device_truth(test, device)


def _cuda_available_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call) and not node.args and ast.unparse(node.func) == "torch.cuda.is_available"
    )


def _cuda_built() -> bool | None:
    """``torch.cuda.is_available()`` is False wherever the installed torch has no CUDA (a CPU build, as
    an out-of-tree backend's CI runs); None where it has CUDA (then the machine decides)."""
    try:
        import torch
    except Exception:
        return None
    return None if torch.version.cuda else False


def _is_device_expr(node: ast.AST) -> bool:
    """``self.device_type``, ``device``, ``device.type``, ``torch.device(device).type``."""
    if isinstance(node, ast.Attribute) and node.attr == "device_type":
        return isinstance(node.value, ast.Name) and node.value.id == "self"
    if isinstance(node, ast.Name):
        return node.id in ("device", "device_type")
    if isinstance(node, ast.Attribute) and node.attr == "type":
        inner = node.value
        return (isinstance(inner, ast.Name) and inner.id == "device") or (
            isinstance(inner, ast.Call)
            and ast.unparse(inner.func) == "torch.device"
            and len(inner.args) == 1
            and isinstance(inner.args[0], ast.Name)
            and inner.args[0].id == "device"
        )
    return False


def _device_truth(test: ast.AST, device: str | None) -> bool | None:
    """The value of a condition on the test's device type alone (``self.device_type == 'cuda'``,
    ``device == 'cpu'``, ``'cuda' in device``, ``self.device_type in ['cpu', 'cuda']``,
    ``device.startswith('cuda')``) for the device under test; None when it reads anything else."""
    if device is None:
        return None
    strings = lambda n: (  # noqa: E731
        [n.value]
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
        else [e.value for e in n.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if isinstance(n, (ast.List, ast.Tuple, ast.Set))
        and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in n.elts)
        else None
    )
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if _is_device_expr(left) and (names := strings(right)) is not None:
            kind = device.split(":")[0]
            if (
                isinstance(op, (ast.Eq, ast.Is, ast.NotEq, ast.IsNot))
                and len(names) == 1
                and isinstance(right, ast.Constant)
            ):
                return (names[0].split(":")[0] == kind) is isinstance(op, (ast.Eq, ast.Is))
            if isinstance(op, (ast.In, ast.NotIn)) and not isinstance(right, ast.Constant):
                return (kind in [n.split(":")[0] for n in names]) is isinstance(op, ast.In)
        if (
            isinstance(left, ast.Constant)
            and isinstance(left.value, str)
            and isinstance(op, (ast.In, ast.NotIn))
            and _is_device_expr(right)
        ):
            return (left.value in device) is isinstance(op, ast.In)
    if (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Attribute)
        and test.func.attr == "startswith"
        and _is_device_expr(test.func.value)
        and len(test.args) == 1
        and (names := strings(test.args[0]))
    ):
        return any(device.startswith(n) for n in names)
    return None


def names_the_device(fn: ast.FunctionDef, device: str) -> bool:
    """Whether a test of a class not instantiated per device type can still put work on the backend: its body
    names the backend (``'privateuse1'``, the device's own name), the current accelerator, or calls a helper of
    the test case (which may). Without one of those, everything it builds is on the CPU."""
    names = {"privateuse1", device.lower()}
    for node in ast.walk(fn):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(n in node.value.lower() for n in names):
                return True
        if isinstance(node, (ast.Name, ast.Attribute)):
            word = (node.id if isinstance(node, ast.Name) else node.attr).lower()
            if "privateuse1" in word or "accelerator" in word or word == device.lower():
                return True
        if _calls_test_helper(node):
            return True
    return False


def _calls_test_helper(node: ast.AST) -> bool:
    """``self.helper(...)``: a helper of the test case, other than its assertions, skips and subtests."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
        and not node.func.attr.startswith(("assert", "fail", "skip", "subTest"))
    )


def device_reaches(fn: ast.FunctionDef, dtype: str | None = None, device: str | None = None) -> bool | None:
    """Whether the test's ``device`` argument can reach anything it builds: False when the body reads it
    only in device-type conditions (``torch.device(device).type == 'cuda'``) or after rebinding it
    (``for device in ['cpu']: ...``, ``device = 'meta'``), reads no ``self.device_type`` outside such
    conditions and calls no helper of the test case but assertions: then every tensor and storage it
    builds is on the CPU or another explicit device (``TypedStorage(..., device='meta')``) and it runs
    as it does there. None without a ``device`` argument."""
    if "device" not in {a.arg for a in fn.args.args}:
        return None
    rebound: set[int] = set()
    for stmt in ast.walk(fn):
        if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) and stmt.target.id == "device":
            rebound |= {id(n) for b in stmt.body + stmt.orelse for n in ast.walk(b)}
    assigned = [
        s.lineno
        for s in fn.body
        if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "device" for t in s.targets)
    ]
    conditions: set[int] = set()
    for node in _body_nodes(fn, dtype, device):
        if isinstance(node, ast.Compare) and any(_is_device_expr(x) for x in [node.left, *node.comparators]):
            conditions |= {id(n) for n in ast.walk(node)}
        if isinstance(node, ast.Call) and _device_truth(node, device or "cpu") is not None:
            conditions |= {id(n) for n in ast.walk(node)}
    for node in _body_nodes(fn, dtype, device):
        if id(node) in conditions or id(node) in rebound:
            continue
        if isinstance(node, ast.Name) and node.id == "device" and isinstance(node.ctx, ast.Load):
            if not any(line < node.lineno for line in assigned):
                return True
        if isinstance(node, ast.Attribute) and node.attr == "device_type" and _is_device_expr(node):
            return True
        if _calls_test_helper(node):
            return True  # a helper of the test case may use self.device_type
    return False


def _dtype_truth(test: ast.AST, dtype: str | None) -> bool | None:
    """The value of a condition on the test's ``dtype`` argument alone (``dtype.is_complex``,
    ``dtype is torch.bool``, ``dtype in [torch.cfloat, torch.cdouble]``, ``not``/``and``/``or`` of
    those) for the test's dtype; None when it reads anything else or the dtype is unknown."""
    if dtype is None:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        value = _dtype_truth(test.operand, dtype)
        return None if value is None else not value
    if isinstance(test, ast.BoolOp):
        values = [_dtype_truth(v, dtype) for v in test.values]
        decisive = isinstance(test.op, ast.Or)  # True decides an `or`, False an `and`
        if decisive in values:
            return decisive
        return (not decisive) if all(v is not None for v in values) else None
    is_arg = lambda n: isinstance(n, ast.Name) and n.id == "dtype"  # noqa: E731
    if isinstance(test, ast.Attribute) and is_arg(test.value):
        if test.attr == "is_complex":
            return dtype.startswith("complex")
        if test.attr == "is_floating_point":
            return dtype.startswith(("float", "bfloat"))
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and is_arg(test.left):
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Eq, ast.Is, ast.NotEq, ast.IsNot)) and (name := _dtype_name(right)):
            return (name == dtype) is isinstance(op, (ast.Eq, ast.Is))
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.List, ast.Tuple, ast.Set)):
            names = [_dtype_name(e) for e in right.elts]
            if all(names):
                return (dtype in names) is isinstance(op, ast.In)
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, ast.Call | ast.BinOp):
            # a dtype-list helper of the test harness: ``dtype in get_all_complex_dtypes()``
            listed = _helper_dtypes(right)
            if listed is not None:
                return (dtype in listed) is isinstance(op, ast.In)
    return None


def _helper_dtypes(node: ast.AST) -> list[str] | None:
    """The dtypes of ``get_all_complex_dtypes()``, ``get_all_fp_dtypes() + get_all_complex_dtypes()``...
    (the harness's documented sets, :mod:`selector.inventory.dtypes`), called without arguments that
    change them; None for anything else."""
    from selector.inventory.dtypes import dtypes_of

    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _helper_dtypes(node.left), _helper_dtypes(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        return dtypes_of(node)
    return None


def torch_calls(fn: ast.FunctionDef, dtype: str | None = None, device: str | None = None) -> list[str]:
    """Operator names a test's body calls: ``torch.softmax(...)``, ``F.relu(...)``, ``x.addmm(...)``; not the
    Python-level torch functions it calls (:func:`python_level_calls`)."""
    return _torch_calls(fn, dtype, device)[0]


def python_level_calls(fn: ast.FunctionDef, dtype: str | None = None, device: str | None = None) -> list[str]:
    """The torch functions a test's body calls that are Python composed of other ops, with no aten op of their
    name (``torch.nn.init.kaiming_uniform_``, ``torch.autograd.gradcheck``): none needs a kernel of its own."""
    return _torch_calls(fn, dtype, device)[1]


_ROOT_MODULES = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional"}
# Python functions that make tensors of another layout (``torch.nested.nested_tensor`` calls
# ``_nested_tensor_from_tensor_list``): the device needs that layout's kernels, so they stay read as ops
_OTHER_LAYOUTS = ("torch.nested", "torch.sparse", "torch.masked")


@functools.cache
def python_level(dotted: str) -> bool:
    """Whether ``dotted`` (``torch.nn.init.trunc_normal_``, ``nn.init.xavier_uniform_``) names, in the installed
    torch, a function defined in Python (not a builtin bound to an op) with no aten op of its name: it computes
    through the ops it calls, each dispatched on its own, and no kernel is named after it. False where torch does
    not import or the name does not resolve."""
    import importlib
    import inspect

    root, _, rest = dotted.partition(".")
    if root not in _ROOT_MODULES or not rest:
        return False
    try:
        import torch

        obj: object = importlib.import_module(_ROOT_MODULES[root])
        for part in rest.split("."):
            obj = getattr(obj, part)
    except Exception:  # not this torch's, or torch does not import: read as before
        return False
    if not inspect.isfunction(obj) or str(getattr(obj, "__module__", "")).startswith(_OTHER_LAYOUTS):
        return False
    name = aten_name(dotted.rsplit(".", 1)[-1])
    try:
        return not isinstance(getattr(torch.ops.aten, name), torch._ops.OpOverloadPacket)
    except (AttributeError, RuntimeError):
        return True


def _torch_calls(fn: ast.FunctionDef, dtype: str | None, device: str | None) -> tuple[list[str], list[str]]:
    found: list[str] = []
    python: list[str] = []
    for node in _body_nodes(fn, dtype, device):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr = node.func.attr
        base = node.func.value
        root = base
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id == "self":
            continue  # assertions and helpers of the test case
        if isinstance(root, ast.Constant) or (isinstance(root, ast.Name) and root.id in _HOST_ROOTS):
            continue  # "{}".format(...), np.vander(...), random.randint(...)
        if isinstance(root, ast.Name) and root.id in _TORCH_ROOTS:
            dotted = ast.unparse(node.func)
            if dotted in ("torch.cuda.is_available", "torch.cuda.device_count"):
                continue  # questions any torch answers (False, 0 without CUDA), no CUDA work
            if ".cuda." in dotted or dotted.startswith("torch.cuda"):
                found.append("torch.cuda")
                continue
            if dotted.startswith(_HOST_TORCH):
                continue
            if _NN_MODULE.match(dotted) and (functional := _functional_of(attr)):
                # an nn module computes through its functional form (nn.MaxUnpool1d -> max_unpool1d)
                found.append(functional)
                continue
            if (space := _OP_NAMESPACE.match(dotted)) and not attr.startswith("_"):
                # torch.linalg.inv is OpInfo's linalg.inv and aten's linalg_inv, not an op named inv
                found.append(f"{_NAMESPACES[space.group(1)]}.{attr}")
                continue
            if python_level(dotted):
                python.append(dotted)  # Python over other ops (torch.nn.init.*_): no kernel of its own
                continue
        if (
            attr.startswith("_")
            or attr in NEUTRAL
            or attr.startswith("assert")
            or attr in _PY_METHODS
            or _DTYPE_HELPER.match(attr)
        ):
            continue
        found.append(attr)
    return sorted(set(found)), sorted(set(python))


_NN_MODULE = re.compile(r"^(torch\.)?nn\.[A-Z]\w*$")


def _functional_of(module: str) -> str | None:
    """``MaxUnpool1d`` -> ``nn.functional.max_unpool1d`` where the installed torch has that function."""
    try:
        import torch.nn.functional as functional
    except Exception:
        return None
    name = snake(module)
    return f"nn.functional.{name}" if callable(getattr(functional, name, None)) else None


# torch's op namespaces, as OpInfo names them (``torch.linalg.inv`` -> ``linalg.inv``, ``F.relu`` ->
# ``nn.functional.relu``); aten spells them ``linalg_inv`` and ``relu`` (:func:`aten_name`).
_NAMESPACES = {
    "torch.linalg": "linalg",
    "torch.special": "special",
    "torch.fft": "fft",
    "torch.nn.functional": "nn.functional",
    "F": "nn.functional",
}
_OP_NAMESPACE = re.compile(r"^(torch\.linalg|torch\.special|torch\.fft|torch\.nn\.functional|F)\.\w+$")


def aten_name(op: str) -> str:
    """The aten spelling of an op name the agent collected: ``linalg.inv`` -> ``linalg_inv``,
    ``nn.functional.relu`` -> ``relu``, a bare name as it is."""
    if op.startswith("nn.functional."):
        return op[len("nn.functional.") :]
    return op.replace(".", "_")


# Tensor methods named after a device: they move data there, whatever aten says.
# and the Tensor methods torch implements for CPU tensors only (``apply_``: "only implemented on CPU tensors").
_DEVICE_METHODS = frozenset("cuda xpu mps hpu ipu mtia xla pin_memory apply_ map_ map2_".split())


@functools.cache
def kernel_free(name: str) -> bool:
    """Whether calling ``name`` needs no backend kernel *of that name*, by the installed torch's
    dispatcher: every overload of ``aten::<name>`` is CompositeImplicitAutograd (it decomposes into
    other aten ops, whose kernels do the work: ``vander``, ``msort``) or a factory taking no tensor with a
    CompositeExplicitAutograd kernel (``empty_permuted``: ``empty`` and ``permute``), or ``name`` is a Tensor method
    bound in C++ with no aten op behind it (``ndimension``, ``nelement``: metadata, or a dtype
    conversion through ``_to_copy``). False where torch does not import or says neither."""
    if name in _DEVICE_METHODS:
        return False
    name = aten_name(name)
    try:
        import torch
    except Exception:  # a machine without torch reads the capability file only
        return False
    try:
        packet = getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        packet = None
    if not isinstance(packet, torch._ops.OpOverloadPacket):  # torch.ops.aten.name is the namespace's name
        packet = None
    if packet is None:
        return type(getattr(torch.Tensor, name, None)).__name__ == "method_descriptor"
    try:
        overloads = [
            (f"aten::{name}" + ("" if o == "default" else f".{o}"), getattr(packet, o)._schema)
            for o in packet.overloads()
        ]
        return bool(overloads) and all(
            torch._C._dispatch_has_kernel_for_dispatch_key(o, "CompositeImplicitAutograd")
            or (
                # a factory (no tensor goes in but out=) with a composite kernel for every backend:
                # the dispatcher picks the backend from device= and runs it there (empty_permuted
                # calls empty and permute)
                torch._C._dispatch_has_kernel_for_dispatch_key(o, "CompositeExplicitAutograd")
                and not any("Tensor" in str(a.type) and not a.is_out for a in schema.arguments)
            )
            for o, schema in overloads
        )
    except (RuntimeError, AttributeError, TypeError):
        return False


def device_storages(fn: ast.FunctionDef, dtype: str | None = None, device: str | None = None) -> list[str]:
    """Storages the body allocates on the device itself: a copy of a device tensor's storage
    (``t.untyped_storage().clone()``, ``t.storage().clone()``) or a storage made with the test's device
    (``torch.UntypedStorage(n, device=device)``); a backend without a device allocator refuses them
    (the capability file's ``device_storage_allocation``)."""
    found: list[str] = []
    for node in _body_nodes(fn, dtype, device):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute | ast.Name):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        inner = node.func.value if isinstance(node.func, ast.Attribute) else None
        if (
            name == "clone"
            and isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute)
            and inner.func.attr in ("untyped_storage", "storage", "_typed_storage")
        ):
            found.append(f"{inner.func.attr}().clone()")
        elif name in ("UntypedStorage", "TypedStorage") and any(
            k.arg == "device" and isinstance(k.value, ast.Name) and k.value.id == "device"
            for k in node.keywords
        ):
            found.append(f"{name}(device=device)")
    return sorted(set(found))


def indirect_calls(fn: ast.FunctionDef, test: InventoryTest) -> list[str]:
    """Ops the body reaches by a name it computes from a ``@parametrize`` value: ``getattr(t, fn)``,
    ``getattr(torch, fn + "_")`` with ``fn="pow"`` -> ``pow``, ``pow_``; only names the installed torch has
    as a Tensor method or a torch function (the body guards the others with ``hasattr``)."""
    values = {k: v for k, v in (test.params or {}).items() if isinstance(v, str)}
    if not values:
        return []
    try:
        import torch
    except Exception:
        return []

    def text(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return values.get(node.id)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = text(node.left), text(node.right)
            return None if left is None or right is None else left + right
        return None

    found: set[str] = set()
    for node in _body_nodes(fn, test.dtype, test.device):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and not isinstance(node.args[1], ast.Constant)
            and (name := text(node.args[1]))
            and not name.startswith("_")
            and (hasattr(torch.Tensor, name) or hasattr(torch, name))
        ):
            found.add(name)
    return sorted(found)


def runs_backward(fn: ast.FunctionDef, dtype: str | None = None, device: str | None = None) -> bool:
    """Whether the body runs a backward pass: ``out.backward(...)``, ``torch.autograd.grad(...)``."""
    for node in _body_nodes(fn, dtype, device):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            dotted = ast.unparse(node.func)
            if node.func.attr == "backward" or dotted in ("torch.autograd.grad", "autograd.grad"):
                return True
    return False


def missing_backward(op: str, tools) -> list[str]:
    """The backward kernel a backward pass through ``op`` needs where the installed torch names one after
    it (``<op>_backward``, ``_<op>_backward``, ``<op>_with_indices_backward``: ``_adaptive_avg_pool2d_backward``,
    ``max_pool3d_with_indices_backward``) and the capability file lists none of them; [] otherwise."""
    try:
        import torch
    except Exception:
        return []
    base = aten_name(op)
    names = [f"{base}_backward", f"_{base}_backward", f"{base}_with_indices_backward"]
    existing = [
        n
        for n in names
        if isinstance(getattr(torch.ops.aten, n, None), torch._ops.OpOverloadPacket) and not kernel_free(n)
    ]  # a backward that decomposes (embedding_backward) needs what it decomposes into, read elsewhere
    have = tools.caps.aten_names()
    return [] if not existing or any(n in have for n in existing) else existing[:1]


def uninitialized_result(name: str) -> bool:
    """Whether the installed torch documents ``torch.<name>`` (or ``Tensor.<name>``) as returning
    uninitialized data (``empty``, ``empty_permuted``, ``new_empty``): its values compare with nothing,
    so a capability sweep's value mismatch (AssertionError) says nothing about its kernels."""
    try:
        import torch
    except Exception:
        return False
    fn = getattr(torch, name, None) or getattr(torch.Tensor, name, None)
    paragraphs = [p for p in (getattr(fn, "__doc__", None) or "").split("\n\n") if p.strip()]
    summary = paragraphs[1] if len(paragraphs) > 1 else ""  # the sentence after the signature
    return bool(re.search(r"\buninitialized\b|\bundefined data\b", summary))


_HOST_MODULES = {"np": "numpy"}


def _host_module(name: str) -> object | None:
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def missing_host_calls(fn: ast.FunctionDef, dtype: str | None = None, device: str | None = None) -> list[str]:
    """Names of a host library (NumPy, the standard library) the body uses and the installed library
    does not have (``np.msort(...)``, ``dtype=np.float``, gone from NumPy 2 / 1.24): reading them raises
    ``AttributeError`` on every device. A library that does not import here is not judged."""
    found: set[str] = set()
    for node in _body_nodes(fn, dtype, device):
        if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
            continue
        chain: list[str] = []
        base: ast.AST = node
        while isinstance(base, ast.Attribute):
            chain.insert(0, base.attr)
            base = base.value
        if not (isinstance(base, ast.Name) and base.id in _HOST_ROOTS):
            continue
        obj = _host_module(_HOST_MODULES.get(base.id, base.id))
        if obj is None:
            continue  # not installed, or not a module name: nothing to say
        for i, attr in enumerate(chain):
            if not hasattr(obj, attr):
                found.add(".".join([base.id, *chain[: i + 1]]))
                break
            obj = getattr(obj, attr)
    return sorted(found)


# torch's dtype names and aliases -> the names capability files use.
_DTYPE_ALIASES = {
    "double": "float64",
    "float": "float32",
    "half": "float16",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "chalf": "complex32",
    "long": "int64",
    "int": "int32",
    "short": "int16",
}
_DTYPE_NAME = re.compile(r"^((float|bfloat|complex|int|uint)\d+|bool)$")


# The harness's dtype maps (``numpy_to_torch_dtype_dict``): iterating one yields every dtype it maps.
_DTYPE_MAP = re.compile(r"^\w*dtype\w*_dict$")
_EVERY_REFUSABLE = ("float64", "complex64", "complex128")

# Functions that read dtypes without building a tensor: ``torch.can_cast(torch.double, torch.float)``.
_DTYPE_QUERIES = frozenset("can_cast finfo iinfo _element_size element_size".split())


def _is_raises(call: ast.AST) -> bool:
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr.startswith("assertRaises")
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "self"
    )


# A dtype's own properties: reading them builds nothing (``if dtype.is_floating_point:``).
_DTYPE_FLAGS = frozenset("is_complex is_floating_point is_signed itemsize".split())


def inert_nodes(fn: ast.FunctionDef, raising: bool = True) -> set[int]:
    """Nodes whose dtypes build no tensor on the device: compared names (``if dtype == torch.double``),
    arguments of dtype queries (``torch.can_cast(torch.double, torch.float)``, ``torch.finfo(dtype)``), a
    dtype's own flags (``dtype.is_complex``), and (``raising``) code a test expects to be refused (``with
    self.assertRaises(...)`` blocks, ``self.assertRaises(E, lambda: ...)``): upstream writes those calls to
    fail the op's own argument checks, before anything is computed."""
    inert: set[int] = set()
    for stmt in fn.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Compare):
                inert |= {id(n) for n in ast.walk(node)}
            elif isinstance(node, ast.Attribute) and node.attr in _DTYPE_FLAGS:
                inert.add(id(node.value))
            elif isinstance(node, ast.Call) and (
                (node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", ""))
                in _DTYPE_QUERIES
            ):
                inert |= {id(n) for a in (*node.args, *node.keywords) for n in ast.walk(a)}
            elif not raising:
                continue
            elif isinstance(node, ast.With) and any(_is_raises(item.context_expr) for item in node.items):
                inert |= {id(n) for b in node.body for n in ast.walk(b)}
            elif _is_raises(node):
                inert |= {id(n) for a in node.args[1:] for n in ast.walk(a)}
    return inert


# Factories whose result takes the default dtype when no dtype= is given (``torch.tensor`` and the
# like only for a Python float: an int or bool literal makes an integer or bool tensor).
_DEFAULT_FLOAT = frozenset("rand randn ones zeros empty linspace logspace eye scalar_tensor".split())
_DEFAULT_IF_FLOAT = frozenset("tensor as_tensor arange full".split())


def default_dtype_builds(fn: ast.FunctionDef, dtype: str | None = None, device: str | None = None) -> bool:
    """Whether the body builds a device tensor in the default dtype: a float factory with ``device=``
    and no ``dtype=`` (``torch.ones(3, device=device)``, ``torch.tensor(2.5, device=device)``)."""
    inert = inert_nodes(fn)
    for node in _body_nodes(fn, dtype, device):
        if id(node) in inert or not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            continue
        keys = {k.arg for k in node.keywords}
        if "device" not in keys or "dtype" in keys:
            continue
        if node.func.attr in _DEFAULT_FLOAT or (
            node.func.attr in _DEFAULT_IF_FLOAT
            and any(
                isinstance(c, ast.Constant) and isinstance(c.value, float)
                for a in node.args
                for c in ast.walk(a)
            )
        ):
            return True
    return False


_FACTORIES = _DEFAULT_FLOAT | _DEFAULT_IF_FLOAT | frozenset("empty_strided randint randperm full".split())


def _cpu_factory_dtypes(fn: ast.FunctionDef) -> set[int]:
    """Nodes of the ``dtype=`` of ``torch.<factory>(...)`` calls with no ``device=`` whose result is not
    moved on by a method (``.to(device)``): those tensors are built on the CPU."""
    receivers = {id(n.value) for stmt in fn.body for n in ast.walk(stmt) if isinstance(n, ast.Attribute)}
    out: set[int] = set()
    for stmt in fn.body:
        for node in ast.walk(stmt):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"
                and node.func.attr in _FACTORIES
                and id(node) not in receivers
            ):
                continue
            keys = {k.arg: k.value for k in node.keywords}
            if "device" not in keys and None not in keys and "dtype" in keys:
                out |= {id(n) for n in ast.walk(keys["dtype"])}
    return out


def body_dtypes(fn: ast.FunctionDef, dtype: str | None = None, device: str | None = None) -> list[str]:
    """Dtypes the body builds tensors in by name: ``torch.double``, ``x.cdouble()``, ``5j`` (complex64),
    ``all_types_and_complex_and(...)`` (complex64 and complex128), a harness dtype map iterated
    (``numpy_to_torch_dtype_dict.items()``: float64 and complex too). Names that build nothing are left
    out: compared ones, dtype queries' arguments, code expected to be refused (:func:`inert_nodes`), branches
    the test's ``dtype`` never takes, and a dtype-list loop (``for v in all_types_and_complex_and(...)``)
    whose variable only reaches such places. Code expected to be refused counts as building nothing only
    for such a loop's variable (``for v in ...: with self.assertRaises(...): a.view(v)``): a dtype named
    directly in it (``x.double()`` to provoke a dtype mismatch) is refused by the device first. A factory
    without ``device=`` whose result is not moved on (``torch.empty(n, dtype=torch.float64)``) builds a CPU
    tensor: its dtype does not reach the device."""
    inert = inert_nodes(fn, raising=False) | _cpu_factory_dtypes(fn)
    loop_inert = inert | inert_nodes(fn)
    loops: dict[int, str] = {}
    for stmt in fn.body:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
                loops[id(node.iter)] = node.target.id

    def builds(var: str) -> bool:
        return any(
            isinstance(n, ast.Name)
            and n.id == var
            and isinstance(n.ctx, ast.Load)
            and id(n) not in loop_inert
            for n in _body_nodes(fn, dtype, device)
        )

    found: set[str] = set()
    for node in _body_nodes(fn, dtype, device):
        if id(node) in inert:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, complex):
            found.add("complex64")
        elif name := _dtype_name(node):
            found.add(name)
        elif isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if (
                callee in ("double", "cdouble", "cfloat", "chalf")
                and isinstance(node.func, ast.Attribute)
                and not node.args
            ):
                found.add(_DTYPE_ALIASES[callee])
            elif (
                callee in ("items", "keys", "values")
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and _DTYPE_MAP.match(node.func.value.id)
            ):
                found |= set(_EVERY_REFUSABLE)  # the harness's dtype maps hold every dtype
            elif (
                _DTYPE_HELPER.match(callee)
                and "complex" in callee
                and (id(node) not in loops or builds(loops[id(node)]))
            ):
                found |= {"complex64", "complex128"}
    # a loop over a harness dtype list, whole or combined (``for d0, d1 in product(get_all_dtypes(),
    # repeat=2)``), whose variables reach a tensor: every dtype of the list is built
    from selector.inventory.dtypes import dtypes_of

    for node in _body_nodes(fn, dtype, device):
        if not isinstance(node, ast.For | ast.comprehension) or id(node.iter) in inert:
            continue
        targets = [n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)]
        listed = [
            d
            for call in ast.walk(node.iter)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and _DTYPE_HELPER.match(call.func.id)
            for d in (dtypes_of(call) or [])
        ]
        if listed and any(builds(t) for t in targets):
            found |= set(listed)
    return sorted(found)


def refused(caps: Capabilities, dtype: str) -> bool:
    """The capability file's answer for a dtype, as the dtype-support rule reads it."""
    if not caps.dtypes or dtype in caps.dtypes or dtype in caps.indexing_dtypes:
        return False
    return not caps.refused_dtypes or dtype in caps.refused_dtypes


def _clip(text: str) -> str:
    """A reason from ``text``, which may quote a test's error: plain, and no longer than a reason may be."""
    text = plain(text)
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


@functools.cache
def composite_kernel(op: str) -> bool:
    """Whether the overload ``aten::name.overload`` is a factory taking no tensor (but ``out=``) with a
    CompositeExplicitAutograd kernel (``randn``, ``rand``): the dispatcher picks the backend from ``device=`` and
    runs it as the ops it calls. An op taking a tensor reaches the backend's own dispatch (snpu's
    ``__torch_dispatch__``) before any composite kernel, so it needs a kernel of its own
    (``_has_same_storage_numel``). False where torch does not import or says neither."""
    try:
        import torch
    except Exception:
        return False
    name, _, overload = op.split("::", 1)[-1].partition(".")
    try:
        schema = getattr(getattr(torch.ops.aten, name), overload or "default")._schema
        return torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeExplicitAutograd") and not any(
            "Tensor" in str(a.type) and not a.is_out for a in schema.arguments
        )
    except (AttributeError, RuntimeError):
        return False


def out_overload(op: str) -> bool:
    """Whether ``aten::name.overload`` writes into ``out=`` tensors (from torch's schema; by its overload's name
    where torch does not know it)."""
    name, _, overload = op.split("::", 1)[-1].partition(".")
    try:
        import torch

        return any(a.is_out for a in getattr(getattr(torch.ops.aten, name), overload or "default")._schema.arguments)
    except Exception:
        return "out" in overload.lower()


def trace_kernel(op: str, caps: Capabilities) -> bool:
    """Whether an aten overload a CPU trace recorded (``aten::add.Tensor``) runs on the backend: the capability
    file lists the overload; for an ``out=`` overload, its ``out_routes`` names it (the device runs it on its own
    kernel or its functional overload's; ``aten::full.out`` is refused although ``full`` has a kernel); else the file lists
    the op by its bare name (as :meth:`Capabilities.aten_names` reads it) or torch runs it as a composite of other
    ops on every backend."""
    if op in caps.aten_ops:
        return True
    if caps.out_routes is not None and out_overload(op):
        return op in caps.out_routes
    bare = op.split("::", 1)[-1].split(".", 1)[0]
    return bare in caps.aten_names() or composite_kernel(op)


_TRACE_LOST = {
    "no_twin": "no CPU twin",
    "timeout": "the CPU twin timed out",
    "trace_broke": "the CPU twin fails only under the trace",
    "skipped": "the CPU twin skipped itself",
    "lost": "the trace was lost",
    "crashed": "the CPU twin crashed the trace",
}

_SHADOW_LOST = {
    "no_twin": "no such test where snpu is registered",
    "timeout": "the device-shadow run timed out",
    "skipped": "the device-shadow run skipped itself",
    "lost": "the device-shadow trace was lost",
    "crashed": "the device-shadow run crashed",
}


def trace_answer(
    test: InventoryTest, trace: CpuTrace | None, tools: Tools, cap_ref: str
) -> tuple[AgentAnswer | None, str]:
    """The decision a test's trace supports, or None and why it cannot decide. The trace is the CPU twin's
    (``runners.cpu_trace``) or, for snpu by default, the device-shadow run's (``runners.device_shadow``: the device
    test itself with snpu's tensors and the CPU's kernels); both are read the same way.

    Passed: ``run`` when every aten op called on device tensors (backward ops included) has a kernel,
    no device tensor has a refused dtype, all are strided and no softmax or norm row is longer than the capability
    file's ``limits.row_limits`` for its op (``limits.max_softmax_norm_row_elements`` in older files); else ``skip`` naming the first op, dtype, row or layout missing. Failed: ``xfail``. No twin, skipped, timed out, crashed or lost: the static reading decides.
    """
    if trace is None:
        return None, f"no CPU trace ({tools.caps.untraced.get(test.id, 'none recorded')})"
    outcome = trace.outcome
    shadow = trace.kind == "device-shadow"
    twin = (
        f"the device-shadow run of {trace.twin or test.id} (snpu's tensors, CPU's kernels)"
        if shadow
        else f"the CPU trace of {trace.twin or 'its CPU twin'}"
    )
    if outcome == "failed":
        fails = "fails in the shadow run, where no snpu kernel ran" if shadow else "fails on the CPU too"
        return AgentAnswer(
            id=test.id,
            mode="xfail",
            confidence="medium",
            reason=_clip(f"[agent:offline] read {twin}: {fails}: {trace.error}"),
        ), ""
    if outcome != "passed":
        why = (_SHADOW_LOST if shadow else _TRACE_LOST).get(outcome, outcome)
        detail = plain(trace.error)[:80]
        why += f": {detail}" if detail and outcome in ("lost", "crashed") else ""
        return None, f"no device-shadow trace ({why})" if shadow else f"no CPU trace ({why})"
    caps = tools.caps
    ops = trace.ops
    for seen in ops:
        op = seen.op
        if not trace_kernel(op, caps):
            return _trace_skip(test, twin, cap_ref, f"{op}, which {caps.device} has no kernel for"), ""
        bad = [d for d in seen.dtypes if refused(caps, d)]
        if bad:
            return _trace_skip(test, twin, cap_ref, f"{op} on {bad[0]} device tensors, a dtype {caps.device} refuses"), ""
        row_limits, key = _row_limits(caps, op)
        too_long = [
            (d, limit) for d in seen.dtypes if isinstance(limit := row_limits.get(d), int) and (seen.row or 0) > limit
        ]
        if too_long:
            d, limit = too_long[0]
            return _trace_skip(
                test, twin, cap_ref, f"{op} on rows of {seen.row} {d} elements; {caps.device} holds at most "
                f"{limit} ({key})"
            ), ""
        layouts = [lay for lay in seen.layouts if lay != "strided"]
        if layouts:
            return _trace_skip(
                test, twin, cap_ref, f"{op} on {layouts[0]} device tensors; {caps.device} holds strided tensors only"
            ), ""
    shown = ", ".join(o.op.split("::", 1)[-1] for o in ops[:6]) + (" ..." if len(ops) > 6 else "")
    return AgentAnswer(
        id=test.id,
        mode="run",
        confidence="high" if ops else "medium",
        reason=_clip(
            f"[agent:offline] read {twin} and {cap_ref}: it passes "
            + ("in the shadow run" if shadow else "on the CPU")
            + " and "
            + (
                f"every aten op its device tensors go through ({len(ops)}: {shown}) runs on {caps.device}"
                if ops
                else "calls no aten op on a device tensor"
            )
        ),
    ), ""


def _row_limits(caps: Capabilities, op: str) -> tuple[dict[str, int], str]:
    """The longest row per dtype the device's kernel for ``op`` holds at once, and the capability key it came from:
    ``limits.row_limits`` names each whole-row kernel (``aten::_softmax``); older files have one
    ``limits.max_softmax_norm_row_elements`` for every softmax and norm."""
    base = op.split(".", 1)[0]
    per_op = caps.limits.get("row_limits")
    if isinstance(per_op, dict) and isinstance(per_op.get(base), dict):
        return per_op[base], f"limits.row_limits[{base}]"
    shared = caps.limits.get("max_softmax_norm_row_elements")
    return (shared if isinstance(shared, dict) else {}), "limits.max_softmax_norm_row_elements"


def _trace_skip(test: InventoryTest, twin: str, cap_ref: str, what: str) -> AgentAnswer:
    return AgentAnswer(
        id=test.id,
        mode="skip",
        confidence="high",
        reason=_clip(f"[agent:offline] read {twin} and {cap_ref}: it calls {what}"),
    )


class OfflineAgent:
    """Deterministic twin of the Claude agent."""

    name = "offline"

    def decide(self, tests: list[InventoryTest], tools: Tools) -> tuple[dict[str, AgentAnswer], Usage]:
        answers: dict[str, AgentAnswer] = {}
        tools.read_capabilities()
        cap_ref = f"capability file {tools.caps.digest[:8]}"
        no_trace: dict[str, str] = {}  # test id -> why its CPU trace could not decide (then the static reading does)
        for test in tests:
            if tools.caps.cpu_traces is not None:
                tools.calls.append(f"read_cpu_trace({test.id})")
                traced, why = trace_answer(test, tools.cpu_trace(test.id), tools, cap_ref)
                if traced is not None:
                    answers[test.id] = traced
                    continue
                no_trace[test.id] = why
            if "module" in test.features and test.op:  # untraced: the module's functional op decides
                answers[test.id] = self._module(test, tools, cap_ref)
                continue
            fn = tools.test_function(test.id)
            if fn is None:
                answers[test.id] = AgentAnswer(
                    id=test.id,
                    mode="skip",
                    confidence="low",
                    reason=f"[agent:offline] read {cap_ref}; the test's source is not readable here, so it stays "
                    "skipped until a reviewer or a run decides",
                )
                continue
            tools.calls.append(f"read_test_source({test.id})")
            src_ref = f"test source {digest(ast.dump(fn))[:8]}"
            if test.op:
                tools.read_opinfo(test.op)
            ops, python = _torch_calls(fn, test.dtype, test.device)  # one walk for both lists
            calls = sorted(set(ops) | set(indirect_calls(fn, test)))
            py_note = (
                f"; {', '.join(python[:3])}{' ...' if len(python) > 3 else ''} "
                f"{'is' if len(python) == 1 else 'are'} Python over other ops, no kernel of {'its' if len(python) == 1 else 'their'} own"
                if python
                else ""
            )
            # a plain TestCase's test (not instantiated per device type) or a device argument that reaches nothing
            host_test = not test.per_device and not names_the_device(fn, tools.caps.device)
            on_host = host_test or device_reaches(fn, test.dtype, test.device) is False
            missing = [
                c for c in calls if c == "torch.cuda" or not (tools.supports(c) or self._decomposes(c, tools))
            ]
            if runs_backward(fn, test.dtype, test.device):
                missing += [
                    f"{c} (backward: {b})"
                    for c in calls
                    if c not in missing
                    for b in missing_backward(c, tools)
                ]
            storages = (
                []
                if tools.caps.feature("device_storage_allocation", True)
                else device_storages(fn, test.dtype, test.device)
            )
            gone = missing_host_calls(fn, test.dtype, test.device)
            if on_host and not gone:
                answers[test.id] = AgentAnswer(
                    id=test.id,
                    mode="run",
                    confidence="medium",
                    reason=f"[agent:offline] read {src_ref}: "
                    + (
                        "its class is not instantiated per device type and its body names no "
                        f"{tools.caps.device} device, so what it builds stays on the CPU"
                        if host_test
                        else "its device argument reaches nothing it builds (read only in device-type conditions, "
                        "or rebound), so its tensors and storages are on the CPU or another explicit device"
                    )
                    + f" and {tools.caps.device} runs none of it",
                )
            elif storages and not missing:
                answers[test.id] = AgentAnswer(
                    id=test.id,
                    mode="skip",
                    confidence="medium",
                    reason=f"[agent:offline] read {src_ref} and {cap_ref}: it allocates a storage on the device "
                    f"({', '.join(storages)}), which {tools.caps.device}'s capability file marks unsupported "
                    "(device_storage_allocation)",
                )
            elif missing:
                shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
                answers[test.id] = AgentAnswer(
                    id=test.id,
                    mode="skip",
                    confidence="medium",
                    reason=f"[agent:offline] read {src_ref} and {cap_ref}: it calls {shown}, which "
                    f"{tools.caps.device} has no kernel for",
                )
            elif gone:
                answers[test.id] = AgentAnswer(
                    id=test.id,
                    mode="xfail",
                    confidence="medium",
                    reason=f"[agent:offline] read {src_ref}: it calls {', '.join(gone)}, which the installed "
                    "library does not have, so it raises AttributeError on every device",
                )
            elif bad := [d for d in self._built(fn, test, tools) if refused(tools.caps, d)]:
                answers[test.id] = AgentAnswer(
                    id=test.id,
                    mode="skip",
                    confidence="medium",
                    reason=f"[agent:offline] read {src_ref} and {cap_ref}: its body builds {', '.join(bad)} "
                    f"tensors, which {tools.caps.device} refuses"
                    + (
                        f" ({tools.default_dtype(test.id)} is the default dtype its module or decorators set)"
                        if tools.default_dtype(test.id) in bad
                        else ""
                    ),
                )
            elif calls:
                shown = ", ".join(calls[:5]) + (" ..." if len(calls) > 5 else "")
                composite = [c for c in calls if not tools.supports(c)]
                via = (
                    f" (none needed of its own for {', '.join(composite[:5])}: torch decomposes it into other "
                    "aten ops, or it only reads metadata)"
                    if composite
                    else ""
                )
                answers[test.id] = AgentAnswer(
                    id=test.id,
                    mode="run",
                    confidence="medium",
                    reason=f"[agent:offline] read {src_ref} and {cap_ref}: every op it calls ({shown}) has a "
                    f"{tools.caps.device} kernel{via}{py_note}",
                )
            else:
                answers[test.id] = AgentAnswer(
                    id=test.id,
                    mode="run",
                    confidence="low",
                    reason=f"[agent:offline] read {src_ref} and {cap_ref}: it calls no operator beyond tensor "
                    f"creation and checks{py_note}",
                )
        for tid, why in no_trace.items():
            a = answers.get(tid)
            if a is not None:
                reason = a.reason.replace("[agent:offline] ", f"[agent:offline] {why}; static reading: ", 1)
                answers[tid] = a.model_copy(update={"reason": _clip(reason)})
        return answers, Usage()

    @staticmethod
    def _decomposes(name: str, tools: Tools) -> bool:
        """An op with no kernel of its own runs as what it decomposes into (:func:`kernel_free`), unless the
        capability sweep ran its samples and they failed: then what it decomposes into is missing. A value
        mismatch of an op documented as returning uninitialized data (``empty_permuted``) is no such failure."""
        return kernel_free(name) and not any(
            name in failed and not (failed[name].startswith("AssertionError") and uninitialized_result(name))
            for failed in tools.caps.opinfo_failures.values()
        )

    @staticmethod
    def _built(fn: ast.FunctionDef, test: InventoryTest, tools: Tools) -> list[str]:
        """Dtypes the body builds by name, and the default dtype its module or decorators set where the
        body builds tensors in the default dtype."""
        built = body_dtypes(fn, test.dtype, test.device)
        default = tools.default_dtype(test.id)
        if default and default not in built and default_dtype_builds(fn, test.dtype, test.device):
            built.append(default)
        return built

    def _module(self, test: InventoryTest, tools: Tools, cap_ref: str) -> AgentAnswer:
        """A ModuleInfo test: is the module's functional op among the backend's aten ops?"""
        name = test.op.rsplit(".", 1)[-1]
        op = snake(name)
        candidates = [
            f"nn.functional.{op}",
            f"nn.functional.{name.lower()}",
            op,
            name.lower(),
            f"native_{op}",
        ]
        tools.calls.append(f"read_capabilities(ops={candidates})")
        hit = next((c for c in candidates if tools.supports(c)), None)
        if hit:
            op = hit
            return AgentAnswer(
                id=test.id,
                mode="run",
                confidence="medium",
                reason=f"[agent:offline] read {cap_ref}: module {test.op} computes through {op}, "
                f"which {tools.caps.device} supports",
            )
        return AgentAnswer(
            id=test.id,
            mode="skip",
            confidence="low",
            reason=f"[agent:offline] read {cap_ref}: module {test.op} would need {op} (or its "
            f"functional form), which {tools.caps.device} does not list",
        )
