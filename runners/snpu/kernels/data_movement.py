"""Views, copies, fills, factories and indexing: the ops tests need to move data.

Views move nothing (they share device memory with their base). Copies, fills and
gathers run as DMA transfers and are counted by the bytes they move.
"""

from __future__ import annotations

from typing import Any

import torch

from runners.snpu.dispatch import raw, register
from runners.snpu.kernels.common import nbytes_of, record_simple

VIEW_OPS = (
    "view",
    "_unsafe_view",
    "_reshape_alias",
    "as_strided",
    "expand",
    "permute",
    "transpose.int",
    "t",
    "squeeze",
    "unsqueeze",
    "select.int",
    "slice.Tensor",
    "split.Tensor",
    "split_with_sizes",
    "unbind.int",
    "narrow",
    "alias",
    "detach",
    "diagonal",
    "unfold",
    "lift_fresh",
    "view_as_real",
    "_neg_view",
    "_conj",
    "resize_",
    "resize_as_",
    "as_strided_",
    "transpose_",
    "t_",
    "squeeze_",
    "squeeze_.dim",
    "squeeze_.dims",
    "unsqueeze_",
    "swapdims_",
    "swapaxes_",
    "set_.source_Tensor",
    "movedim.int",
    "chunk",
    "tensor_split.indices",
    "tensor_split.sections",
)

COPY_OPS = (
    "clone",
    "cat",
    "stack",
    "flip",
    "roll",
    "repeat",
    "tril",
    "triu",
    "index.Tensor",
    "index_select",
    "gather",
    "scatter.src",
    "scatter.value",
    "scatter_add",
    "scatter.reduce",
    "scatter.value_reduce",
    "scatter_reduce.two",
    "index_put",
    "index_put_",
    "_index_put_impl_",
    "index_add",
    "index_copy",
    "index_fill.int_Scalar",
    "index_fill.int_Tensor",
    "masked_select",
    "masked_scatter",
    "nonzero",
    "take",
    "constant_pad_nd",
    "diag_embed",
    "_unsafe_index.Tensor",
    "diagonal_copy",
    "expand_copy",
    "permute_copy",
    "view_copy",
    "unsqueeze_copy",
    "squeeze_copy",
    "transpose_copy.int",
    "t_copy",
    "slice_copy.Tensor",
    "select_copy.int",
    "split_copy.Tensor",
    "unbind_copy.int",
    "alias_copy",
    "detach_copy",
    "as_strided_copy",
    "repeat_interleave.self_int",
    "repeat_interleave.Tensor",
    "sort",
    "topk",
    "argsort",
    "unique_consecutive",
    "_unique2",
    "reflection_pad1d",
    "reflection_pad2d",
    "replication_pad1d",
    "replication_pad2d",
)

FILL_OPS = (
    "fill_.Scalar",
    "fill_.Tensor",
    "zero_",
    "empty_like",
    "empty.memory_format",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "new_zeros",
    "new_ones",
    "new_full",
    "full_like",
    "zeros_like",
    "ones_like",
    "rand_like",
    "randn_like",
    "randint_like",
    "normal_",
    "uniform_",
    "bernoulli_.float",
    "bernoulli_.Tensor",
    "bernoulli",
    "random_",
    "random_.from",
    "random_.to",
    "exponential_",
    "geometric_",
    "log_normal_",
    "cauchy_",
    "arange.start_out",
    "arange.out",
    "linspace.out",
    "logspace.out",
    "eye.out",
    "eye.m_out",
    "randperm.generator_out",
    "scalar_tensor",
    "full",
    "zeros",
    "ones",
    "tril_indices",
    "triu_indices",
)

INFO_OPS = ("_local_scalar_dense", "is_nonzero", "equal", "is_same_size", "_has_compatible_shallow_copy_type")


@register(*VIEW_OPS, category="view", execution="view")
def view_op(func: Any, args: tuple, kwargs: dict) -> Any:
    """Views share device memory with their base: no data moves."""
    return func(*args, **kwargs)


@register(*COPY_OPS, category="data_movement", execution="whole")
def copy_op(func: Any, args: tuple, kwargs: dict) -> Any:
    out = func(*args, **kwargs)
    record_simple(func.name(), nbytes_of(out) * 2)
    return out


@register("narrow_copy", category="data_movement", execution="whole")
def narrow_copy(func: Any, args: tuple, kwargs: dict) -> Any:
    """A copy of ``narrow``: as on CUDA, ``narrow``'s own checks refuse bad arguments.

    CPU's ``narrow_copy`` kernel words them its own way (a ``RuntimeError`` for a dimension
    out of range); upstream's error inputs expect ``narrow``'s ``IndexError`` from a device.
    """
    out = torch.narrow(*args, **kwargs).clone(memory_format=torch.contiguous_format)
    record_simple(func.name(), nbytes_of(out) * 2)
    return out


@register(*FILL_OPS, category="fill", execution="whole")
def fill_op(func: Any, args: tuple, kwargs: dict) -> Any:
    out = func(*args, **kwargs)
    record_simple(func.name(), nbytes_of(out))
    return out


@register(*INFO_OPS, category="scalar", execution="whole")
def info_op(func: Any, args: tuple, kwargs: dict) -> Any:
    return func(*args, **kwargs)


@register("copy_", "_copy_from", "_copy_from_and_resize", category="data_movement", execution="whole")
def copy_(func: Any, args: tuple, kwargs: dict) -> Any:
    out = func(*args, **kwargs)
    record_simple(func.name(), nbytes_of(args[0]) * 2)
    return out


@register("_to_copy", category="data_movement", execution="whole", keep_device=True)
def to_copy(func: Any, args: tuple, kwargs: dict) -> Any:
    """``.to()``: to the CPU gives a plain CPU tensor; on snpu the dtype must be native."""
    from runners.snpu.dispatch import REFUSED_DTYPES, SnpuTensor_device_type
    from runners.snpu.errors import SnpuDtypeError

    device = kwargs.get("device")
    to_cpu = device is not None and torch.device(device).type == "cpu"
    kwargs = dict(kwargs)
    kwargs["device"] = torch.device("cpu")
    out = func(*args, **kwargs)
    record_simple(func.name(), nbytes_of(out) * 2)
    if to_cpu:
        return raw(out)
    if out.dtype in REFUSED_DTYPES:
        raise SnpuDtypeError(out.dtype, f"aten::_to_copy to {SnpuTensor_device_type()}")
    return out
