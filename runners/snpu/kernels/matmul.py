"""Matrix products (mm, bmm, addmm, baddbmm, mv, dot) on the modelled systolic arrays.

The planner splits batch, M and N across cores (K only last), and each core walks its
(M, N) block in sub-tiles, accumulating over K steps in an fp32 accumulator, as the
arrays do. Each tile loads only its A rows x K range and its K range x B columns.
"""

from __future__ import annotations

from typing import Any

import torch

from runners.snpu import machine
from runners.snpu.dispatch import register
from runners.snpu.kernels.common import load, poisoning, run, tiles
from runners.snpu.planner import plan_matmul


def batched_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    op: str,
    drain: tuple[torch.Tensor, Any, Any, torch.dtype] | None = None,
) -> torch.Tensor:
    """(B, M, K) @ (B, K, N) tile by tile; returns (B, M, N) in the inputs' dtype.

    With ``drain=(bias, alpha, beta, out_dtype)`` (bias expanded to (B, M, N)) the
    result is ``alpha * a @ b + beta * bias``, added to the fp32 accumulator block by
    block as the arrays drain and rounded once to ``out_dtype`` (addmm, baddbmm).
    """
    m = machine.current()
    batch, mm, k = a.shape
    n = b.shape[2]
    out_dtype = torch.promote_types(a.dtype, b.dtype)
    acc_dtype = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    plan = plan_matmul(batch, mm, n, k, out_dtype, m)
    acc = torch.zeros(batch, mm, n, dtype=acc_dtype)
    if batch and mm and n and k:
        done: set[tuple] = set()
        a_blocks: dict[tuple, torch.Tensor] = {}
        b_blocks: dict[tuple, torch.Tensor] = {}
        for tile in tiles(plan):
            (b0, b1), (m0, m1), (n0, n1), (k0, k1) = tile.ranges
            key = (tile.ranges,)
            if key in done:  # one Tile per batch element shares its ranges: run once
                continue
            done.add(key)
            # the DMA lands each operand contiguous in the scratchpad; on the simulator's
            # side, an operand block several tiles load is packed once per op (the
            # modelled loads are still counted per tile)
            at = _packed(a, (slice(b0, b1), slice(m0, m1), slice(k0, k1)), acc_dtype, a_blocks)
            bt = _packed(b, (slice(b0, b1), slice(k0, k1), slice(n0, n1)), acc_dtype, b_blocks)
            if b1 - b0 == 1:
                acc[b0, m0:m1, n0:n1].addmm_(at[0], bt[0])
            else:
                acc[b0:b1, m0:m1, n0:n1].baddbmm_(at, bt)
    if drain is not None:
        result = _drain_tiles(acc, plan, drain, k)
        run(plan, op)
        return result
    run(plan, op)
    return acc.to(out_dtype)


def _packed(src: torch.Tensor, region: tuple[slice, ...], dtype: torch.dtype, cache: dict) -> torch.Tensor:
    if poisoning():
        return load(src, region).to(dtype).contiguous()
    key = tuple((r.start, r.stop) for r in region)
    block = cache.get(key)
    if block is None:
        block = cache[key] = load(src, region).to(dtype).contiguous()
    return block


@register("mm", category="matmul", execution="tiled")
def mm(func: Any, args: tuple, kwargs: dict) -> Any:
    a, b = args[0], args[1]
    func(a.to("meta"), b.to("meta"))  # PyTorch's own shape and dtype checks
    return batched_matmul(a.unsqueeze(0), b.unsqueeze(0), func.name())[0]


@register("bmm", category="matmul", execution="tiled")
def bmm(func: Any, args: tuple, kwargs: dict) -> Any:
    a, b = args[0], args[1]
    func(a.to("meta"), b.to("meta"))
    return batched_matmul(a, b, func.name())


@register("addmm", category="matmul", execution="tiled")
def addmm(func: Any, args: tuple, kwargs: dict) -> Any:
    bias, a, b = args[0], args[1], args[2]
    beta = kwargs.get("beta", 1)
    alpha = kwargs.get("alpha", 1)
    meta = func(bias.to("meta"), a.to("meta"), b.to("meta"), beta=beta, alpha=alpha)
    bias3 = bias.expand(meta.shape).unsqueeze(0)
    prod = batched_matmul(a.unsqueeze(0), b.unsqueeze(0), func.name(), drain=(bias3, alpha, beta, meta.dtype))
    return prod[0]


def _drain_tiles(
    acc: torch.Tensor, plan: Any, drain: tuple[torch.Tensor, Any, Any, torch.dtype], k: int
) -> torch.Tensor:
    """alpha * acc + beta * bias as the arrays drain, one output block per tile.

    Each output block is drained by its last K tile, which loads the block's bias
    region; the sum is in the accumulator's precision, rounded once to the output dtype.
    """
    bias3, alpha, beta, out_dtype = drain
    if not plan.tiles:
        # an empty product (K == 0 or an empty output) has no tiles: beta * bias alone
        out = acc * alpha if alpha != 1 else acc
        if beta != 0:
            out = out + bias3.to(acc.dtype) * beta
        return out.to(out_dtype)
    out = torch.empty(acc.shape, dtype=out_dtype)
    done: set[tuple] = set()
    for tile in tiles(plan):
        (b0, b1), (m0, m1), (n0, n1), (_, k1) = tile.ranges
        if k1 != k or tile.ranges in done:
            continue
        done.add(tile.ranges)
        block = acc[b0:b1, m0:m1, n0:n1]
        block = block * alpha if alpha != 1 else block
        if beta != 0:
            bt = load(bias3, (slice(b0, b1), slice(m0, m1), slice(n0, n1))).to(acc.dtype)
            block = block + (bt * beta if beta != 1 else bt)
        out[b0:b1, m0:m1, n0:n1] = block
    return out


@register("baddbmm", category="matmul", execution="tiled")
def baddbmm(func: Any, args: tuple, kwargs: dict) -> Any:
    bias, a, b = args[0], args[1], args[2]
    beta = kwargs.get("beta", 1)
    alpha = kwargs.get("alpha", 1)
    meta = func(bias.to("meta"), a.to("meta"), b.to("meta"), beta=beta, alpha=alpha)
    return batched_matmul(a, b, func.name(), drain=(bias.expand(meta.shape), alpha, beta, meta.dtype))


@register("mv", category="matmul", execution="tiled")
def mv(func: Any, args: tuple, kwargs: dict) -> Any:
    a, v = args[0], args[1]
    func(a.to("meta"), v.to("meta"))
    return batched_matmul(a.unsqueeze(0), v.reshape(1, -1, 1), func.name())[0, :, 0]


@register("dot", "vdot", category="matmul", execution="tiled")
def dot(func: Any, args: tuple, kwargs: dict) -> Any:
    a, v = args[0], args[1]
    func(a.to("meta"), v.to("meta"))
    return batched_matmul(a.reshape(1, 1, -1), v.reshape(1, -1, 1), func.name()).reshape(())
