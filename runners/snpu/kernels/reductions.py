"""Reductions (sum, mean, amax, amin, var, std, prod, all, any, argmax...), row-wise.

The reduced dimensions are moved last and the tensor is viewed as (rows, reduced). Rows
are split across cores; a reduction is never split across cores. A row too long for
the scratchpad is reduced in sequential chunks on its core, which keeps a running
partial (sum, extreme, or count/mean/M2 for the variance).
"""

from __future__ import annotations

from typing import Any

import torch

from runners.snpu import machine
from runners.snpu.dispatch import register
from runners.snpu.kernels.common import load, run, to_meta
from runners.snpu.planner import plan_rows

# op packet -> how chunk partials combine (None: the whole row must fit one tile)


def _reduce_dims(x: torch.Tensor, dim: Any) -> list[int]:
    if x.dim() == 0:
        return []
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    if isinstance(dim, int):
        dim = [dim]
    return sorted({d % x.dim() for d in dim})


def _dim_arg(args: tuple, kwargs: dict) -> Any:
    if "dim" in kwargs:
        return kwargs["dim"]
    if len(args) > 1 and not isinstance(args[1], torch.dtype):
        return args[1]
    return None


def reduction(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    m = machine.current()
    x = args[0]
    meta_out = func(*to_meta(args), **to_meta(kwargs))
    packet = func._schema.name.split("::")[1]
    dims = _reduce_dims(x, _dim_arg(args, kwargs))
    keep = [d for d in range(x.dim()) if d not in dims]
    rows = 1
    for d in keep:
        rows *= x.shape[d]
    row_len = 1
    for d in dims:
        row_len *= x.shape[d]
    out_len = 1
    plan = plan_rows(rows, row_len, x.dtype, out_len, m, 1, True)
    if x.numel() == 0 or x.dim() == 0 or rows == 0:
        out = func(*args, **kwargs)
        run(plan, func.name())
        return out
    x2 = x.permute(*keep, *dims).reshape(rows, row_len)
    dtype = kwargs.get("dtype")
    col_split = plan.splits[1]
    outs: list[Any] = []
    partials: dict[int, list[tuple[Any, int]]] = {}
    for tile in plan.tiles:
        (r0, r1), (c0, c1) = tile.ranges
        block = load(x2, (slice(r0, r1), slice(c0, c1)))
        res = _reduce_block(packet, block, dtype)
        if col_split.steps == 1:
            outs.append(res)
        else:
            partials.setdefault(r0, []).append((res, c1 - c0))
            if c1 == col_split.extent:
                outs.append(_combine(packet, partials.pop(r0), row_len, args, kwargs))
    run(plan, func.name())
    return torch.cat([o.reshape(-1) for o in outs]).to(meta_out.dtype).reshape(meta_out.shape)


def _reduce_block(packet: str, block: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """Reduce dim 1 of a (rows, chunk) block, as the op would over its reduced dims."""
    if packet in ("sum", "mean", "prod"):
        fn = getattr(torch, packet)
        return fn(block, dim=1, dtype=dtype) if dtype is not None else fn(block, dim=1)
    if packet in ("max", "min"):
        return getattr(torch, "amax" if packet == "max" else "amin")(block, dim=1)
    return getattr(torch, packet)(block, dim=1)


def _combine(packet: str, parts: list[tuple[Any, int]], row_len: int, args: tuple, kwargs: dict) -> Any:
    vals = [p for p, _ in parts]
    if packet in ("sum", "all", "any", "amax", "amin", "prod", "max", "min"):
        stacked = torch.stack(vals)
        op = {
            "sum": torch.sum,
            "prod": torch.prod,
            "all": torch.all,
            "any": torch.any,
            "max": torch.amax,
            "min": torch.amin,
        }
        fn = op.get(packet) or getattr(torch, packet)
        return fn(stacked, dim=0)
    # mean: the chunk means weighted by their lengths
    return sum(v.float() * n for v, n in parts) / row_len


@register(
    "sum.default",
    "sum.dim_IntList",
    "mean.default",
    "mean.dim",
    "amax",
    "amin",
    "prod.default",
    "prod.dim_int",
    "all.default",
    "all.dim",
    "all.dims",
    "any.default",
    "any.dim",
    "any.dims",
    "max.default",
    "min.default",
    category="reduction",
)
def _reduction(func: Any, args: tuple, kwargs: dict) -> Any:
    return reduction(func, args, kwargs)


@register(
    "var.correction",
    "std.correction",
    "var_mean.correction",
    "std_mean.correction",
    "argmax",
    "argmin",
    "max.dim",
    "min.dim",
    "logsumexp",
    "linalg_vector_norm",
    "norm.Scalar",
    "norm.ScalarOpt_dim",
    "cumsum",
    "cumprod",
    "aminmax",
    category="reduction",
)
def _row_reduction(func: Any, args: tuple, kwargs: dict) -> Any:
    """Reductions whose whole reduced extent must sit in one tile."""
    m = machine.current()
    x = args[0]
    out = func(*args, **kwargs)
    rows = max(1, x.numel()) // max(1, x.shape[-1] if x.dim() else 1)
    plan = plan_rows(rows, x.shape[-1] if x.dim() else 1, x.dtype, 1, m, 2, False)
    run(plan, func.name())
    return out
