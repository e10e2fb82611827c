"""snpu's shadow mode: snpu's tensors, device identity and data movement, the CPU's kernels.

The device-shadow trace (``runners.device_shadow``) runs an upstream test *as it runs on snpu* (the PRIVATEUSE1
instantiation, ``SnpuTensor`` wrapper subclass, ``torch.device("snpu")``) to learn which aten ops its device
tensors go through, while no snpu compute kernel decides the outcome. While :func:`shadow` is active,
``runners.snpu.dispatch.call`` is replaced by :func:`_shadow_call`, which for every aten op reaching snpu:

* records it (the name the CPU trace gives it, the dtypes and layouts of its snpu tensors, their largest numel and
  the softmax / norm row it reduces over, ``runners.cpu_trace.row_length``) *before* running it, so an op that
  raises is recorded too; ``prims::`` ops run their aten implementation on the snpu tensors as snpu routes them, so
  each aten op they are made of is recorded on its own (a prim without an aten implementation, which snpu refuses,
  is recorded under its own name);
* records, never raises, what snpu refuses for want of units: float64 and complex tensors, requested dtypes and
  Python complex scalars (the planner refuses them afterwards from the capability file, naming the op and dtype),
  except in a call the CPU refuses too (a test checking that torch raises, ``index_fill_`` of a complex scalar into a
  float tensor): there snpu's dtype error is raised, as on the device, where it comes first, and the refused dtype
  is not recorded (a test that catches the error does not need it; one that does not fails with it);
  the factory kernels' dtype check (``empty.memory_format``, ``empty_strided``) records too;
* keeps the device checks a real backend makes: snpu tensors mixed with non-scalar CPU tensors, a CPU tensor as
  ``out=`` (``dispatch.check_inputs``);
* runs the op itself as ``CRCR_SNPU_FALLBACK=cpu`` does: ``func`` on the device memory (the unwrapped CPU
  tensors), whatever snpu's kernel registry says, and wraps the results as snpu tensors. Nothing of snpu's kernels,
  tile planner, row limits or tiling proof runs.

What stays snpu's own, because it defines what "a tensor on the device" is:

* ``_to_copy`` keeps snpu's device routing (``keep_device``): to the host it returns a plain CPU tensor, anywhere
  else an snpu tensor (without snpu's float64 refusal, which is recorded);
* views and copies (snpu's ``view`` and ``data_movement`` kernels, ``copy_``, ``set_``) are ``func`` on the device
  memory in snpu too, so running them that way here *is* snpu's implementation: a view shares its base's device
  memory, a copy between host and device goes through ``_copy_from`` (snpu's PrivateUse1 kernel, untouched);
* ``_local_scalar_dense``, ``equal`` and the other ``scalar`` kernels return Python values, as snpu's do;
* the factory kernels (``empty``, ``empty_strided``) allocate snpu tensors as snpu does; a storage allocated on the
  device itself still raises ``SnpuStorageError``; mutable and in-place-view ops re-sync the wrapper's shape.

So the verdict of a shadow run (passed, failed, which ops) never depends on snpu's numerics: every value a test
compares was computed by the CPU's kernels on snpu tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from runners.cpu_trace import OpLog
from runners.snpu import device, dispatch
from runners.snpu.tensor import SnpuTensor


class ShadowRecorder(OpLog):
    """The aten ops an snpu test's device tensors went through (``runners.cpu_trace.OpLog``, as the CPU trace
    records them), with the row length the CPU trace computes."""

    def __init__(self, row_length: Any) -> None:
        super().__init__()
        self._row_length = row_length  # runners.cpu_trace.row_length: one definition of a row for both traces

    def row_of(self, name: str, args: tuple[Any, ...]) -> int:
        return self._row_length(name, args)


_active: ShadowRecorder | None = None


def _snpu_tensors(value: Any) -> list[SnpuTensor]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(value) if isinstance(t, SnpuTensor)]


def _shadow_call(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``dispatch.call`` in shadow mode (see the module docstring)."""
    rec = _active
    assert rec is not None
    name = func.name()
    impl = None
    if func.namespace == "prims":
        packet = getattr(torch.ops.prims, func._schema.name.split("::")[1], None)
        impl = getattr(packet, "impl_aten", None)
    if impl is not None:
        # as snpu routes it: each aten op it is made of reaches this function and is recorded; the prim itself
        # needs no kernel of its own (one without an aten implementation is recorded below: snpu refuses it)
        dispatch.check_inputs(func, args, kwargs, refuse=lambda dtype, op: None)
        return impl(*args, **kwargs)
    tensors, row = _snpu_tensors((args, kwargs)), rec.row_of(name, args)
    refused: list[Any] = []
    try:
        dispatch.check_inputs(func, args, kwargs, refuse=lambda dtype, op: refused.append(dtype))
    except Exception:
        rec.record(name, tensors, row)  # an op that raises is recorded too
        raise
    if refused and _raises_on_the_host(func, args, kwargs):
        # the call is an error anyway (a test checking that torch refuses it): snpu refuses it first, with its
        # dtype error, as on the device; a test that catches that error does not need the dtype
        rec.record(name, [t for t in tensors if t.dtype not in refused], row)
        dispatch.check_inputs(func, args, kwargs)
    rec.record(name, tensors, row)
    if refused:
        rec.record(name, [], dtypes=tuple(refused))
    kernel = dispatch.lookup(func)
    cpu_args = dispatch.unwrap(args)
    if kernel is not None and kernel.keep_device:  # _to_copy: snpu's device routing
        target = kwargs.get("device")
        to_host = target is not None and torch.device(target).type == "cpu"
        out = func(*cpu_args, **{**{k: dispatch.unwrap(v) for k, v in kwargs.items()}, "device": torch.device("cpu")})
        if to_host:
            return out
    else:
        out = func(*cpu_args, **dispatch.unwrap_kwargs(kwargs))
    wrapped = dispatch.wrap(out)
    rec.record(name, _snpu_tensors(wrapped))  # a result made in a refused dtype (``.double()``) is recorded too
    return dispatch.finish(func, args, kwargs, wrapped)


def _raises_on_the_host(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``func`` raises when run on copies of its arguments' device memory (the CPU's argument checks)."""
    from torch.utils._pytree import tree_map

    def copy(x: Any) -> Any:
        return x.clone() if isinstance(x, torch.Tensor) else x

    rng = torch.random.get_rng_state()  # a random op drawn here must not shift the test's later draws
    try:
        func(*tree_map(copy, dispatch.unwrap(args)), **tree_map(copy, dispatch.unwrap_kwargs(kwargs)))
    except Exception:
        return True
    finally:
        torch.random.set_rng_state(rng)
    return False


def _shadow_check_dtype(dtype: torch.dtype | None, op: str) -> torch.dtype:
    """The factory kernels' dtype check: the allocation is recorded with its dtype (a refused one too), and made."""
    dtype = dtype or torch.get_default_dtype()
    if _active is not None:
        _active.record(op, [], dtypes=(dtype,))
    return dtype


@contextlib.contextmanager
def shadow(rec: ShadowRecorder) -> Iterator[ShadowRecorder]:
    """Run snpu in shadow mode, recording into ``rec``, for the duration of the block (snpu must be installed)."""
    global _active
    saved = (dispatch.call, device._check_dtype, _active)
    dispatch.call = _shadow_call  # type: ignore[assignment]
    device._check_dtype = _shadow_check_dtype  # type: ignore[assignment]
    _active = rec
    try:
        yield rec
    finally:
        dispatch.call, device._check_dtype, _active = saved  # type: ignore[assignment]
