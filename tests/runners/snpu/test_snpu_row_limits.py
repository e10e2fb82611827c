"""The capability file states the longest row each whole-row kernel holds; that is where it refuses."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from runners.snpu import capabilities
from runners.snpu.errors import SnpuPlanError

# one call per kernel module that keeps a whole row in one tile, on a single row of n elements
CALLS = {
    "aten::native_layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],)),
    "aten::_softmax": lambda x: x.softmax(-1),
    "aten::cumsum": lambda x: x.cumsum(-1),
    "aten::argmax": lambda x: x.argmax(-1),
    "aten::nll_loss_forward": lambda x: F.nll_loss(x, torch.zeros(1, dtype=torch.long, device=x.device)),
}


@pytest.fixture(scope="module")
def limits() -> dict[str, dict[str, int]]:
    return capabilities.row_limits()


def test_row_limits_name_the_whole_row_kernels_and_not_the_chunked_reductions(limits) -> None:
    assert set(CALLS) <= set(limits)
    assert {"aten::_log_softmax", "aten::native_layer_norm_backward", "aten::_softmax_backward_data"} <= set(limits)
    # sum, mean, var walk a long row in chunks: no limit
    assert not {"aten::sum", "aten::mean", "aten::var"} & set(limits)
    assert limits["aten::native_layer_norm"]["float32"] < 9_437_184  # the upstream row that does not fit
    # a kernel with one output value per row holds a longer row than one writing a whole output row
    assert limits["aten::argmax"]["float32"] > limits["aten::_softmax"]["float32"]


@pytest.mark.parametrize("op", sorted(CALLS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_stated_longest_row_runs_and_one_element_more_is_refused(limits, op: str, dtype: torch.dtype) -> None:
    n = limits[op][str(dtype).removeprefix("torch.")]
    call = CALLS[op]
    call(torch.randn(1, n, dtype=dtype).to("snpu"))
    with pytest.raises(SnpuPlanError, match="cannot split its row"):
        call(torch.randn(1, n + 1, dtype=dtype).to("snpu"))
