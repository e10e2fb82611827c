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

from runners.snpu import machine
from runners.snpu.kernels.common import load, run
from runners.snpu.planner import plan_attention
from runners.snpu.tensor import SnpuTensor

OP = "aten::scaled_dot_product_attention"


def _expand_kv(q: torch.Tensor, t: torch.Tensor, gqa: bool) -> torch.Tensor:
    if gqa and t.dim() >= 3 and q.dim() >= 3 and t.shape[-3] != q.shape[-3]:
        t = t.repeat_interleave(q.shape[-3] // t.shape[-3], dim=-3)
    return t


def flash_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float | None,
    gqa: bool,
) -> torch.Tensor:
    """Attention on device memory (CPU tensors), tile by tile; returns q's dtype."""
    k, v = _expand_kv(q, k, gqa), _expand_kv(q, v, gqa)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    L, E = q.shape[-2], q.shape[-1]
    S, Ev = k.shape[-2], v.shape[-1]
    n = math.prod(batch)
    q3 = q.expand(*batch, L, E).reshape(n, L, E)
    k3 = k.expand(*batch, S, E).reshape(n, S, E)
    v3 = v.expand(*batch, S, Ev).reshape(n, S, Ev)
    bias = None
    if mask is not None:
        m = mask.expand(*batch, L, S).reshape(n, L, S)
        bias = (
            torch.zeros(m.shape, dtype=torch.float32).masked_fill(~m, float("-inf"))
            if m.dtype == torch.bool
            else m.float()
        )
    if is_causal:
        causal = torch.ones(L, S, dtype=torch.bool).tril()
        cbias = torch.zeros(L, S).masked_fill(~causal, float("-inf"))
        bias = cbias.expand(n, L, S) if bias is None else bias + cbias
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    plan = plan_attention(n, L, S, E, Ev, q.dtype, machine.current())
    out = torch.empty(n, L, Ev, dtype=q.dtype)
    if n and L and S:
        state: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        for tile in plan.tiles:
            (n0, n1), (q0, q1), (k0, k1) = tile.ranges
            key = (n0, q0, q1)
            qt = load(q3, (slice(n0, n1), slice(q0, q1))).float()
            kt = load(k3, (slice(n0, n1), slice(k0, k1))).float()
            vt = load(v3, (slice(n0, n1), slice(k0, k1))).float()
            scores = torch.bmm(qt, kt.transpose(1, 2)) * scale
            if bias is not None:
                scores = scores + load(bias, (slice(n0, n1), slice(q0, q1), slice(k0, k1)))
            if key in state:
                m_prev, l_prev, acc = state[key]
            else:
                m_prev = torch.full((n1 - n0, q1 - q0, 1), float("-inf"))
                l_prev = torch.zeros(n1 - n0, q1 - q0, 1)
                acc = torch.zeros(n1 - n0, q1 - q0, Ev)
            m_new = torch.maximum(m_prev, scores.amax(dim=-1, keepdim=True))
            # rows masked so far have max -inf: shift by 0 instead so exp gives 0, not nan
            shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(scores - shift)
            corr = torch.exp(
                torch.where(torch.isinf(m_prev), torch.full_like(m_prev, float("-inf")), m_prev - shift)
            )
            l_new = l_prev * corr + p.sum(dim=-1, keepdim=True)
            acc = acc * corr + torch.bmm(p, vt)
            if k1 == S:
                res = torch.where(l_new > 0, acc / l_new.clamp_min(1e-30), torch.zeros_like(acc))
                out[n0:n1, q0:q1] = res.to(q.dtype)
                state.pop(key, None)
            else:
                state[key] = (m_new, l_new, acc)
    run(plan, OP)
    return out.reshape(*batch, L, Ev)


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, is_causal, scale, gqa):  # type: ignore[override]
        ctx.save_for_backward(q, k, v, mask)
        ctx.options = (is_causal, scale, gqa)
        data = flash_forward(
            q._data, k._data, v._data, mask._data if mask is not None else None, is_causal, scale, gqa
        )
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
    return _FlashAttention.apply(query, key, value, attn_mask, is_causal, scale, enable_gqa)


def register_autograd_kernels(lib: torch.library.Library) -> None:
    lib.impl("scaled_dot_product_attention", sdpa, "AutogradPrivateUse1")
