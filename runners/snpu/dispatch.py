"""Routing of aten ops on snpu tensors: to a kernel, or to the unsupported-op policy.

``call(func, args, kwargs)`` is what ``SnpuTensor.__torch_dispatch__`` runs. It

1. refuses float64 and complex (the machine has no such units) with ``SnpuDtypeError``;
2. refuses mixing snpu tensors with non-scalar CPU tensors, as CUDA does;
3. finds the kernel registered for the op's overload (``aten::add.Tensor``) or packet
   (``aten::add``), runs it on the device memory (CPU tensors) and wraps the results;
4. without a kernel: raises ``SnpuUnsupportedOpError`` (a ``NotImplementedError`` naming
   the op, the device and the capability file), or with ``CRCR_SNPU_FALLBACK=cpu`` runs
   the op on the CPU, logs it once per op and counts it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import return_and_correct_aliasing

from runners.snpu import counters
from runners.snpu.errors import SnpuDtypeError, SnpuUnsupportedOpError
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


KERNELS: dict[str, Kernel] = {}

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


def register(*names: str, category: str, keep_device: bool = False) -> Callable[[KernelFn], KernelFn]:
    """Register ``fn`` as the snpu kernel of each aten name (overload or packet)."""

    def deco(fn: KernelFn) -> KernelFn:
        for name in names:
            full = name if name.startswith("aten::") else f"aten::{name}"
            KERNELS[full] = Kernel(full, fn, category, keep_device)
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
    """For an ``out=`` overload, the functional overload with the same other arguments."""
    if func in _functional_of:
        return _functional_of[func]
    found = None
    schema = func._schema
    out_names = {a.name for a in schema.arguments if a.is_out}
    if out_names:
        want = [a.name for a in schema.arguments if not a.is_out]
        packet = getattr(torch.ops.aten, schema.name.split("::")[1])
        for name in packet.overloads():
            cand = getattr(packet, name)
            cs = cand._schema
            if cs.is_mutable or any(a.is_out for a in cs.arguments):
                continue
            if [a.name for a in cs.arguments] == want:
                found = cand
                break
    _functional_of[func] = found
    return found


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


def check_inputs(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse what the machine lacks and what CUDA would refuse too."""
    name = func.name()
    cpu_seen = False
    for t in _iter_tensors(args, kwargs):
        if isinstance(t, SnpuTensor):
            if t.dtype in REFUSED_DTYPES:
                raise SnpuDtypeError(t.dtype, name)
        elif t.device.type != "meta" and t.dim() > 0:
            cpu_seen = True
    requested = kwargs.get("dtype")
    if requested in REFUSED_DTYPES and name != "aten::_to_copy":
        raise SnpuDtypeError(requested, name)
    if cpu_seen and name not in _MIXED_DEVICE_OK:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{_device_type}:0 and cpu! (when checking arguments for {name})"
        )


# --------------------------------------------------------------------------- the entry point


def call(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run one aten op on snpu tensors (see the module docstring)."""
    check_inputs(func, args, kwargs)
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
        threads = torch.get_num_threads()
        if threads != 1:
            torch.set_num_threads(1)
        try:
            out = kernel.fn(func, cpu_args, cpu_kwargs)
        finally:
            if threads != 1:
                torch.set_num_threads(threads)
    if isinstance(out, _Raw):
        return out.value
    if func._schema.is_mutable:
        # out= and resize_/transpose_-like ops may change a tensor's shape: the wrapper
        # must follow its device memory
        for t in _iter_tensors(args, kwargs):
            if isinstance(t, SnpuTensor):
                _resync(t)
        if torch.Tag.inplace_view in func.tags:
            return args[0]
    return return_and_correct_aliasing(func, args, kwargs, wrap(out))


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
    result = call(functional, args, rest)
    results = result if isinstance(result, (tuple, list)) else (result,)
    for target, value in zip(outs.values(), results, strict=False):
        if target.shape != value.shape:
            target.resize_(value.shape)
        target.copy_(value)
    ret = tuple(outs.values())
    return ret[0] if len(ret) == 1 else ret


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
