"""layer_norm (forward and backward), row-wise over the normalized dimensions.

The normalized extent is laid out in sticks and never split; each tile holds whole rows
plus the weight and bias sticks. The backward's weight and bias gradients are sums over
rows: each core sums its rows and the partial sums drain over the ring (counted as ring
cycles on top of the tiles). ``rms_norm`` reaches snpu as its PyTorch decomposition
(pow, mean, rsqrt, mul), each of them an snpu kernel.
"""

from __future__ import annotations

from typing import Any

import torch

from runners.snpu import machine
from runners.snpu.counters import OpRecord, active, record
from runners.snpu.dispatch import register
from runners.snpu.kernels.common import load, meta_call, tiles
from runners.snpu.planner import plan_rows

_PASSES = 5  # mean, centre, square-sum, rsqrt, scale-and-shift


def _plan(x: torch.Tensor, normalized: int) -> Any:
    rows = x.numel() // max(normalized, 1) if normalized else 0
    return plan_rows(max(rows, 1), max(normalized, 1), x.dtype, normalized, machine.current(), _PASSES, False)


def _rows_plan(x: torch.Tensor, normalized_shape: Any) -> tuple[int, int, Any]:
    """Row length (product of the normalized dims), row count and the row plan."""
    n = 1
    for size in normalized_shape:
        n *= size
    return n, (x.numel() // n if n else 0), _plan(x, n)


def _record(plan: Any, op: str, ring_bytes: int = 0) -> None:
    m = machine.current()
    extra = 0
    if ring_bytes and plan.cores_used > 1:
        extra = (plan.cores_used - 1) * ring_bytes // m.ring_bytes_per_cycle
    if active():
        record(OpRecord.from_tiles(op, (t.cost for t in plan.tiles), extra_cycles=extra))


@register("native_layer_norm", category="norm", execution="tiled", whole_row="row")
def layer_norm(func: Any, args: tuple, kwargs: dict) -> Any:
    x, normalized_shape, weight, bias, eps = args
    # PyTorch's own checks of the shapes of x, weight and bias, with the CPU's errors
    meta_call(func, args, kwargs)
    k = len(normalized_shape)
    stat_shape = tuple(x.shape[: x.dim() - k]) + (1,) * k
    n, rows, plan = _rows_plan(x, normalized_shape)
    if x.numel() == 0:
        _record(plan, func.name())
        return func(*args)
    x2 = x.reshape(rows, n)
    w = weight.reshape(n) if weight is not None else None
    b = bias.reshape(n) if bias is not None else None
    out = torch.empty(rows, n, dtype=x.dtype)
    # mean and rstd keep the dtype the CPU kernel gives them (the backward expects it)
    stat_dtype = func(x2[:1], [n], w, b, eps)[1].dtype
    mean = torch.empty(rows, 1, dtype=stat_dtype)
    rstd = torch.empty(rows, 1, dtype=stat_dtype)
    for tile in tiles(plan):
        (r0, r1), (c0, c1) = tile.ranges
        # the weight and bias are loaded by every tile (each core holds a copy)
        torch.ops.aten.native_layer_norm.out(
            load(x2, (slice(r0, r1), slice(c0, c1))),
            [n],
            load(w, (slice(None),)) if w is not None else None,
            load(b, (slice(None),)) if b is not None else None,
            eps,
            out0=out[r0:r1],
            out1=mean[r0:r1],
            out2=rstd[r0:r1],
        )
    _record(plan, func.name())
    return out.reshape(x.shape), mean.reshape(stat_shape), rstd.reshape(stat_shape)


@register("native_layer_norm_backward", category="norm", execution="tiled", whole_row="row")
def layer_norm_backward(func: Any, args: tuple, kwargs: dict) -> Any:
    grad_out, x, normalized_shape, mean, rstd, weight, bias, mask = args
    n, rows, plan = _rows_plan(x, normalized_shape)
    if x.numel() == 0:
        _record(plan, func.name())
        return func(*args)
    g2, x2 = grad_out.reshape(rows, n), x.reshape(rows, n)
    mu2, rs2 = mean.reshape(rows, 1), rstd.reshape(rows, 1)
    w = weight.reshape(n) if weight is not None else None
    b = bias.reshape(n) if bias is not None else None
    gx = torch.empty(rows, n, dtype=x.dtype) if mask[0] else None
    gw = torch.zeros(n, dtype=torch.float32) if mask[1] and w is not None else None
    gb = torch.zeros(n, dtype=torch.float32) if mask[2] and b is not None else None
    for tile in tiles(plan):
        (r0, r1), _ = tile.ranges
        rs = (slice(r0, r1),)
        wt = load(w, (slice(None),)) if w is not None else None
        bt = load(b, (slice(None),)) if b is not None else None
        a, bw, bb = func(load(g2, rs), load(x2, rs), [n], load(mu2, rs), load(rs2, rs), wt, bt, mask)
        if gx is not None:
            gx[r0:r1] = a
        if gw is not None:
            gw += bw.float()
        if gb is not None:
            gb += bb.float()
    _record(plan, func.name(), ring_bytes=2 * n * 4)
    return (
        gx.reshape(x.shape) if gx is not None else None,
        gw.to(weight.dtype).reshape(weight.shape) if gw is not None else None,
        gb.to(bias.dtype).reshape(bias.shape) if gb is not None else None,
    )
