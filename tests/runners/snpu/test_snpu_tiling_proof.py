"""The tiling proof can fail: kernels that read outside their tile are caught.

Each mutant below is a kernel that computes the right answer on plain device memory
but reads more than its tile: it is swapped in for the real kernel, checked to agree
with the CPU without the proof, and then must be caught under ``poison_outside_tiles``
(a ``SnpuTileViolation``, or poison reaching the result). The real kernels pass the
same proof (test_snpu_kernels.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import runners.snpu
from runners.snpu import dispatch, machine
from runners.snpu.errors import SnpuTileViolation
from runners.snpu.kernels.common import load, meta_call, poison_outside_tiles, rows_view, tiles, unrows
from runners.snpu.planner import plan_elementwise, plan_matmul, plan_rows

runners.snpu.install()


@pytest.fixture
def small_scratchpad() -> Iterator[None]:
    saved = machine.current()
    machine.set_current(machine.Machine(usable_scratchpad_bytes=32 * 1024))
    try:
        yield
    finally:
        machine.set_current(saved)


def _swap(name: str, fn: Callable[[Any, tuple, dict], Any]) -> Callable[[], None]:
    original = dispatch.KERNELS[name]
    dispatch.KERNELS[name] = dispatch.Kernel(name, fn, original.category, execution="tiled")

    def restore() -> None:
        dispatch.KERNELS[name] = original

    return restore


def _assert_caught(
    name: str, mutant: Callable, compute: Callable[[], torch.Tensor], expected: torch.Tensor
) -> None:
    restore = _swap(name, mutant)
    try:
        # the mutant is right on plain memory: only the proof can tell
        torch.testing.assert_close(compute().cpu(), expected, rtol=1e-4, atol=1e-3)
        with poison_outside_tiles():
            try:
                poisoned = compute().cpu()
            except SnpuTileViolation:
                return
        assert not torch.equal(poisoned, expected) and torch.isnan(poisoned).any(), "mutant not caught"
    finally:
        restore()


def softmax_reading_every_row(func: Any, args: tuple, kwargs: dict) -> Any:
    x, dim = args[0], args[1]
    mat, moved = rows_view(x, dim)
    rows, length = mat.shape
    plan = plan_rows(rows, length, x.dtype, length, machine.current(), 4, False)
    out = torch.empty(rows, length, dtype=x.dtype)
    for tile in tiles(plan):
        (r0, r1), (c0, c1) = tile.ranges
        block = load(mat, (slice(None), slice(c0, c1)))  # every row, on every tile
        out[r0:r1] = torch.softmax(block, -1)[r0:r1]
    return unrows(out, moved, dim, x.dim())


def add_skipping_load(func: Any, args: tuple, kwargs: dict) -> Any:
    x, y = args[0], args[1]
    meta = meta_call(func, args, kwargs)
    plan = plan_elementwise(meta.numel(), (x.dtype, y.dtype), meta.dtype, machine.current())
    out = torch.empty(meta.numel(), dtype=meta.dtype)
    flat_x, flat_y = x.reshape(-1), y.reshape(-1)
    for tile in tiles(plan):
        a, b = tile.ranges[0]
        out[a:b] = flat_x[a:b] + flat_y[a:b]  # straight from device memory, no load()
    return out.view(meta.shape)


def row_sum_reading_every_row(func: Any, args: tuple, kwargs: dict) -> Any:
    x = args[0]
    rows, length = x.shape
    plan = plan_rows(rows, length, x.dtype, 1, machine.current(), 1, True)
    assert plan.splits[1].steps == 1, "the mutant assumes whole rows per tile"
    out = torch.empty(rows, dtype=x.dtype)
    for tile in tiles(plan):
        (r0, r1), (c0, c1) = tile.ranges
        block = load(x, (slice(None), slice(c0, c1)))  # a larger region than the tile's rows
        out[r0:r1] = block.sum(-1)[r0:r1]
    return out


def mm_reading_beyond_its_k_tile(func: Any, args: tuple, kwargs: dict) -> Any:
    a, b = args[0], args[1]
    (m, k), n = a.shape, b.shape[1]
    plan = plan_matmul(1, m, n, k, a.dtype, machine.current())
    acc = torch.zeros(m, n, dtype=a.dtype)
    for tile in tiles(plan):
        _, (m0, m1), (n0, n1), (k0, k1) = tile.ranges
        a_rows = load(a, (slice(m0, m1), slice(None)))  # the whole K extent
        bt = load(b, (slice(k0, k1), slice(n0, n1)))
        acc[m0:m1, n0:n1] += a_rows[:, k0:k1] @ bt
    return acc


def test_softmax_reading_every_row_on_every_tile_is_caught(small_scratchpad: None) -> None:
    x = torch.randn(160, 80)
    _assert_caught(
        "aten::_softmax", softmax_reading_every_row, lambda: F.softmax(x.to("snpu"), -1), F.softmax(x, -1)
    )


def test_elementwise_skipping_load_is_caught(small_scratchpad: None) -> None:
    x, y = torch.randn(160, 80), torch.randn(160, 80)
    _assert_caught("aten::add.Tensor", add_skipping_load, lambda: x.to("snpu") + y.to("snpu"), x + y)


def test_reduction_reading_a_larger_region_is_caught(small_scratchpad: None) -> None:
    x = torch.randn(160, 80)
    _assert_caught("aten::sum.dim_IntList", row_sum_reading_every_row, lambda: x.to("snpu").sum(1), x.sum(1))


def test_matmul_reading_beyond_its_k_tile_is_caught(small_scratchpad: None) -> None:
    a, b = torch.randn(64, 4096), torch.randn(4096, 64)
    plan = plan_matmul(1, 64, 64, 4096, torch.float32, machine.current())
    assert len({t.ranges[3] for t in plan.tiles}) > 1, "K must be split for this mutant to be wrong"
    _assert_caught("aten::mm", mm_reading_beyond_its_k_tile, lambda: a.to("snpu") @ b.to("snpu"), a @ b)


def test_a_load_outside_any_tile_is_refused() -> None:
    x = torch.randn(4, 4)
    with poison_outside_tiles(), pytest.raises(SnpuTileViolation, match="outside any tile"):
        load(x, (slice(0, 2),))


def test_the_proof_leaves_the_callers_tensors_intact(small_scratchpad: None) -> None:
    # guarded copies are poisoned, never the device memory the caller holds
    x = torch.randn(160, 80)
    dev = x.to("snpu")
    with poison_outside_tiles():
        F.softmax(dev, 0)
        dev.sum(1)
        dev + dev[0]
    assert torch.equal(dev.cpu(), x)
