"""Helpers the embedded op suite's tests share: bounded samples, device moves, comparison.

The suite's test files import this module after the device under test is installed
(the runners' pytest plugin installs it before any test module is imported).

Knobs (environment, read at import):

- ``CRCR_SUITE_MAX_SAMPLES`` (default 3): samples taken per op and dtype, the first N
  the OpInfo generates under the suite's fixed seed, so work per test is bounded and the
  same on every machine.
- ``CRCR_SUITE_OPS``: a comma-separated list of OpInfo / ModuleInfo names; when set
  only those are instantiated. It shrinks collection for quick local runs and tests;
  the ids of the tests that remain are unchanged.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from typing import Any

import torch

MAX_SAMPLES = max(1, int(os.environ.get("CRCR_SUITE_MAX_SAMPLES", "3") or "3"))
# gradcheck's cost grows with numel (one forward per input element): keep it cheap.
MAX_GRADCHECK_NUMEL = 64
_ONLY = {name.strip() for name in os.environ.get("CRCR_SUITE_OPS", "").split(",") if name.strip()}


def selected(infos: Iterable[Any]) -> list[Any]:
    """The OpInfos / ModuleInfos to instantiate (all, or those named in CRCR_SUITE_OPS)."""
    infos = list(infos)
    if not _ONLY:
        return infos
    return [i for i in infos if i.name in _ONLY or getattr(i, "formatted_name", i.name) in _ONLY]


def bounded(samples: Iterable[Any], limit: int = MAX_SAMPLES) -> Iterator[Any]:
    """The first ``limit`` samples (generators are consumed lazily, so the rest cost nothing)."""
    return itertools.islice(samples, limit)


def to_device(sample: Any, device: str) -> Any:
    """A copy of a SampleInput with every tensor on ``device`` (dtypes pass through)."""

    def move(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            moved = t.detach().to(device)
            return moved.requires_grad_(t.requires_grad) if t.is_floating_point() or t.is_complex() else moved
        return t

    return sample.transform(move)


def to_cpu(value: Any) -> Any:
    """Tensors (possibly nested in tuples, lists and dicts) moved to the CPU, detached."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, tuple | list):
        return type(value)(to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value


def call(op: Any, sample: Any) -> Any:
    return op(sample.input, *sample.args, **sample.kwargs)


def device_supports(device: str, dtype: torch.dtype) -> bool:
    """Whether ``device`` can hold a tensor of ``dtype`` at all (snpu has no float64)."""
    try:
        torch.zeros(1, dtype=dtype, device=device)
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    return True


def tensors_of(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in tensors_of(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_of(v)]
    return []


def differentiable_outputs(value: Any) -> list[torch.Tensor]:
    return [t for t in tensors_of(value) if t.requires_grad and (t.is_floating_point() or t.is_complex())]


def to_device_value(value: Any, device: str) -> Any:
    """Tensors in a (nested) value moved to ``device``; other values unchanged."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(device)
    if isinstance(value, tuple | list):
        return type(value)(to_device_value(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device_value(v, device) for k, v in value.items()}
    return value


# dtypes the NumPy-reference templates are instantiated for (upstream's choice for these checks)
REFERENCE_DTYPES = (torch.float32, torch.float64, torch.int64, torch.complex64)


def check_reference_numerics(test: Any, op: Any, device: str, dtype: torch.dtype) -> None:
    """The op on ``device`` equals its NumPy reference on the OpInfo's reference inputs."""
    checked = 0
    for sample in bounded(op.reference_inputs(device, dtype)):
        test.compare_with_reference(op, op.ref, sample, exact_dtype=False)
        checked += 1
    if not checked:
        test.skipTest(f"{op.name} generates no reference inputs for {dtype}")
