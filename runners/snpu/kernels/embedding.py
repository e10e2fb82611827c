"""Embedding lookup and its dense backward.

Forward: the indices are split across cores; each tile reads its indices and gathers
the rows they name (a DMA gather, stick by stick). Backward: the embedding dimension is
split on stick boundaries across cores, so every core accumulates its own columns for
all indices and no two cores write the same gradient stick.
"""

from __future__ import annotations

from typing import Any

import torch

from runners.snpu import machine
from runners.snpu.dispatch import register
from runners.snpu.kernels.common import load, meta_call, run, tiles
from runners.snpu.planner import plan_elementwise, plan_rows


@register("embedding", category="embedding", execution="tiled", whole_row="row")
def embedding(func: Any, args: tuple, kwargs: dict) -> Any:
    weight, indices = args[0], args[1]
    rest = args[2:]
    # PyTorch's own argument checks, raising what the CPU raises ('weight' must be 2-D is a
    # RuntimeError there, an AssertionError in the meta kernel)
    meta = meta_call(func, args, kwargs)
    dim = weight.shape[-1] if weight.dim() == 2 else 1
    flat = indices.reshape(-1)
    plan = plan_rows(max(flat.numel(), 1), max(dim, 1), weight.dtype, dim, machine.current(), 1, False)
    if flat.numel() == 0 or weight.dim() != 2:
        run(plan, func.name())
        return func(weight, indices, *rest, **kwargs)
    out = torch.empty(flat.numel(), dim, dtype=weight.dtype)
    for tile in tiles(plan):
        (r0, r1), _ = tile.ranges
        idx = load(flat, (slice(r0, r1),))
        # a gather: the tile loads exactly the weight rows its indices name (the forward
        # ignores padding_idx and the other options, which only matter to the backward)
        out[r0:r1] = load(weight, (idx,))
    run(plan, func.name())
    return out.reshape(meta.shape)


@register("embedding_dense_backward", category="embedding", execution="tiled")
def embedding_backward(func: Any, args: tuple, kwargs: dict) -> Any:
    grad, indices, num_weights, padding_idx, scale_grad_by_freq = args
    dim = grad.shape[-1]
    g2 = grad.reshape(-1, dim)
    # columns across cores: an elementwise-shaped plan over the embedding dimension
    plan = plan_elementwise(
        max(dim, 1), (grad.dtype,), grad.dtype, machine.current(), max(1, g2.shape[0] // 64)
    )
    out = torch.zeros(num_weights, dim, dtype=grad.dtype)
    if grad.numel():
        for tile in tiles(plan):
            (c0, c1) = tile.ranges[0]
            cols = load(g2, (slice(None), slice(c0, c1)))
            out[:, c0:c1] = func(cols, indices, num_weights, padding_idx, scale_grad_by_freq)
    run(plan, func.name())
    return out
