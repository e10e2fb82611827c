"""Planner properties (hypothesis) and the cost model's predictions."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from runners.snpu.errors import SnpuPlanError
from runners.snpu.machine import Machine
from runners.snpu.planner import (
    k_split_allowed,
    plan_attention,
    plan_elementwise,
    plan_matmul,
    plan_rows,
    utilisation,
)

M = Machine()
SMALL = Machine(cores=4, usable_scratchpad_bytes=16 * 1024)  # forces many steps per core
DTYPES = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])
MACHINES = st.sampled_from([M, SMALL])


def _check_splits(plan, machine) -> None:
    """Exact divisors of the padded extent, on stick boundaries, padding under one unit per tile."""
    for s in plan.splits:
        assert s.padded_units == s.cores * s.steps * s.tile_units
        assert s.padded_units >= s.units
        assert s.padded_units - s.units < s.cores * s.steps or s.units == 0
        assert s.tile_elems % s.unit == 0
    for t in plan.tiles:
        for (start, _), s in zip(t.ranges, plan.splits, strict=True):
            assert start % s.tile_elems == 0 and start % s.unit == 0
        assert t.cost.scratchpad_bytes <= machine.usable_scratchpad_bytes
    assert len({t.core for t in plan.tiles}) <= machine.cores


@settings(max_examples=60, deadline=None, database=None)
@given(numel=st.integers(1, 300_000), dtype=DTYPES, machine=MACHINES, binary=st.booleans())
def test_elementwise_tiles_cover_each_element_once(numel, dtype, machine, binary) -> None:
    ins = (dtype, dtype) if binary else (dtype,)
    plan = plan_elementwise(numel, ins, dtype, machine)
    _check_splits(plan, machine)
    ranges = sorted(t.ranges[0] for t in plan.tiles)
    assert ranges[0][0] == 0 and ranges[-1][1] == numel
    for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
        assert end == start  # contiguous and disjoint: each element exactly once


@settings(max_examples=60, deadline=None, database=None)
@given(
    rows=st.integers(1, 2000),
    length=st.integers(1, 5000),
    dtype=DTYPES,
    machine=MACHINES,
    chunk=st.booleans(),
)
def test_row_plans_never_split_a_row_across_cores(rows, length, dtype, machine, chunk) -> None:
    try:
        plan = plan_rows(rows, length, dtype, 1, machine, 1, chunk)
    except SnpuPlanError:
        assert not chunk  # only a row that may not be chunked can be refused
        return
    _check_splits(plan, machine)
    assert plan.splits[1].cores == 1  # the reduced dimension stays on one core
    covered = torch.zeros(rows, length, dtype=torch.int32)
    for t in plan.tiles:
        (r0, r1), (c0, c1) = t.ranges
        covered[r0:r1, c0:c1] += 1
    assert torch.all(covered == 1)
    owner = {}
    for t in plan.tiles:
        for r in range(*t.ranges[0]):
            assert owner.setdefault(r, t.core) == t.core  # a row's chunks run on one core


@settings(max_examples=40, deadline=None, database=None)
@given(
    batch=st.integers(1, 3),
    m=st.integers(1, 120),
    n=st.integers(1, 160),
    k=st.integers(1, 160),
    dtype=DTYPES,
    machine=MACHINES,
)
def test_matmul_plans_cover_the_product_once_and_split_k_last(batch, m, n, k, dtype, machine) -> None:
    plan = plan_matmul(batch, m, n, k, dtype, machine)
    _check_splits(plan, machine)
    covered = torch.zeros(batch, m, n, k, dtype=torch.int32)
    seen = set()
    for t in plan.tiles:
        if t.ranges in seen:
            continue
        seen.add(t.ranges)
        (b0, b1), (m0, m1), (n0, n1), (k0, k1) = t.ranges
        covered[b0:b1, m0:m1, n0:n1, k0:k1] += 1
    assert torch.all(covered == 1)
    if plan.splits[3].cores > 1:
        assert k_split_allowed(batch, m, n, dtype, machine)
    assert plan.record("mm").macs == batch * m * n * k


@settings(max_examples=30, deadline=None, database=None)
@given(n=st.integers(1, 8), lq=st.integers(1, 600), s=st.integers(1, 3000), e=st.sampled_from([8, 64, 128]))
def test_attention_plans_fit_and_keep_keys_on_one_core(n, lq, s, e) -> None:
    plan = plan_attention(n, lq, s, e, e, torch.float16, M)
    _check_splits(plan, M)
    assert plan.splits[2].cores == 1
    assert plan.record("sdpa").macs == n * lq * s * 2 * e


def test_row_too_long_for_the_scratchpad_is_an_error_not_a_spill() -> None:
    with pytest.raises(SnpuPlanError, match="needs .* bytes of scratchpad"):
        plan_rows(4, 1_000_000, torch.float32, 1_000_000, M, 4, False)


# --------------------------------------------------------------------------- cost model


def test_doubling_an_elementwise_op_doubles_its_counters_as_predicted() -> None:
    # 32 cores x 1024 fp32 sticks: one tile per core at both sizes, so the load time
    # (bandwidth bound) doubles and the fixed per-tile overhead does not
    n = 32 * 1024 * 32
    one = plan_elementwise(n, (torch.float32, torch.float32), torch.float32, M).record("add")
    two = plan_elementwise(2 * n, (torch.float32, torch.float32), torch.float32, M).record("add")
    assert two.bytes_moved == 2 * one.bytes_moved
    assert two.sticks == 2 * one.sticks
    assert two.tiles == one.tiles == 32
    # per core: the first load (prologue) + max(compute, load) + the fixed tile overhead
    overhead = M.tile_overhead_cycles
    assert two.cycles - overhead == 2 * (one.cycles - overhead)


def test_doubling_matmul_m_doubles_macs_and_roughly_cycles() -> None:
    one = plan_matmul(1, 2048, 2048, 2048, torch.float16, M).record("mm")
    two = plan_matmul(1, 4096, 2048, 2048, torch.float16, M).record("mm")
    assert two.macs == 2 * one.macs
    # compute bound at these sizes: cycles follow the MACs (within the per-core prologue)
    assert 1.9 < two.cycles / one.cycles < 2.1


def test_fp32_matmul_costs_four_times_fp16_when_compute_bound() -> None:
    half = plan_matmul(1, 4096, 4096, 4096, torch.float16, M).record("mm")
    full = plan_matmul(1, 4096, 4096, 4096, torch.float32, M).record("mm")
    assert 3.5 < full.cycles / half.cycles < 4.5


def test_large_matmul_uses_the_arrays_well_and_small_ones_do_not() -> None:
    big = plan_matmul(1, 4096, 4096, 4096, torch.float16, M)
    small = plan_matmul(1, 64, 64, 64, torch.float16, M)
    assert utilisation(big, torch.float16, M) >= 0.8
    assert utilisation(small, torch.float16, M) < 0.2


def test_a_4096_cubed_plan_is_costed_without_executing_it() -> None:
    plan = plan_matmul(1, 4096, 4096, 4096, torch.float16, M)
    rec = plan.record("mm")
    assert rec.macs == 4096**3
    assert rec.cores_used == M.cores
    assert rec.peak_scratchpad_bytes <= M.usable_scratchpad_bytes
