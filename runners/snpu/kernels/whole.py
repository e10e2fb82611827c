"""Whole-tensor kernels: ops snpu runs as one operation on device memory, untiled.

These are the ops a dataflow NPU would hand to a host-assisted or library routine
rather than to its tiled vector and matrix units: dense linear algebra
(factorisations, solves), convolution and pooling, sorting and searching, histograms,
random sampling, losses and scatter-style updates. Each is registered with
``execution="whole"`` so the capability file and ``crcr snpu info`` say so; its
counters are one DMA of the bytes it reads and writes (``record_simple``), not a
tile plan. None of them takes part in the tiling proof.
"""

from __future__ import annotations

from typing import Any

from runners.snpu.dispatch import register
from runners.snpu.kernels.common import nbytes_of, record_simple

LINALG = (
    "_linalg_svd",
    "_linalg_check_errors",
    "linalg_qr",
    "linalg_inv_ex",
    "linalg_lu_factor_ex",
    "_linalg_solve_ex",
    "linalg_lu_solve",
    "linalg_cross",
    "_linalg_slogdet",
    "_linalg_det",
    "linalg_cholesky_ex",
    "_linalg_eigh",
    "linalg_ldl_factor_ex",
    "linalg_ldl_solve",
    "linalg_lstsq",
    "linalg_pinv.atol_rtol_tensor",
    "linalg_matrix_exp",
    "linalg_householder_product",
    "linalg_lu",
    "linalg_solve_triangular",
    "triangular_solve",
    "cholesky",
    "cholesky_inverse",
    "cholesky_solve",
    "geqrf",
    "ormqr",
    "lu_unpack",
    "addmv",
    "addmv_",
    "addbmm",
    "addbmm_",
    "addr",
    "addr_",
    "_trilinear",
    "trace",
    "dist",
    "_cdist_forward",
    "_euclidean_dist",
    "_pdist_forward",
)

CONV_POOL = (
    "convolution",
    "im2col",
    "avg_pool2d",
    "avg_pool3d",
    "_adaptive_avg_pool2d",
    "_adaptive_avg_pool3d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "max_pool2d_with_indices",
    "max_pool2d_with_indices_backward",
    "max_pool3d_with_indices",
    "max_unpool2d",
    "max_unpool3d",
    "fractional_max_pool2d",
    "fractional_max_pool3d",
    "upsample_nearest1d",
    "upsample_nearest2d",
    "upsample_nearest3d",
    "_upsample_nearest_exact1d",
    "_upsample_nearest_exact2d",
    "_upsample_nearest_exact3d",
    "upsample_linear1d",
    "upsample_bilinear2d",
    "upsample_bicubic2d",
    "upsample_trilinear3d",
    "_upsample_bilinear2d_aa",
    "grid_sampler_2d",
    "grid_sampler_3d",
    "reflection_pad3d",
    "replication_pad3d",
    "pixel_shuffle",
    "pixel_unshuffle",
    "channel_shuffle",
    "native_group_norm",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit.no_stats",
    "_batch_norm_with_update",
)

LOSS = (
    "nll_loss2d_forward",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "soft_margin_loss",
    "multi_margin_loss",
    "multilabel_margin_loss_forward",
    "smooth_l1_loss",
    "mse_loss",
    "huber_loss",
    "_ctc_loss",
    "_ctc_loss.Tensor",
    "log_sigmoid_forward",
    "glu",
)

SORT_SEARCH = (
    "cummax",
    "cummin",
    "kthvalue",
    "median",
    "median.dim",
    "nanmedian",
    "nanmedian.dim",
    "mode",
    "isin.Tensor_Tensor",
    "bucketize.Tensor",
    "searchsorted.Tensor",
    "searchsorted.Scalar",
    "histc",
    "histogram.bin_ct",
    "histogram.bins_tensor",
    "_histogramdd_bin_edges",
    "_histogramdd_from_bin_cts",
    "_histogramdd_from_bin_tensors",
    "unique_dim",
    "count_nonzero",
    "count_nonzero.dim_IntList",
    "nonzero_static",
    "segment_reduce",
    "allclose",
    "hash_tensor",
    "frexp.Tensor",
)

SCATTER = (
    "index_add_",
    "index_copy_",
    "index_fill_.int_Scalar",
    "index_fill_.int_Tensor",
    "index_reduce",
    "index_reduce_",
    "scatter_.src",
    "scatter_.value",
    "scatter_.reduce",
    "scatter_.value_reduce",
    "scatter_add_",
    "scatter_reduce_.two",
    "masked_scatter_",
    "put",
    "put_",
    "diagonal_scatter",
    "select_scatter",
    "slice_scatter",
    "as_strided_scatter",
    "_unsafe_masked_index",
    "_unsafe_masked_index_put_accumulate",
    "embedding_renorm_",
    "_embedding_bag_forward_only",
    "_embedding_bag",
    "renorm",
    "block_diag",
    "rot90",
    "unsafe_split.Tensor",
    "split_with_sizes_copy",
    "unfold_copy",
    "_chunk_cat",
    "fill.Scalar",
    "linspace.Tensor_Tensor",
    "linspace.Tensor_Scalar",
    "linspace.Scalar_Tensor",
    "logspace.Tensor_Tensor",
    "logspace.Tensor_Scalar",
    "logspace.Scalar_Tensor",
)

RANDOM = (
    "normal.Tensor_float",
    "normal.float_Tensor",
    "normal.Tensor_Tensor",
    "multinomial",
    "native_dropout",
    "native_dropout_backward",
    "rrelu_with_noise",
)


def _whole(func: Any, args: tuple, kwargs: dict) -> Any:
    """The op on the device memory at once; counted as one DMA of what it reads and writes."""
    out = func(*args, **kwargs)
    record_simple(func.name(), nbytes_of(args) + nbytes_of(out))
    return out


register(*LINALG, category="linalg", execution="whole")(_whole)
register(*CONV_POOL, category="conv_pool_norm", execution="whole")(_whole)
register(*LOSS, category="loss", execution="whole")(_whole)
register(*SORT_SEARCH, category="sort_search", execution="whole")(_whole)
register(*SCATTER, category="scatter_index", execution="whole")(_whole)
register(*RANDOM, category="random", execution="whole")(_whole)
