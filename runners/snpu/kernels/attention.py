"""scaled_dot_product_attention as one flash-style kernel, with autograd.

PyTorch 2.13 sends a PrivateUse1 device down the math decomposition of SDPA (it has no
Python hook for the fused-kernel choice), so snpu registers its own
``scaled_dot_product_attention`` for the AutogradPrivateUse1 key. The forward runs tile
by tile under ``plan_attention``: a block of query rows per tile, keys and values in
chunks with a running max and sum (online softmax). The backward recomputes through the
math decomposition, whose pieces (bmm, softmax backward...) are snpu kernels. Dropout
and masks that need gradients take the math decomposition directly.
"""

from __future__ import annotations

import math

import torch

from runners.snpu import dispatch, machine
from runners.snpu.kernels.common import guarded_inputs, load, run, tiles
from runners.snpu.planner import plan_attention
from runners.snpu.tensor import SnpuTensor

OP = "aten::scaled_dot_product_attention"


def _expand_kv(q: torch.Tensor, t: torch.Tensor, gqa: bool) -> torch.Tensor:
    if gqa and t.dim() >= 3 and q.dim() >= 3 and t.shape[-3] != q.shape[-3]:
        t = t.repeat_interleave(q.shape[-3] // t.shape[-3], dim=-3)
    return t


def _tile_bias(
    mask3: torch.Tensor | None,
    is_causal: bool,
    n: slice,
    q0: int,
    q1: int,
    k0: int,
    k1: int,
    dtype: torch.dtype,
) -> torch.Tensor | None:
    """The additive mask of one tile (0 where attending, -inf where not), in q's dtype."""
    if mask3 is not None:
        m = load(mask3, (n, slice(q0, q1), slice(k0, k1)))
        if m.dtype == torch.bool:
            return torch.zeros(m.shape, dtype=dtype).masked_fill(~m, float("-inf"))
        return m.to(dtype)
    if is_causal:
        allowed = torch.arange(k0, k1)[None, :] <= torch.arange(q0, q1)[:, None]
        return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, float("-inf"))[None]
    return None


def flash_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float | None,
    gqa: bool,
) -> torch.Tensor:
    """Attention on device memory (CPU tensors), tile by tile; returns q's dtype.

    Each tile runs the CPU's fused attention on its query block and key chunk and
    returns the block's output and log-sum-exp; chunks of one block merge exactly
    through their log-sum-exps. Causal tiles wholly above the diagonal are not planned.
    """
    k, v = _expand_kv(q, k, gqa), _expand_kv(q, v, gqa)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    L, E = q.shape[-2], q.shape[-1]
    S, Ev = k.shape[-2], v.shape[-1]
    n = math.prod(batch)
    q3 = q.expand(*batch, L, E).reshape(n, L, E)
    k3 = k.expand(*batch, S, E).reshape(n, S, E)
    v3 = v.expand(*batch, S, Ev).reshape(n, S, Ev)
    mask3 = mask.expand(*batch, L, S).reshape(n, L, S) if mask is not None else None
    plan = plan_attention(n, L, S, E, Ev, q.dtype, machine.current(), is_causal)
    out = torch.zeros(n, L, Ev, dtype=q.dtype)
    last: dict[tuple[int, int], int] = {}
    for i, tile in enumerate(plan.tiles):
        last[(tile.ranges[0][0], tile.ranges[1][0])] = i
    state: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    for i, tile in enumerate(tiles(plan)):
        (n0, n1), (q0, q1), (k0, k1) = tile.ranges
        ns = slice(n0, n1)
        qt = load(q3, (ns, slice(q0, q1))).unsqueeze(1)
        kt = load(k3, (ns, slice(k0, k1))).unsqueeze(1)
        vt = load(v3, (ns, slice(k0, k1))).unsqueeze(1)
        diagonal = is_causal and mask3 is None and q0 == k0 and q1 - q0 == k1 - k0
        bias = None if diagonal else _tile_bias(mask3, is_causal, ns, q0, q1, k0, k1, q.dtype)
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            qt, kt, vt, 0.0, diagonal, attn_mask=bias.unsqueeze(1) if bias is not None else None, scale=scale
        )
        o, lse = o[:, 0].float(), lse[:, 0].float()
        if bias is not None:
            # rows this chunk masks entirely contribute nothing (the kernel reports lse 0)
            dead = torch.isneginf(bias).all(dim=-1).expand_as(lse)
            lse = lse.masked_fill(dead, float("-inf"))
            o = o.masked_fill(dead.unsqueeze(-1), 0.0)
        key = (n0, q0)
        if key in state:
            acc, run_lse = state[key]
            new = torch.logaddexp(run_lse, lse)
            safe = torch.where(torch.isneginf(new), torch.zeros_like(new), new)
            acc = acc * torch.exp(run_lse - safe).unsqueeze(-1) + o * torch.exp(lse - safe).unsqueeze(-1)
            state[key] = (acc, new)
        else:
            state[key] = (o, lse)
        if last[key] == i:
            acc, _ = state.pop(key)
            out[n0:n1, q0:q1] = acc.to(q.dtype)
    run(plan, OP)
    return out.reshape(*batch, L, Ev)


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, is_causal, scale, gqa):  # type: ignore[override]
        ctx.save_for_backward(q, k, v, mask)
        ctx.options = (is_causal, scale, gqa)
        with guarded_inputs((q._data, k._data, v._data, mask._data if mask is not None else None), {}) as (
            g,
            _,
        ):
            data = flash_forward(*g, is_causal, scale, gqa)
        return SnpuTensor(data)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        q, k, v, mask = ctx.saved_tensors
        is_causal, scale, gqa = ctx.options
        inputs = [
            t.detach().requires_grad_(need)
            for t, need in zip((q, k, v), ctx.needs_input_grad[:3], strict=True)
        ]
        with torch.enable_grad():
            out = _math(*inputs, mask, 0.0, is_causal, scale, gqa)
        wanted = [t for t in inputs if t.requires_grad]
        grads = iter(torch.autograd.grad(out, wanted, grad))
        return (*(next(grads) if t.requires_grad else None for t in inputs), None, None, None, None)


def _math(q, k, v, mask, dropout_p, is_causal, scale, gqa):
    return torch.ops.aten._scaled_dot_product_attention_math(
        q, k, v, mask, dropout_p, is_causal, scale=scale, enable_gqa=gqa
    )[0]


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    """The AutogradPrivateUse1 kernel of ``aten::scaled_dot_product_attention``."""
    tensors = (query, key, value)
    simple = (
        dropout_p == 0.0
        and all(isinstance(t, SnpuTensor) for t in tensors)
        and (attn_mask is None or (isinstance(attn_mask, SnpuTensor) and not attn_mask.requires_grad))
        and all(t.dim() >= 2 for t in tensors)
        and not (is_causal and attn_mask is not None)
        and query.dtype == key.dtype == value.dtype
    )
    if not simple:
        return _math(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    dispatch.notify(KERNEL)
    return _FlashAttention.apply(query, key, value, attn_mask, is_causal, scale, enable_gqa)


# what the flash path is to dispatch's observer (the OpInfo sweep): a tiled attention kernel
KERNEL = dispatch.Kernel(OP, sdpa, "attention", execution="tiled")


def register_autograd_kernels(lib: torch.library.Library) -> None:
    lib.impl("scaled_dot_product_attention", sdpa, "AutogradPrivateUse1")
