"""What every tiled kernel shares: loading a tile, running a plan, recording counters.

``load(src, region)`` is the only way a kernel's tile sees device memory, and
``tiles(plan)`` the only way it walks its plan. Under ``poison_outside_tiles()`` (the
tiling proof; a test and debugging aid) the dispatcher hands a tiled kernel full-size
*guarded* copies of its inputs instead of device memory, and

- once the first tile starts, every guarded buffer holds only poison (NaN for floats,
  the minimum for integers, True for bool): a kernel that reads an input directly
  instead of through ``load()`` computes garbage, and the proof's comparison fails;
- a buffer the kernel derived from its inputs before its tiles (a re-layout copy) is
  poisoned the same way the first time a tile loads from it;
- ``load()`` reads the true bytes of exactly ``region`` from the device memory behind
  the buffer and returns a copy of them (a scratchpad block), so nothing outside the
  region is reachable through its result;
- the bytes a tile loads must fit the scratchpad footprint its plan declares
  (``TileCost.scratchpad_bytes``): a tile that reads a larger region than its plan
  (every row, the whole K extent) raises ``SnpuTileViolation``.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from runners.snpu import counters, machine
from runners.snpu.errors import SnpuTileViolation
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


def _over(storage: torch.UntypedStorage, dtype: torch.dtype) -> torch.Tensor:
    """The whole storage as a flat tensor of ``dtype``."""
    n = storage.nbytes() // _itemsize(dtype)
    return torch.empty(0, dtype=dtype).set_(storage, 0, (n,), (1,))


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


class _Guard:
    """One tiled op's guarded device memory under the tiling proof."""

    def __init__(self, real: set[int], derive: bool = True) -> None:
        self.real = real  # storages of the op's real inputs: never poisoned in place
        # whether buffers the kernel derived may be poisoned in place (only when every
        # input was swapped for a guarded copy, so no derived buffer aliases real memory)
        self.derive = derive
        self.truth: dict[int, torch.UntypedStorage] = {}  # guarded storage -> true bytes
        self.dtypes: dict[int, torch.dtype] = {}
        self.copies: dict[int, torch.UntypedStorage] = {}  # guarded storages, kept alive
        self.poisoned = False
        self.tile: Any = None
        self.loaded = 0

    def guard(self, t: torch.Tensor) -> torch.Tensor:
        """A full-size copy of ``t``'s storage, same view geometry; poisoned at the first tile."""
        real = t.untyped_storage()
        copy = real.clone()
        self.truth[copy.data_ptr()] = real
        self.dtypes[copy.data_ptr()] = t.dtype
        self.copies[copy.data_ptr()] = copy
        return torch.empty(0, dtype=t.dtype).set_(copy, t.storage_offset(), t.size(), t.stride())

    def poison_all(self) -> None:
        for key, copy in self.copies.items():
            _over(copy, self.dtypes[key]).fill_(_poison_value(self.dtypes[key]))
        self.poisoned = True

    def true_view(self, src: torch.Tensor) -> torch.Tensor:
        storage = src.untyped_storage()
        key = storage.data_ptr()
        truth = self.truth.get(key)
        if truth is None:
            if key in self.real or src.numel() == 0 or not self.derive:
                return src  # a real input left unguarded (a scalar): read as it is
            # a buffer the kernel derived from its inputs: from now on it holds poison
            truth = self.truth[key] = storage.clone()
            self.dtypes[key] = src.dtype
            self.copies[key] = storage
            _over(storage, src.dtype).fill_(_poison_value(src.dtype))
        return torch.empty(0, dtype=src.dtype).set_(truth, src.storage_offset(), src.size(), src.stride())


@contextlib.contextmanager
def guarded_inputs(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The op's tensor inputs as guarded copies (see the module docstring); no-op unless poisoning."""
    if not poisoning():
        yield args, kwargs
        return
    real: set[int] = set()

    def note(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            real.add(x.untyped_storage().data_ptr())
        elif isinstance(x, (list, tuple)):
            for v in x:
                note(v)

    note(args)
    note(kwargs)
    guard = _Guard(real)

    def swap(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.numel() > 1 and x.device.type == "cpu":
            return guard.guard(x)
        if isinstance(x, (list, tuple)):
            return type(x)(swap(v) for v in x)
        return x

    prev = getattr(_state, "guard", None)
    _state.guard = guard
    try:
        yield swap(args), {k: swap(v) for k, v in kwargs.items()}
    finally:
        _state.guard = prev


def tiles(plan: Plan) -> Iterator[Any]:
    """The plan's tiles in order; under the tiling proof, each becomes the current tile."""
    guard = getattr(_state, "guard", None) if poisoning() else None
    if guard is None:
        if poisoning():
            # an op without guarded inputs (an in-place one) still has its loads bounded
            guard = _Guard(set(), derive=False)
            _state.guard = guard
            try:
                yield from _walk(plan, guard)
            finally:
                _state.guard = None
            return
        yield from plan.tiles
        return
    yield from _walk(plan, guard)


def _walk(plan: Plan, guard: _Guard) -> Iterator[Any]:
    if not guard.poisoned:
        guard.poison_all()
    try:
        for tile in plan.tiles:
            guard.tile, guard.loaded = tile, 0
            yield tile
    finally:
        guard.tile = None


def load(src: torch.Tensor, region: tuple[Any, ...]) -> torch.Tensor:
    """The tile's ``region`` of ``src``; under the tiling proof a checked copy of the true bytes."""
    if not poisoning():
        return src[region]
    guard = getattr(_state, "guard", None)
    if guard is None or guard.tile is None:
        raise SnpuTileViolation(f"a kernel loaded {tuple(src.shape)} outside any tile of its plan")
    block = guard.true_view(src)[region].clone()
    guard.loaded += block.numel() * block.element_size()
    allowed = guard.tile.cost.scratchpad_bytes
    if guard.loaded > allowed:
        raise SnpuTileViolation(
            f"a tile loaded {guard.loaded} bytes but its plan's scratchpad footprint is {allowed} bytes "
            f"(tile ranges {guard.tile.ranges}): the kernel reads outside its tile"
        )
    return block


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
    """The op's output on meta tensors: its shape and dtype, PyTorch's own checks.

    Where the meta computation refuses the call, the error raised is the one the CPU kernel gives
    for the same arguments (its type and message: a backend's argument checks are ATen's
    ``TORCH_CHECK``s), not the meta kernel's or a Python reference's wording, which differ
    (``ValueError: clamp called but both min and max are none!`` where the CPU raises
    ``RuntimeError: torch.clamp: At least one of 'min' or 'max' must not be None``). When the CPU
    accepts the call, the meta error stands.
    """
    try:
        return _meta_call(func, args, kwargs)
    except Exception as exc:
        cpu = _cpu_refusal(func, args, kwargs)
        if cpu is None or (type(cpu) is type(exc) and str(cpu) == str(exc)):
            raise
        raise cpu from None


def _cpu_refusal(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> BaseException | None:
    """The exception the CPU kernel raises for these arguments (on copies: nothing is written), or None."""

    def copy(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.detach().to("cpu", copy=True)
        if isinstance(x, (list, tuple)):
            return type(x)(copy(v) for v in x)
        return x

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            func(*copy(args), **{k: copy(v) for k, v in kwargs.items()})
    except Exception as exc:  # the CPU's own refusal is what the caller should see
        return exc
    return None


def _meta_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if func._schema.is_mutable:
        # never run an in-place op on real data just to learn its shape
        return func(*to_meta(args, scalars=True), **to_meta(kwargs, scalars=True))
    try:
        return func(*to_meta(args), **to_meta(kwargs))
    except RuntimeError as exc:
        if "meta" not in str(exc) and "same device" not in str(exc):
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
