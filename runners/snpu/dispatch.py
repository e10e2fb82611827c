"""Routing of aten ops on snpu tensors: to a kernel, or to the unsupported-op policy.

``call(func, args, kwargs)`` is what ``SnpuTensor.__torch_dispatch__`` runs. It

1. refuses float64 and complex (the machine has no such units) with ``SnpuDtypeError``,
   at every entry: tensor inputs, Python complex scalars, a requested dtype, and any
   result a kernel would produce in such a dtype;
2. refuses mixing snpu tensors with non-scalar CPU tensors, and a CPU tensor as
   ``out=``, as CUDA does;
3. finds the kernel registered for the op's overload (``aten::add.Tensor``) or packet
   (``aten::add``), runs it on the device memory (CPU tensors) and wraps the results;
4. without a kernel: raises ``SnpuUnsupportedOpError`` (a ``NotImplementedError`` naming
   the op, the device and the capability file), or with ``CRCR_SNPU_FALLBACK=cpu`` runs
   the op on the CPU, logs it once per op and counts it.

``prims::*`` ops (what ``torch._refs`` calls) run their aten implementation on the snpu
tensors, so each reaches the snpu kernel of the aten op it is made of. ``out=`` calls
follow CPU's rules: the result dtype must be castable to ``out``'s (else the same
``RuntimeError``), and a non-empty ``out`` of the wrong shape is resized with the same
deprecation ``UserWarning``.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import return_and_correct_aliasing

from runners.snpu import counters, overlap
from runners.snpu.errors import SnpuDtypeError, SnpuKernelResultError, SnpuUnsupportedOpError
from runners.snpu.tensor import SnpuTensor

log = logging.getLogger("runners.snpu")

KernelFn = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]

REFUSED_DTYPES = frozenset({torch.float64, torch.complex64, torch.complex128, torch.complex32})
NATIVE_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Kernel:
    """An snpu implementation of one aten overload (or every overload of a packet)."""

    name: str
    fn: KernelFn
    category: str
    keep_device: bool = False  # the kernel sees the requested device (``_to_copy``)
    # how the op runs: "tiled" (a tile plan, each tile loading only its region),
    # "whole" (one whole-tensor operation on device memory, costed as one DMA) or
    # "view" (no data moves)
    execution: str = "whole"
    # a row-wise kernel that holds a whole row in one tile and cannot split it: "row" when
    # the tile also holds an output row (softmax, layer_norm), "one" for one value per row
    # (argmax, nll_loss); the capability file states its longest row (limits.row_limits)
    whole_row: str | None = None


EXECUTIONS = ("tiled", "whole", "view")
WHOLE_ROWS = ("row", "one")


class DuplicateKernelError(RuntimeError):
    """Two kernels registered for one aten name: the later would silently win."""


KERNELS: dict[str, Kernel] = {}

# called with every kernel that runs (the OpInfo sweep uses it to tell which entries
# need whole-tensor kernels); None when nobody listens
observer: Callable[[Kernel], None] | None = None

def notify(kernel: Kernel) -> None:
    """Tell the observer, if any, that ``kernel`` runs (kernels registered outside ``call``,
    such as attention on the autograd key, call it themselves)."""
    if observer is not None:
        observer(kernel)


# ops that legitimately take CPU tensors next to snpu ones (copies and CPU indices)
_MIXED_DEVICE_OK = frozenset(
    {
        "aten::copy_",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
        "aten::_to_copy",
        "aten::index.Tensor",
        "aten::index_put_",
        "aten::index_put",
        "aten::_index_put_impl_",
        "aten::set_.source_Storage_storage_offset",
    }
)


def register(
    *names: str, category: str, execution: str, keep_device: bool = False, whole_row: str | None = None
) -> Callable[[KernelFn], KernelFn]:
    """Register ``fn`` as the snpu kernel of each aten name (overload or packet).

    ``execution`` says how the kernel runs, ``whole_row`` whether it needs a whole row in
    one tile (see ``Kernel``). A name registered twice raises ``DuplicateKernelError``:
    the second kernel would silently replace the first.
    """
    if execution not in EXECUTIONS:
        raise ValueError(f"execution must be one of {EXECUTIONS}, not {execution!r}")
    if whole_row is not None and whole_row not in WHOLE_ROWS:
        raise ValueError(f"whole_row must be one of {WHOLE_ROWS} or None, not {whole_row!r}")

    def deco(fn: KernelFn) -> KernelFn:
        fulls = [name if "::" in name else f"aten::{name}" for name in names]
        repeated = sorted({n for n in fulls if fulls.count(n) > 1} | {n for n in fulls if n in KERNELS})
        if repeated:
            raise DuplicateKernelError(
                f"snpu kernel registered twice for {', '.join(repeated)} "
                f"(existing: {', '.join(KERNELS[n].category for n in repeated if n in KERNELS) or 'same call'})"
            )
        for full in fulls:
            KERNELS[full] = Kernel(full, fn, category, keep_device, execution, whole_row)
        return fn

    return deco


def lookup(func: torch._ops.OpOverload) -> Kernel | None:
    """The kernel of ``aten::op.overload``, else of ``aten::op`` (not for ``out=`` overloads)."""
    packet = func._schema.name
    overload = func._overloadname
    kernel = KERNELS.get(f"{packet}.{overload}")
    if kernel is None and "out" not in overload:
        kernel = KERNELS.get(packet)
    return kernel


_functional_of: dict[Any, Any] = {}


def functional_overload(func: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """For an ``out=`` overload, the functional overload with the same other arguments: their names and types
    (``pow.Scalar_out(Scalar self, Tensor exponent)`` is ``pow.Scalar``, not ``pow.Tensor_Tensor``, whose arguments
    have the same names); by names alone only where one functional overload has them."""
    if func in _functional_of:
        return _functional_of[func]
    found = None
    schema = func._schema
    if any(a.is_out for a in schema.arguments):
        want = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
        packet = getattr(torch.ops.aten, schema.name.split("::")[1])
        by_name = []
        for name in packet.overloads():
            cand = getattr(packet, name)
            cs = cand._schema
            if cs.is_mutable or any(a.is_out for a in cs.arguments):
                continue
            have = [(a.name, str(a.type)) for a in cs.arguments]
            if have == want:
                found = cand
                break
            if [n for n, _ in have] == [n for n, _ in want]:
                by_name.append(cand)
        if found is None and len(by_name) == 1:
            found = by_name[0]
    _functional_of[func] = found
    return found


def out_routes(kernel_names: set[str]) -> dict[str, str]:
    """Every ``out=`` overload (its schema writes into an argument) of an op with a kernel that snpu runs, with the
    kernel that computes it: its own, or its packet's where the overload's name does not say ``out``
    (``aten::kthvalue.values`` -> ``aten::kthvalue``), else its functional overload's (``aten::pow.Scalar_out`` ->
    ``aten::pow.Scalar``). An ``out=`` overload missing here is refused."""
    routes: dict[str, str] = {}
    for bare in sorted({n.split(".", 1)[0] for n in kernel_names if n.startswith("aten::")}):
        packet = getattr(torch.ops.aten, bare.split("::", 1)[1], None)
        if packet is None:
            continue
        for name in packet.overloads():
            func = getattr(packet, name)
            if not any(a.is_out for a in func._schema.arguments):
                continue
            if (kernel := lookup(func)) is not None:
                routes[f"{bare}.{name}"] = kernel.name
            elif (functional := functional_overload(func)) is not None and lookup(functional) is not None:
                routes[f"{bare}.{name}"] = f"{bare}.{functional._overloadname}"
    return routes


def fallback_mode() -> str:
    """``cpu`` when ``CRCR_SNPU_FALLBACK=cpu``, else ``error`` (the default)."""
    value = os.environ.get("CRCR_SNPU_FALLBACK", "").strip().lower()
    return "cpu" if value == "cpu" else "error"


# --------------------------------------------------------------------------- unwrap / wrap


def unwrap(x: Any) -> Any:
    if isinstance(x, SnpuTensor):
        return x._data
    if isinstance(x, (list, tuple)):
        return type(x)(unwrap(v) for v in x)
    if isinstance(x, torch.device) and x.type == SnpuTensor_device_type():
        return torch.device("cpu")
    return x


def unwrap_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in kwargs.items():
        if k == "device" and v is not None:
            dev = torch.device(v) if not isinstance(v, torch.device) else v
            out[k] = torch.device("cpu") if dev.type == SnpuTensor_device_type() else dev
        else:
            out[k] = unwrap(v)
    return out


def wrap(x: Any) -> Any:
    if isinstance(x, SnpuTensor):
        return x
    if isinstance(x, torch.Tensor):
        return SnpuTensor(x)
    if isinstance(x, (list, tuple)):
        return type(x)(wrap(v) for v in x)
    return x


_device_type = "privateuseone"


def SnpuTensor_device_type() -> str:
    return _device_type


def set_device_type(name: str) -> None:
    global _device_type
    _device_type = name


# --------------------------------------------------------------------------- checks


def _iter_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    yield b
    for v in kwargs.values():
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            for b in v:
                if isinstance(b, torch.Tensor):
                    yield b


def check_inputs(
    func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], refuse: Callable[[Any, str], None] | None = None
) -> None:
    """Refuse what the machine lacks and what CUDA would refuse too.

    ``refuse(dtype, op)`` is called for a dtype the machine lacks (default: raise ``SnpuDtypeError``); the
    device-shadow run (``runners.snpu.shadow``) records it instead and keeps the device checks."""
    name = func.name()
    refuse = refuse or _raise_dtype
    cpu_seen = False
    for t in _iter_tensors(args, kwargs):
        if isinstance(t, SnpuTensor):
            if t.dtype in REFUSED_DTYPES:
                refuse(t.dtype, name)
        elif t.device.type != "meta" and t.dim() > 0:
            cpu_seen = True
        elif t.dim() == 0 and t.dtype.is_complex and name not in _MIXED_DEVICE_OK:
            # ``1j * t`` reaches here as a wrapped 0-dim complex CPU tensor
            refuse(t.dtype, name)
    for v in (*args, *kwargs.values()):
        if isinstance(v, complex):
            refuse(torch.complex64, name)
    for arg in func._schema.arguments:
        if arg.is_out:
            target = kwargs.get(arg.name)
            targets = target if isinstance(target, (list, tuple)) else (target,)
            for t in targets:
                if isinstance(t, torch.Tensor) and not isinstance(t, SnpuTensor):
                    raise RuntimeError(
                        f"Expected out tensor to have device {_device_type}:0, but got {t.device} instead "
                        f"(when checking arguments for {name})"
                    )
    requested = kwargs.get("dtype")
    if requested in REFUSED_DTYPES and name != "aten::_to_copy":
        refuse(requested, name)
    if cpu_seen and name not in _MIXED_DEVICE_OK:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{_device_type}:0 and cpu! (when checking arguments for {name})"
        )


def _raise_dtype(dtype: Any, op: str) -> None:
    raise SnpuDtypeError(dtype, op)


# --------------------------------------------------------------------------- the entry point


def call(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run one aten op on snpu tensors (see the module docstring)."""
    check_inputs(func, args, kwargs)
    if func.namespace == "prims":
        return _call_prim(func, args, kwargs)
    kernel = lookup(func)
    cpu_args = unwrap(args)
    if kernel is not None and kernel.keep_device:
        cpu_kwargs = {k: v if k == "device" else unwrap(v) for k, v in kwargs.items()}
    else:
        cpu_kwargs = unwrap_kwargs(kwargs)
    if (
        kernel is None
        and (functional := functional_overload(func)) is not None
        and lookup(functional) is not None
    ):
        return _call_out(func, functional, args, kwargs)
    if kernel is None:
        if fallback_mode() != "cpu":
            raise SnpuUnsupportedOpError(func.name())
        out = _run_on_cpu(func, cpu_args, cpu_kwargs)
    else:
        # a kernel runs many small tile computations: intra-op threads only add
        # synchronisation (and stall badly on a loaded machine), as one core runs a tile
        notify(kernel)
        threads = torch.get_num_threads()
        if threads != 1:
            torch.set_num_threads(1)
        try:
            if kernel.execution == "tiled" and not func._schema.is_mutable:
                # under the tiling proof the kernel gets guarded copies of its inputs
                from runners.snpu.kernels.common import guarded_inputs

                with guarded_inputs(cpu_args, cpu_kwargs) as (g_args, g_kwargs):
                    out = kernel.fn(func, g_args, g_kwargs)
            else:
                out = kernel.fn(func, cpu_args, cpu_kwargs)
        finally:
            if threads != 1:
                torch.set_num_threads(threads)
    if isinstance(out, _Raw):
        return out.value
    check_result(func, out)
    for t in _iter_tensors(out if isinstance(out, (tuple, list)) else (out,), {}):
        if t.dtype in REFUSED_DTYPES and not isinstance(t, SnpuTensor):
            # e.g. a real tensor times a complex 0-dim tensor a kernel let through
            raise SnpuDtypeError(t.dtype, func.name())
    return finish(func, args, kwargs, wrap(out))


def finish(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], wrapped: Any) -> Any:
    """Hand an op's wrapped result back to PyTorch: the wrappers of mutated tensors follow their device memory,
    and the result aliases its inputs as the op's schema says (also snpu's shadow mode's last step)."""
    if func._schema.is_mutable:
        # out= and resize_/transpose_-like ops may change a tensor's shape: the wrapper
        # must follow its device memory
        for t in _iter_tensors(args, kwargs):
            if isinstance(t, SnpuTensor):
                _resync(t)
        if torch.Tag.inplace_view in func.tags:
            return args[0]
    return return_and_correct_aliasing(func, args, kwargs, wrapped)


def check_result(func: torch._ops.OpOverload, out: Any) -> None:
    """Refuse a kernel result that is not what the op's schema returns, naming the op.

    Without it a kernel returning a wrong value surfaces far away (inside autograd as
    ``Unable to cast ... to Tensor``, with no op named).
    """
    returns = func._schema.returns
    if not returns:
        return
    if len(returns) > 1:
        if not isinstance(out, (tuple, list)) or len(out) != len(returns):
            raise SnpuKernelResultError(
                func.name(), f"returned {_describe(out)} where the schema returns {len(returns)} values"
            )
        values = tuple(out)
    else:
        values = (out,)
    for ret, value in zip(returns, values, strict=True):
        kind = ret.type.kind()
        if value is None and kind in ("OptionalType", "TensorType"):
            continue  # None is an undefined tensor (a backward's output_mask=False slot)
        if kind == "OptionalType":
            kind = ret.type.getElementType().kind()
        if kind == "TensorType" and not isinstance(value, torch.Tensor):
            raise SnpuKernelResultError(func.name(), f"returned {_describe(value)} where the schema returns a Tensor")
        if (
            kind == "ListType"
            and ret.type.getElementType().kind() == "TensorType"
            and not (isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value))
        ):
            raise SnpuKernelResultError(
                func.name(), f"returned {_describe(value)} where the schema returns a list of Tensors"
            )


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__} ({str(value)[:60]!r})" if isinstance(value, str) else f"a {type(value).__name__}"


def _resync(t: SnpuTensor) -> None:
    d = t._data
    if (
        t.shape == d.shape
        and t.stride() == d.stride()
        and t.storage_offset() == d.storage_offset()
        and t.dtype == d.dtype
    ):
        return
    from torch.utils._mode_utils import no_dispatch

    with no_dispatch():
        torch.ops.aten.as_strided_.default(t, d.shape, d.stride(), d.storage_offset())


def _call_out(func: Any, functional: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``op(..., out=t)``: run the functional kernel, then resize ``t`` and copy into it."""
    outs = {a.name: kwargs[a.name] for a in func._schema.arguments if a.is_out and a.name in kwargs}
    rest = {k: v for k, v in kwargs.items() if k not in outs}
    if (
        len(outs) == 1
        and rest.get("dtype") is None
        and any(a.name == "dtype" and a.kwarg_only for a in functional._schema.arguments)
    ):
        # reductions take their dtype from out= when none is given (ATen's
        # get_dtype_from_result): sum(x, out=long) accumulates in long, as on CPU
        rest["dtype"] = next(iter(outs.values())).dtype
    # PyTorch's own out= checks (dtype casting, resize warning) on meta tensors; where
    # the out= overload has no meta kernel, CPU's general rules below
    checked, warned = _meta_out_checks(func, args, kwargs)
    kernel = lookup(functional)
    overlap.check_out(
        functional._schema.name,
        kernel is not None and kernel.category in ("elementwise", "activation"),
        unwrap((args, tuple(rest.values()))),
        unwrap(tuple(outs.values())),
    )
    result = call(functional, args, rest)
    results = result if isinstance(result, (tuple, list)) else (result,)
    for target, value in zip(outs.values(), results, strict=False):
        if not isinstance(value, torch.Tensor):
            continue
        if checked:
            if target.shape != value.shape:
                if warned and target.numel() != 0:
                    warnings.warn(_resize_warning(target.shape, value.shape), UserWarning, stacklevel=2)
                target.resize_(value.shape)
            target.copy_(value)
            continue
        if not torch.can_cast(value.dtype, target.dtype):
            raise RuntimeError(
                f"result type {_type_name(value.dtype)} can't be cast to the desired output type "
                f"{_type_name(target.dtype)}"
            )
        if target.shape != value.shape:
            if target.numel() != 0:
                warnings.warn(_resize_warning(target.shape, value.shape), UserWarning, stacklevel=2)
            target.resize_(value.shape)
        target.copy_(value)
    ret = tuple(outs.values())
    return ret[0] if len(ret) == 1 else ret


def _meta_out_checks(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, bool]:
    """Run the ``out=`` overload on meta copies: PyTorch decides what it refuses.

    Returns (checked, resize warned); checked is False when the overload has no meta
    kernel (the caller applies CPU's general rules). Meta kernels are often Python
    references with their own wording: the casting error and the resize warning are
    re-worded as CPU's kernels word them, which is what upstream tests match.
    """
    from torch.utils._mode_utils import no_dispatch

    def meta(x: Any) -> Any:
        if isinstance(x, SnpuTensor):
            d = x._data
            with no_dispatch():
                return torch.empty_strided(d.shape, d.stride(), dtype=d.dtype, device="meta")
        if isinstance(x, torch.Tensor):
            return x.to("meta")
        if isinstance(x, (list, tuple)):
            return type(x)(meta(v) for v in x)
        return x

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            func(*meta(args), **{k: meta(v) for k, v in kwargs.items()})
    except NotImplementedError:
        return False, False
    except RuntimeError as exc:
        text = str(exc)
        cast = re.search(r"cast from (torch\.\w+) to out tensor with dtype (torch\.\w+)", text)
        if cast:
            src, dst = (getattr(torch, n.removeprefix("torch.")) for n in cast.groups())
            raise RuntimeError(
                f"result type {_type_name(src)} can't be cast to the desired output type {_type_name(dst)}"
            ) from None
        if "meta" in text.lower() or "data-dependent" in text or "item()" in text:
            return False, False
        raise
    for w in caught:
        if "was resized" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return True, any("was resized" in str(w.message) for w in caught)


def _type_name(dtype: torch.dtype) -> str:
    """ATen's scalar type name (``Float``, ``Long``), as CPU's casting error spells it."""
    return {
        torch.float32: "Float",
        torch.float16: "Half",
        torch.bfloat16: "BFloat16",
        torch.float64: "Double",
        torch.int64: "Long",
        torch.int32: "Int",
        torch.int16: "Short",
        torch.int8: "Char",
        torch.uint8: "Byte",
        torch.bool: "Bool",
    }.get(dtype, str(dtype).removeprefix("torch."))


def _resize_warning(old: torch.Size, new: torch.Size) -> str:
    """CPU's deprecation warning for resizing a non-empty ``out`` (ATen's Resize.cpp)."""
    return (
        f"An output with one or more elements was resized since it had shape {list(old)}, which does not "
        f"match the required output shape {list(new)}. This behavior is deprecated, and in a future "
        "PyTorch release outputs will not be resized unless they have zero elements. You can explicitly "
        "reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0)."
    )


def _call_prim(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A ``prims::`` op: its aten implementation on the snpu tensors (snpu kernels run)."""
    packet = getattr(torch.ops.prims, func._schema.name.split("::")[1], None)
    impl = getattr(packet, "impl_aten", None)
    if impl is None:
        if fallback_mode() != "cpu":
            raise SnpuUnsupportedOpError(func.name())
        return wrap(_run_on_cpu(func, unwrap(args), unwrap_kwargs(kwargs)))
    return impl(*args, **kwargs)


class _Raw:
    """A kernel result returned as is (a CPU tensor or a Python scalar), never wrapped."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def raw(value: Any) -> _Raw:
    return _Raw(value)


_logged_fallbacks: set[str] = set()


def _run_on_cpu(func: torch._ops.OpOverload, cpu_args: tuple[Any, ...], cpu_kwargs: dict[str, Any]) -> Any:
    name = func.name()
    level = logging.DEBUG if name in _logged_fallbacks else logging.WARNING
    _logged_fallbacks.add(name)
    log.log(level, "snpu: %s has no snpu kernel; running it on the CPU (CRCR_SNPU_FALLBACK=cpu)", name)
    out = func(*cpu_args, **cpu_kwargs)
    moved = sum(t.numel() * t.element_size() for t in _iter_tensors(tuple(cpu_args), cpu_kwargs))
    counters.record(counters.OpRecord(op=name, bytes_moved=moved, fallback=True))
    return out
