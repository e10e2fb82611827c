"""Elementwise unary and binary ops, tiled over sticks, with broadcasting and promotion.

The output is laid out flat in sticks; the planner splits the sticks across cores and
into scratchpad-sized steps. Each tile loads the same flat range of every (broadcast)
operand, computes with the CPU op of the same name on that slice, and stores its range
of the output. Type promotion and broadcasting are PyTorch's own: the output's shape
and dtype come from running the op on meta tensors. "Flat" is the output's memory
order, which follows the CPU's TensorIterator (``iterator_order``): a channels-last input
gives a channels-last output, a transposed one a transposed output, as upstream tests
assert; it is computed as a contiguous output of the operands permuted into that order.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense

from runners.snpu import machine
from runners.snpu.dispatch import register
from runners.snpu.kernels.common import load, meta_call, run, tiles
from runners.snpu.planner import plan_elementwise

# vector-unit passes per output stick: arithmetic is one pass, the special-function
# unit needs a few for transcendental functions
SIMPLE = (
    "add.Tensor",
    "add.Scalar",
    "sub.Tensor",
    "sub.Scalar",
    "rsub.Tensor",
    "rsub.Scalar",
    "mul.Tensor",
    "mul.Scalar",
    "div.Tensor",
    "div.Scalar",
    "div.Tensor_mode",
    "div.Scalar_mode",
    "neg",
    "abs",
    "sign",
    "sgn",
    "signbit",
    "floor",
    "ceil",
    "round",
    "round.decimals",
    "trunc",
    "frac",
    "clamp",
    "clamp.Tensor",
    "clamp_min",
    "clamp_max",
    "clamp_min.Tensor",
    "clamp_max.Tensor",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "eq.Tensor",
    "eq.Scalar",
    "ne.Tensor",
    "ne.Scalar",
    "lt.Tensor",
    "lt.Scalar",
    "le.Tensor",
    "le.Scalar",
    "gt.Tensor",
    "gt.Scalar",
    "ge.Tensor",
    "ge.Scalar",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "bitwise_and.Tensor",
    "bitwise_or.Tensor",
    "bitwise_xor.Tensor",
    "bitwise_not",
    "where.self",
    "isnan",
    "isinf",
    "isfinite",
    "isposinf",
    "isneginf",
    "nan_to_num",
    "reciprocal",
    "square",
    "remainder.Tensor",
    "remainder.Scalar",
    "fmod.Tensor",
    "fmod.Scalar",
    "lerp.Scalar",
    "lerp.Tensor",
    "addcmul",
    "addcdiv",
    "copysign.Tensor",
    "copysign.Scalar",
    "angle",
    "heaviside",
    "floor_divide",
    "true_divide.Tensor",
    "xlogy.Tensor",
    "hypot",
    "positive",
    "deg2rad",
    "rad2deg",
    "masked_fill.Scalar",
    "masked_fill.Tensor",
    "threshold",
    "threshold_backward",
    "hardtanh_backward",
    "relu",
    "_conj_physical",
    "conj_physical",
)

TRANSCENDENTAL = (
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "sigmoid",
    "erf",
    "erfc",
    "erfinv",
    "pow.Tensor_Tensor",
    "pow.Tensor_Scalar",
    "pow.Scalar",
    "float_power.Tensor_Tensor",
    "logit",
    "sinc",
    "logaddexp",
    "logaddexp2",
    "tanh_backward",
    "sigmoid_backward",
    "logit_backward",
    "lgamma",
    "digamma",
    "i0",
    "special_i0e",
    "special_i1",
    "special_i1e",
    "special_ndtr",
    "special_ndtri",
    "special_log_ndtr",
    "special_erfcx",
    "special_entr",
    "special_xlog1py",
    "xlogy.Scalar_Self",
    "xlogy.Scalar_Other",
    "nextafter",
    "ldexp.Tensor",
    "polygamma",
    "mvlgamma",
    "igamma",
    "igammac",
    "special_zeta",
    "special_airy_ai",
    "special_bessel_j0",
    "special_bessel_j1",
    "special_bessel_y0",
    "special_bessel_y1",
    "special_modified_bessel_i0",
    "special_modified_bessel_i1",
    "special_modified_bessel_k0",
    "special_modified_bessel_k1",
    "special_scaled_modified_bessel_k0",
    "special_scaled_modified_bessel_k1",
    "special_spherical_bessel_j0",
    "special_chebyshev_polynomial_t",
    "special_chebyshev_polynomial_u",
    "special_chebyshev_polynomial_v",
    "special_chebyshev_polynomial_w",
    "special_shifted_chebyshev_polynomial_t",
    "special_shifted_chebyshev_polynomial_u",
    "special_shifted_chebyshev_polynomial_v",
    "special_shifted_chebyshev_polynomial_w",
    "special_hermite_polynomial_h",
    "special_hermite_polynomial_he",
    "special_laguerre_polynomial_l",
    "special_legendre_polynomial_p",
)


# out-of-place ops whose CPU kernel is not a TensorIterator over its inputs, so their
# result is contiguous whatever the input's layout: masked_fill is a contiguous clone
# updated in place (``clone(MemoryFormat::Contiguous)``, ``masked_fill_``), mvlgamma a sum
# over a new last dimension
CONTIGUOUS_RESULT = frozenset({"aten::masked_fill", "aten::mvlgamma"})
# ops whose CPU kernel iterates over its tensor operands in another order: rsub(a, b) is
# sub(b, a), so b's layout decides
REVERSED_OPERANDS = frozenset({"aten::rsub"})


def _inplace_names(names: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for n in names:
        packet, _, overload = n.partition(".")
        if packet.endswith("_backward") or (
            packet in ("where", "masked_fill", "xlogy") and overload.startswith("Scalar_")
        ):
            continue
        out.append(f"{packet}_.{overload}" if overload else f"{packet}_")
    return tuple(out)


def elementwise(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], passes: int = 1) -> Any:
    """Run an elementwise op tile by tile over the flat output."""
    m = machine.current()
    meta_out = meta_call(func, args, kwargs)
    mutates = func._schema.is_mutable
    target = args[0] if mutates else None
    numel = meta_out.numel()
    tensor_pos = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.dim() > 0]
    tensor_kw = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and v.dim() > 0]
    in_dtypes = tuple(args[i].dtype for i in tensor_pos) + tuple(kwargs[k].dtype for k in tensor_kw)
    plan = plan_elementwise(numel, in_dtypes, meta_out.dtype, m, passes)
    if numel == 0 or not (tensor_pos or tensor_kw):
        out = func(*args, **kwargs)
        run(plan, func.name())
        return out
    # operands permuted into the output's memory order: the flat output is then its memory
    operands = [args[i] for i in tensor_pos] + [kwargs[k] for k in tensor_kw]
    if mutates:
        order = memory_order(target)
    elif func._schema.name in CONTIGUOUS_RESULT:
        order = list(range(meta_out.dim()))
    else:
        reverse = func._schema.name in REVERSED_OPERANDS
        order = iterator_order(meta_out.shape, operands[::-1] if reverse else operands)
    shape = torch.Size(meta_out.shape[d] for d in order)
    args = tuple(_in_order(a, order) if i in tensor_pos else a for i, a in enumerate(args))
    kwargs = {k: _in_order(v, order) if k in tensor_kw else v for k, v in kwargs.items()}
    back = [order.index(d) for d in range(len(order))]

    flat_args = list(args)
    for i in tensor_pos:
        flat_args[i] = _Operand(args[i], shape)
    flat_kwargs = dict(kwargs)
    for k in tensor_kw:
        flat_kwargs[k] = _Operand(kwargs[k], shape)
    # an in-place op computes into a contiguous copy of its target when it must
    out = flat_args[0].flat_target() if mutates else torch.empty(numel, dtype=meta_out.dtype)
    tile_args = list(flat_args)
    tile_kwargs = dict(flat_kwargs)
    for tile in tiles(plan):
        a, b = tile.ranges[0]
        for i in tensor_pos:
            tile_args[i] = flat_args[i].tile(a, b)
        for k in tensor_kw:
            tile_kwargs[k] = flat_kwargs[k].tile(a, b)
        res = func(*tile_args, **tile_kwargs)
        out[a:b] = res
    run(plan, func.name())
    if mutates:
        if out.data_ptr() != target.data_ptr() or not args[0].is_contiguous():
            target.copy_(out.view(shape).permute(back))
        return target
    return out.view(shape).permute(back)


def memory_order(t: torch.Tensor) -> list[int]:
    """``t``'s dimensions from outermost to innermost in memory (its shape order when contiguous).

    Only a dense non-overlapping layout has one; any other is computed contiguous.
    """
    dims = list(range(t.dim()))
    if t.is_contiguous() or not is_non_overlapping_and_dense(t):
        return dims
    return sorted(dims, key=lambda d: (-t.stride(d), d))


def iterator_order(shape: torch.Size, operands: list[torch.Tensor]) -> list[int]:
    """The output's dimensions, outermost first, as CPU's TensorIterator lays them out.

    ATen's ``reorder_dimensions``: an insertion sort of the dimensions (innermost first)
    where, for each pair, the first operand whose strides tell them apart decides (a
    broadcast dimension tells nothing; equal strides put the shorter dimension inside).
    So the output follows the first input's layout, channels-last or transposed, which
    meta kernels written as Python references do not always do.
    """
    ndim = len(shape)
    if all(t.is_contiguous() for t in operands):
        return list(range(ndim))  # TensorIterator's fast path: a contiguous output
    strides = [_broadcast_strides(t, shape) for t in operands]

    def should_swap(d0: int, d1: int) -> int:
        for st in strides:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(ndim - 1, -1, -1))  # innermost first
    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            verdict = should_swap(perm[d0], perm[d1])
            if verdict > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif verdict < 0:
                break
    return perm[::-1]


def _broadcast_strides(t: torch.Tensor, shape: torch.Size) -> list[int]:
    """``t``'s strides broadcast to ``shape`` (0 where it is broadcast), as TensorIterator sees them."""
    lead = len(shape) - t.dim()
    return [
        0 if i < lead or (t.shape[i - lead] == 1 and shape[i] != 1) else t.stride(i - lead)
        for i in range(len(shape))
    ]


def _in_order(t: torch.Tensor, order: list[int]) -> torch.Tensor:
    """Operand ``t`` (broadcastable to the output) as a view in the output's memory order."""
    while t.dim() < len(order):
        t = t.unsqueeze(0)
    return t.permute(order)


class _Operand:
    """An operand broadcast to the output's shape, read tile by tile over the flat output.

    A contiguous operand of the output's shape is read as a flat slice. A broadcast one
    is read through a (rows, last dim) view of its expansion, copying only the rows the
    tile spans into the scratchpad; a one-element operand is a stride-0 view.
    """

    def __init__(self, t: torch.Tensor, shape: torch.Size) -> None:
        self.t = t
        self.numel = 1
        for s in shape:
            self.numel *= s
        self.cols = shape[-1] if len(shape) else 1
        if t.shape == shape and t.is_contiguous():
            self.mode, self.src = "flat", t.reshape(-1)
        elif t.numel() == 1:
            self.mode, self.src = "one", t.reshape(1)
        else:
            self.mode, self.src = (
                "rows",
                t.expand(shape).reshape(-1, self.cols) if len(shape) > 1 else t.expand(shape),
            )

    def tile(self, a: int, b: int) -> torch.Tensor:
        if self.mode == "flat":
            return load(self.src, (slice(a, b),))
        if self.mode == "one":
            return load(self.src, (slice(0, 1),)).expand(b - a)
        if self.src.dim() == 1:
            return load(self.src, (slice(a, b),))
        r0, r1 = a // self.cols, -(-b // self.cols)
        rows = load(self.src, (slice(r0, r1),)).reshape(-1)
        return rows[a - r0 * self.cols : b - r0 * self.cols]

    def flat_target(self) -> torch.Tensor:
        """For in-place ops: the flat memory the result is written to."""
        return self.src if self.mode == "flat" else self.t.reshape(-1).clone()


def _simple(func: Any, args: tuple, kwargs: dict) -> Any:
    return elementwise(func, args, kwargs, passes=1)


def _transcendental(func: Any, args: tuple, kwargs: dict) -> Any:
    return elementwise(func, args, kwargs, passes=4)


register(*SIMPLE, *_inplace_names(SIMPLE), category="elementwise", execution="tiled")(_simple)
register(*TRANSCENDENTAL, *_inplace_names(TRANSCENDENTAL), category="elementwise", execution="tiled")(
    _transcendental
)
