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
from runners.snpu.kernels.common import load, meta_call, rows_view, run, tiles, unrows
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
    meta_out = meta_call(func, args, kwargs)
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
    for tile in tiles(plan):
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
        if dtype is None and block.dtype in (torch.float16, torch.bfloat16):
            dtype = torch.float32  # accumulate in fp32, round once at the end
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
    execution="tiled",
)
def _reduction(func: Any, args: tuple, kwargs: dict) -> Any:
    return reduction(func, args, kwargs)


_WIDEN = {"aten::logsumexp", "aten::linalg_vector_norm", "aten::norm", "aten::nansum"}


def _normalized(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Every argument of the call by its schema name (defaults filled in)."""
    out: dict[str, Any] = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


def _rows_of(x: torch.Tensor, dims: list[int]) -> tuple[torch.Tensor, int, int]:
    keep = [d for d in range(x.dim()) if d not in dims]
    rows = 1
    for d in keep:
        rows *= x.shape[d]
    length = 1
    for d in dims:
        length *= x.shape[d]
    return x.permute(*keep, *dims).reshape(rows, length), rows, length


@register(
    "argmax",
    "argmin",
    "max.dim",
    "min.dim",
    "logsumexp",
    "linalg_vector_norm",
    "norm.Scalar",
    "norm.ScalarOpt_dim",
    "aminmax",
    "nansum",
    category="reduction",
    execution="tiled",
    whole_row="one",
)
def row_reduction(func: Any, args: tuple, kwargs: dict) -> Any:
    """Reductions whose reduced extent sits whole in each tile (rows across cores)."""
    m = machine.current()
    meta_out = meta_call(func, args, kwargs)
    kw = _normalized(func, args, kwargs)
    x = kw["self"]
    dims = _reduce_dims(x, kw.get("dim"))
    x2, rows, length = _rows_of(x, dims) if x.dim() else (x.reshape(1, 1), 1, 1)
    plan = plan_rows(max(rows, 1), max(length, 1), x.dtype, 1, m, 2, False)
    if x.numel() == 0:
        run(plan, func.name())
        return func(*args, **kwargs)
    tile_kw = dict(kw)
    if "dim" in kw:
        tile_kw["dim"] = (
            [1]
            if isinstance(kw["dim"], (list, tuple))
            or (kw["dim"] is None and func._schema.name.endswith(("norm", "logsumexp", "nansum")))
            else 1
        )
    if "keepdim" in kw:
        tile_kw["keepdim"] = False
    outs: list[Any] = []
    # reductions that accumulate work in fp32 on half inputs and round once at the end
    widen = (
        x.dtype in (torch.float16, torch.bfloat16) and func._schema.name in _WIDEN and kw.get("dtype") is None
    )
    for tile in tiles(plan):
        (r0, r1), (c0, c1) = tile.ranges
        block = load(x2, (slice(r0, r1), slice(c0, c1)))
        tile_kw["self"] = block.float() if widen else block
        outs.append(func(**tile_kw))
    run(plan, func.name())
    if isinstance(meta_out, (tuple, list)):
        return tuple(
            torch.cat([o[i].reshape(-1) for o in outs]).to(mo.dtype).reshape(mo.shape)
            for i, mo in enumerate(meta_out)
        )
    return torch.cat([o.reshape(-1) for o in outs]).to(meta_out.dtype).reshape(meta_out.shape)


@register(
    "var.correction",
    "std.correction",
    "var_mean.correction",
    "std_mean.correction",
    category="reduction",
    execution="tiled",
)
def variance(func: Any, args: tuple, kwargs: dict) -> Any:
    """var/std: per chunk count, mean and M2 in fp32, merged across a row's chunks (Chan)."""
    m = machine.current()
    meta_out = meta_call(func, args, kwargs)
    kw = _normalized(func, args, kwargs)
    x = kw["self"]
    packet = func._schema.name.split("::")[1]
    dims = _reduce_dims(x, kw.get("dim"))
    x2, rows, length = _rows_of(x, dims) if x.dim() else (x.reshape(1, 1), 1, 1)
    plan = plan_rows(max(rows, 1), max(length, 1), x.dtype, 1, m, 3, True)
    if x.numel() == 0:
        run(plan, func.name())
        return func(*args, **kwargs)
    correction = kw.get("correction")
    correction = 1 if correction is None else correction
    mean = torch.zeros(rows)
    m2 = torch.zeros(rows)
    count = torch.zeros(rows)
    for tile in tiles(plan):
        (r0, r1), (c0, c1) = tile.ranges
        block = load(x2, (slice(r0, r1), slice(c0, c1))).float()
        n_b = float(c1 - c0)
        mean_b = block.mean(dim=1)
        m2_b = ((block - mean_b[:, None]) ** 2).sum(dim=1)
        n_a = count[r0:r1]
        total = n_a + n_b
        delta = mean_b - mean[r0:r1]
        mean[r0:r1] += delta * (n_b / total)
        m2[r0:r1] += m2_b + delta**2 * n_a * n_b / total
        count[r0:r1] = total
    run(plan, func.name())
    var = m2 / torch.clamp(count - correction, min=0)
    var = torch.where(count - correction > 0, var, torch.full_like(var, float("nan")))
    if packet.startswith("std"):
        var = var.sqrt()
    dtype = meta_out[0].dtype if isinstance(meta_out, tuple) else meta_out.dtype
    shape = meta_out[0].shape if isinstance(meta_out, tuple) else meta_out.shape
    result = var.to(dtype).reshape(shape)
    if packet.endswith("_mean"):
        return result, mean.to(meta_out[1].dtype).reshape(meta_out[1].shape)
    return result


@register("cumsum", "cumprod", "logcumsumexp", category="reduction", execution="tiled", whole_row="row")
def scan(func: Any, args: tuple, kwargs: dict) -> Any:
    """Scans along one dimension: whole rows per tile, rows across cores."""
    m = machine.current()
    meta_out = meta_call(func, args, kwargs)
    kw = _normalized(func, args, kwargs)
    x, dim = kw["self"], kw["dim"]
    if x.dim() == 0 or x.numel() == 0:
        run(plan_rows(1, 1, x.dtype, 1, m, 1, False), func.name())
        return func(*args, **kwargs)
    x2, moved = rows_view(x, dim)
    rows, length = x2.shape
    plan = plan_rows(rows, length, x.dtype, length, m, 2, False)
    out = torch.empty(rows, length, dtype=meta_out.dtype)
    tile_kw = dict(kw)
    tile_kw["dim"] = 1
    for tile in tiles(plan):
        (r0, r1), (c0, c1) = tile.ranges
        tile_kw["self"] = load(x2, (slice(r0, r1), slice(c0, c1)))
        out[r0:r1] = func(**tile_kw)
    run(plan, func.name())
    return unrows(out, moved, dim, x.dim())
