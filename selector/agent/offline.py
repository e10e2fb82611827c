"""The deterministic agent: decides what rules leave undecided by reading, not guessing.

For each test it reads the test's source and the capability file through the same
read-only tools the Claude agent gets, collects the torch operations the source calls
(from the AST: docstrings and comments are never read as instructions), and decides:
``skip`` when a call has no kernel on the backend, ``run`` otherwise. Every reason says
what was read and which calls decided it.
"""

from __future__ import annotations

import ast
import re

from crcr.contracts.inventory import InventoryTest
from selector.agent.base import AgentAnswer, Usage
from selector.agent.tools import Tools
from selector.capabilities import Capabilities
from selector.fingerprint import digest

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
_DTYPE_HELPER = re.compile(r"^(get_all_\w*dtypes|(all|floating|integral|complex|floating_and_complex)_types(_and\w*)?|"
                           r"all_types_and_complex(_and)?|\w+_dtypes)$")


def snake(name: str) -> str:
    """``AdaptiveAvgPool1d`` -> ``adaptive_avg_pool1d`` (how aten names a module's functional op)."""
    out = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return re.sub(r"_(\d)", r"\1", out)


def _body_nodes(fn: ast.FunctionDef):
    """The nodes of the test's body: its decorators (``@dtypes(*get_all_dtypes())``) and default
    arguments are evaluated when the class is built, never on the device."""
    for stmt in fn.body:
        yield from ast.walk(stmt)


def torch_calls(fn: ast.FunctionDef) -> list[str]:
    """Operator names a test's body calls: ``torch.softmax(...)``, ``F.relu(...)``, ``x.addmm(...)``."""
    found: list[str] = []
    for node in _body_nodes(fn):
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
            if ".cuda." in dotted or dotted.startswith("torch.cuda"):
                found.append("torch.cuda")
                continue
            if dotted.startswith(_HOST_TORCH):
                continue
        if (attr.startswith("_") or attr in NEUTRAL or attr.startswith("assert") or attr in _PY_METHODS
                or _DTYPE_HELPER.match(attr)):
            continue
        found.append(attr)
    return sorted(set(found))


# torch's dtype names and aliases -> the names capability files use.
_DTYPE_ALIASES = {"double": "float64", "float": "float32", "half": "float16", "cfloat": "complex64",
                  "cdouble": "complex128", "chalf": "complex32", "long": "int64", "int": "int32", "short": "int16"}
_DTYPE_NAME = re.compile(r"^((float|bfloat|complex|int|uint)\d+|bool)$")


def body_dtypes(fn: ast.FunctionDef) -> list[str]:
    """Dtypes the body builds tensors in by name: ``torch.double``, ``x.cdouble()``, ``5j`` (complex64),
    ``all_types_and_complex_and(...)`` (complex64 and complex128). Names that are only compared
    (``if dtype == torch.double``) build nothing and are left out."""
    compared: set[int] = set()
    for node in _body_nodes(fn):
        if isinstance(node, ast.Compare):
            compared |= {id(n) for n in ast.walk(node)}
    found: set[str] = set()
    for node in _body_nodes(fn):
        if id(node) in compared:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, complex):
            found.add("complex64")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            name = _DTYPE_ALIASES.get(node.attr, node.attr)
            if _DTYPE_NAME.match(name):
                found.add(name)
        elif isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if callee in ("double", "cdouble", "cfloat", "chalf") and isinstance(node.func, ast.Attribute) and not node.args:
                found.add(_DTYPE_ALIASES[callee])
            elif _DTYPE_HELPER.match(callee) and "complex" in callee:
                found |= {"complex64", "complex128"}
    return sorted(found)


def refused(caps: Capabilities, dtype: str) -> bool:
    """The capability file's answer for a dtype, as the dtype-support rule reads it."""
    if not caps.dtypes or dtype in caps.dtypes or dtype in caps.indexing_dtypes:
        return False
    return not caps.refused_dtypes or dtype in caps.refused_dtypes


class OfflineAgent:
    """Deterministic twin of the Claude agent."""

    name = "offline"

    def decide(self, tests: list[InventoryTest], tools: Tools) -> tuple[dict[str, AgentAnswer], Usage]:
        answers: dict[str, AgentAnswer] = {}
        tools.read_capabilities()
        cap_ref = f"capability file {tools.caps.digest[:8]}"
        for test in tests:
            if "module" in test.features and test.op:
                answers[test.id] = self._module(test, tools, cap_ref)
                continue
            fn = tools.test_function(test.id)
            if fn is None:
                answers[test.id] = AgentAnswer(
                    id=test.id, mode="skip", confidence="low",
                    reason=f"[agent:offline] read {cap_ref}; the test's source is not readable here, so it stays "
                           "skipped until a reviewer or a run decides",
                )
                continue
            tools.calls.append(f"read_test_source({test.id})")
            src_ref = f"test source {digest(ast.dump(fn))[:8]}"
            if test.op:
                tools.read_opinfo(test.op)
            calls = torch_calls(fn)
            missing = [c for c in calls if c == "torch.cuda" or not tools.supports(c)]
            if missing:
                shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
                answers[test.id] = AgentAnswer(
                    id=test.id, mode="skip", confidence="medium",
                    reason=f"[agent:offline] read {src_ref} and {cap_ref}: it calls {shown}, which "
                           f"{tools.caps.device} has no kernel for",
                )
            elif bad := [d for d in body_dtypes(fn) if refused(tools.caps, d)]:
                answers[test.id] = AgentAnswer(
                    id=test.id, mode="skip", confidence="medium",
                    reason=f"[agent:offline] read {src_ref} and {cap_ref}: its body builds {', '.join(bad)} "
                           f"tensors, which {tools.caps.device} refuses",
                )
            elif calls:
                shown = ", ".join(calls[:5]) + (" ..." if len(calls) > 5 else "")
                answers[test.id] = AgentAnswer(
                    id=test.id, mode="run", confidence="medium",
                    reason=f"[agent:offline] read {src_ref} and {cap_ref}: every op it calls ({shown}) has a "
                           f"{tools.caps.device} kernel",
                )
            else:
                answers[test.id] = AgentAnswer(
                    id=test.id, mode="run", confidence="low",
                    reason=f"[agent:offline] read {src_ref} and {cap_ref}: it calls no operator beyond tensor "
                           "creation and checks",
                )
        return answers, Usage()

    def _module(self, test: InventoryTest, tools: Tools, cap_ref: str) -> AgentAnswer:
        """A ModuleInfo test: is the module's functional op among the backend's aten ops?"""
        name = test.op.rsplit(".", 1)[-1]
        op = snake(name)
        candidates = [f"nn.functional.{op}", f"nn.functional.{name.lower()}", op, name.lower(), f"native_{op}"]
        tools.calls.append(f"read_capabilities(ops={candidates})")
        hit = next((c for c in candidates if tools.supports(c)), None)
        if hit:
            op = hit
            return AgentAnswer(id=test.id, mode="run", confidence="medium",
                               reason=f"[agent:offline] read {cap_ref}: module {test.op} computes through {op}, "
                                      f"which {tools.caps.device} supports")
        return AgentAnswer(id=test.id, mode="skip", confidence="low",
                           reason=f"[agent:offline] read {cap_ref}: module {test.op} would need {op} (or its "
                                  f"functional form), which {tools.caps.device} does not list")
