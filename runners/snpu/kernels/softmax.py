"""softmax and log_softmax (and their backward), plus the negative log-likelihood loss.

The softmax dimension is laid out in sticks and is never split: each tile holds whole
rows (max, exp on the special-function unit, sum, scale); rows are split across cores.
A row longer than the scratchpad holds is refused with ``SnpuPlanError``.
"""

from __future__ import annotations

from typing import Any

import torch

from runners.snpu import machine
from runners.snpu.dispatch import register
from runners.snpu.kernels.common import load, rows_view, run, tiles, unrows
from runners.snpu.planner import plan_rows

# special-function passes per input stick: max, exp, sum, scale
_SOFTMAX_PASSES = 4


def _rowwise(op: str, inputs: list[torch.Tensor], dim: int, out_dtype: torch.dtype, fn: Any) -> torch.Tensor:
    """Apply ``fn(*row_blocks, out=rows)`` (softmax along the last dim) tile by tile.

    ``fn`` writes its tile's rows straight into the output rows it is given (the store).
    """
    m = machine.current()
    x = inputs[0]
    mats = []
    moved_shape: tuple[int, ...] = ()
    for t in inputs:
        mat, moved_shape = rows_view(t, dim)
        mats.append(mat)
    rows, length = mats[0].shape
    plan = plan_rows(rows, length, x.dtype, length, m, _SOFTMAX_PASSES * len(inputs), False)
    out = torch.empty(rows, length, dtype=out_dtype)
    if x.numel():
        for tile in tiles(plan):
            (r0, r1), (c0, c1) = tile.ranges
            region = (slice(r0, r1), slice(c0, c1))
            fn(*(load(mat, region) for mat in mats), out=out[r0:r1])
    run(plan, op)
    return unrows(out, moved_shape, dim, x.dim())


@register("_softmax", "_log_softmax", category="softmax", execution="tiled", whole_row="row")
def softmax(func: Any, args: tuple, kwargs: dict) -> Any:
    x, dim, half_to_float = args[0], args[1], args[2]
    meta = func(x.to("meta"), dim, half_to_float)
    last = x.dim() == 0 or dim % x.dim() == x.dim() - 1
    log = func._schema.name == "aten::_log_softmax"

    out_op = getattr(torch.ops.aten, func._schema.name.split("::")[1]).out

    def tile(b: torch.Tensor, out: torch.Tensor) -> None:
        if last or b.dtype not in (torch.float16, torch.bfloat16):
            out_op(b, -1, half_to_float, out=out)
            return
        # rows gathered across a non-last dim: work in fp32 and round once, as the CPU
        # reference does along such a dim (max, shifted exp-sum, log)
        wide = b.float()
        shifted = wide - wide.amax(dim=-1, keepdim=True)
        if log:
            res = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
        else:
            e = torch.exp(shifted)
            res = e / e.sum(dim=-1, keepdim=True)
        out.copy_(res)

    return _rowwise(func.name(), [x], dim, meta.dtype, tile)


@register("_safe_softmax", category="softmax", execution="tiled", whole_row="row")
def safe_softmax(func: Any, args: tuple, kwargs: dict) -> Any:
    x, dim = args[0], args[1]
    dtype = kwargs.get("dtype") if "dtype" in kwargs else (args[2] if len(args) > 2 else None)
    meta = func(x.to("meta"), dim, dtype)
    return _rowwise(func.name(), [x], dim, meta.dtype, lambda b, out: out.copy_(func(b, -1, dtype)))


@register(
    "_softmax_backward_data", "_log_softmax_backward_data", category="softmax", execution="tiled", whole_row="row"
)
def softmax_backward(func: Any, args: tuple, kwargs: dict) -> Any:
    grad, output, dim, input_dtype = args[0], args[1], args[2], args[3]
    meta = func(grad.to("meta"), output.to("meta"), dim, input_dtype)
    return _rowwise(
        func.name(), [grad, output], dim, meta.dtype, lambda g, o, out: out.copy_(func(g, o, -1, input_dtype))
    )


# --------------------------------------------------------------------------- nll loss


def _nll_tiles(op: str, rows: int, classes: int, dtype: torch.dtype) -> Any:
    return plan_rows(max(rows, 1), max(classes, 1), dtype, 1, machine.current(), 1, False)


@register("nll_loss_forward", category="loss", execution="tiled", whole_row="one")
def nll_loss_forward(func: Any, args: tuple, kwargs: dict) -> Any:
    """Per-row gathers tile by tile; the final sum/mean drains over the ring."""
    x, target, weight, reduction, ignore_index = args
    if x.dim() == 1:
        plan = _nll_tiles(func.name(), 1, x.shape[0], x.dtype)
        run(plan, func.name())
        return func(x, target, weight, reduction, ignore_index)
    rows, classes = x.shape
    plan = _nll_tiles(func.name(), rows, classes, x.dtype)
    losses = torch.empty(rows, dtype=x.dtype)
    weights = torch.empty(rows, dtype=x.dtype)
    for tile in tiles(plan):
        (r0, r1), (c0, c1) = tile.ranges
        block = load(x, (slice(r0, r1), slice(c0, c1)))
        t = load(target, (slice(r0, r1),))
        # the class weights are loaded by every tile (each core holds a copy)
        wt = load(weight, (slice(None),)) if weight is not None else None
        w = wt if wt is not None else torch.ones(classes, dtype=x.dtype)
        per_row, _ = func(block, t, wt, 0, ignore_index)
        losses[r0:r1] = per_row
        valid = t != ignore_index
        weights[r0:r1] = torch.where(valid, w[t.clamp(0, classes - 1)], torch.zeros((), dtype=x.dtype))
    run(plan, func.name())
    if reduction == 0:
        return losses, torch.zeros((), dtype=x.dtype)
    total_weight = weights.float().sum().to(x.dtype)
    total = losses.float().sum()
    if reduction == 1:
        total = total / weights.float().sum()
    return total.to(x.dtype), total_weight


@register("nll_loss_backward", category="loss", execution="tiled", whole_row="one")
def nll_loss_backward(func: Any, args: tuple, kwargs: dict) -> Any:
    grad_out, x, target, weight, reduction, ignore_index, total_weight = args
    rows = x.shape[0] if x.dim() == 2 else 1
    classes = x.shape[-1]
    plan = _nll_tiles(func.name(), rows, classes, x.dtype)
    if x.dim() != 2:
        run(plan, func.name())
        return func(*args)
    out = torch.empty_like(x)
    for tile in tiles(plan):
        (r0, r1), _ = tile.ranges
        g = grad_out if reduction != 0 else load(grad_out, (slice(r0, r1),))
        out[r0:r1] = func(
            g,
            load(x, (slice(r0, r1),)),
            load(target, (slice(r0, r1),)),
            load(weight, (slice(None),)) if weight is not None else None,
            reduction,
            ignore_index,
            total_weight,
        )
    run(plan, func.name())
    return out
