"""ATen's memory-overlap checks for ``out=`` calls, on snpu's device memory.

snpu runs an ``out=`` call as its functional kernel followed by a copy into ``out``
(``dispatch._call_out``), so nothing in it would notice that ``out`` aliases an input or
itself; the CPU refuses such calls before computing (ATen's ``MemoryOverlap.cpp``), and
upstream ``error_inputs`` of ``masked_select``, ``index_select``, ``take`` and ``cat``
assert it. The rules are ATen's:

- an output with more than one element at one address (a stride-0 expansion) is refused
  by every elementwise (TensorIterator) op and every op below;
- elementwise ops refuse an output that *partially* overlaps an input (the same memory
  with the same geometry is fine: ``add(x, y, out=x)``);
- the gather-like ops in ``NO_OVERLAP`` refuse any overlap with an input, full included.

Geometries ATen calls "too hard" (an operand that is not non-overlapping and dense) pass,
as they do on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense

INTERNAL = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)
OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
    "single memory location. Please clone() the tensor before performing the operation."
)

# packets whose CPU out= kernels call at::assert_no_overlap(result, input)
NO_OVERLAP = frozenset(
    {"aten::cat", "aten::index_select", "aten::masked_select", "aten::take", "aten::gather", "aten::nonzero"}
)

NO, PARTIAL, FULL = "no", "partial", "full"


def internal_overlap(t: torch.Tensor) -> bool:
    """ATen's ``has_internal_overlap == YES``: a dimension longer than one with stride 0."""
    return t.numel() > 1 and any(size > 1 and stride == 0 for size, stride in zip(t.shape, t.stride(), strict=True))


def overlap(a: torch.Tensor, b: torch.Tensor) -> str:
    """ATen's ``get_overlap_status`` of two tensors (``TooHard`` reads as no overlap)."""
    if a is b:
        return FULL
    if a.numel() == 0 or b.numel() == 0:
        return NO
    if not (is_non_overlapping_and_dense(a) and is_non_overlapping_and_dense(b)):
        return NO
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return NO
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if (a0, a1) == (b0, b1):
        return FULL if a.stride() == b.stride() else PARTIAL
    return PARTIAL if a0 < b1 and b0 < a1 else NO


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def check_out(packet: str, elementwise: bool, inputs: list[Any], outs: list[Any]) -> None:
    """Raise the CPU's ``RuntimeError`` when ``outs`` overlap themselves or ``inputs``.

    ``packet`` is the op's ``aten::name``; ``elementwise`` whether its kernel is a
    TensorIterator-style elementwise one. Tensors are snpu's device memory (CPU tensors).
    """
    no_overlap = packet in NO_OVERLAP
    if not (no_overlap or elementwise):
        return
    sources = _tensors(inputs)
    for out in _tensors(outs):
        if internal_overlap(out):
            raise RuntimeError(INTERNAL)
        for src in sources:
            status = overlap(out, src)
            if status == PARTIAL or (status == FULL and no_overlap):
                raise RuntimeError(OVERLAP)
