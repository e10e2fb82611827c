"""What every tiled kernel shares: loading a tile, running a plan, recording counters.

``load(src, region)`` is the only way a kernel's tile sees device memory. Under
``poison_outside_tiles()`` (a test and debugging aid) each load first replaces every
element outside the tile's region with poison (NaN, or the dtype's minimum) so that a
kernel reading outside its own sticks produces a different result.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

from runners.snpu import counters, machine
from runners.snpu.planner import Plan

_state = threading.local()


@contextlib.contextmanager
def poison_outside_tiles() -> Iterator[None]:
    """Within the block, every tile load poisons the memory outside its region."""
    prev = getattr(_state, "poison", False)
    _state.poison = True
    try:
        yield
    finally:
        _state.poison = prev


def poisoning() -> bool:
    return getattr(_state, "poison", False)


def _poison_value(dtype: torch.dtype) -> float | int | bool:
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).min


def load(src: torch.Tensor, region: tuple[slice, ...]) -> torch.Tensor:
    """The tile's slice of ``src`` (a copy in scratchpad when poisoning)."""
    if not poisoning():
        return src[region]
    poisoned = torch.full_like(src, _poison_value(src.dtype))
    poisoned[region] = src[region]
    # a kernel that indexes ``poisoned`` outside ``region`` reads poison
    return poisoned[region].clone()


def run(plan: Plan, op: str) -> None:
    """Record an executed plan's counters (for the open ``profile()`` blocks, if any)."""
    if counters.active():
        counters.record(plan.record(op))


def record_simple(op: str, nbytes: int, sticks: int = 0, cycles: int | None = None) -> None:
    """Counters of a data-movement op that runs as one DMA (views move nothing)."""
    if not counters.active():
        return
    m = machine.current()
    if cycles is None:
        cycles = int(nbytes / m.memory_bytes_per_cycle) + (m.tile_overhead_cycles if nbytes else 0)
    counters.record(
        counters.OpRecord(
            op=op,
            cycles=cycles,
            core_cycles=cycles,
            bytes_moved=nbytes,
            sticks=sticks or -(-nbytes // m.stick_bytes),
            tiles=1 if nbytes else 0,
            cores_used=1 if nbytes else 0,
            tiles_per_core=1 if nbytes else 0,
        )
    )


def meta_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The op's output on meta tensors: its shape and dtype, PyTorch's own checks."""
    if func._schema.is_mutable:
        # never run an in-place op on real data just to learn its shape
        return func(*to_meta(args, scalars=True), **to_meta(kwargs, scalars=True))
    try:
        return func(*to_meta(args), **to_meta(kwargs))
    except RuntimeError as exc:
        if "meta" not in str(exc):
            raise
        # a few meta kernels refuse CPU scalars next to meta tensors: move those too
        return func(*to_meta(args, scalars=True), **to_meta(kwargs, scalars=True))


def to_meta(x: Any, scalars: bool = False) -> Any:
    if isinstance(x, torch.Tensor):
        if scalars:
            return x.to("meta")
        # CPU scalars stay as they are: meta kernels accept them and promotion needs them
        return x if x.dim() == 0 and x.device.type == "cpu" else x.to("meta")
    if isinstance(x, (list, tuple)):
        return type(x)(to_meta(v, scalars) for v in x)
    return x


def nbytes_of(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(nbytes_of(v) for v in x)
    return 0


def rows_view(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """``x`` with ``dim`` moved last, as a contiguous (rows, len) matrix, and the moved shape."""
    dim = dim % max(x.dim(), 1)
    moved = x.movedim(dim, -1) if x.dim() else x.reshape(1)
    shape = tuple(moved.shape)
    length = shape[-1] if shape else 1
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return moved.reshape(rows, length), shape


def unrows(y2: torch.Tensor, moved_shape: tuple[int, ...], dim: int, ndim: int) -> torch.Tensor:
    """Inverse of ``rows_view`` for an output of the same shape as the input."""
    if ndim == 0:
        return y2.reshape(())
    return y2.reshape(moved_shape).movedim(-1, dim % ndim).contiguous()
