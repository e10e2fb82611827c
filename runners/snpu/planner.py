"""The tile planner: how an op's work is cut into tiles that fit a core's scratchpad.

A plan splits each dimension of the work twice: across cores (``cores``) and, within a
core, into sequential steps (``steps``). Dimensions laid out in sticks split on stick
boundaries. Every split is an exact divisor of the *padded* extent: the extent is padded
up (never by a whole tile) so that ``units = cores * steps * tile_units``; tiles that
lie wholly in padding are never executed. Reductions are never split across cores,
except matmul's K, and only once M and N (and batch) cannot use the cores.

A plan that cannot fit (a single tile larger than the usable scratchpad) raises
``SnpuPlanError``; nothing is silently spilled.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from runners.snpu.counters import OpRecord, TileCost
from runners.snpu.errors import SnpuPlanError
from runners.snpu.machine import Machine, _itemsize


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Split:
    """How one dimension is cut: ``extent`` elements in units of ``unit`` elements."""

    name: str
    extent: int
    unit: int
    cores: int
    steps: int

    @property
    def units(self) -> int:
        return _ceil(self.extent, self.unit)

    @property
    def tile_units(self) -> int:
        return max(1, _ceil(self.units, self.cores * self.steps))

    @property
    def padded_units(self) -> int:
        return self.cores * self.steps * self.tile_units

    @property
    def tile_elems(self) -> int:
        return self.tile_units * self.unit

    def ranges(self, core: int) -> Iterator[tuple[int, int]]:
        """Element ranges of this core's steps, clipped to the extent; empty ones skipped."""
        for step in range(self.steps):
            start = (core * self.steps + step) * self.tile_elems
            if start >= self.extent:
                return
            yield start, min(start + self.tile_elems, self.extent)


def _balanced(units: int, cores: int, max_units_per_tile: int) -> tuple[int, int]:
    """(cores, steps) for ``units``: use up to ``cores`` cores, then as few steps as fit."""
    c = max(1, min(cores, units))
    per_core = _ceil(units, c)
    c = _ceil(units, per_core)  # drop cores that would only hold padding
    steps = max(1, _ceil(per_core, max(1, max_units_per_tile)))
    return c, steps


@dataclass(frozen=True)
class Tile:
    """One tile: the core that runs it, its element range per dimension, its cost."""

    core: int
    ranges: tuple[tuple[int, int], ...]
    cost: TileCost


@dataclass(frozen=True)
class Plan:
    """A tile plan of one op on one machine; counters follow from it alone."""

    kind: str
    splits: tuple[Split, ...]
    tiles: tuple[Tile, ...]
    extra_cycles: int = 0

    def record(self, op: str) -> OpRecord:
        return OpRecord.from_tiles(op, (t.cost for t in self.tiles), extra_cycles=self.extra_cycles)

    @property
    def cores_used(self) -> int:
        return len({t.core for t in self.tiles})


def _dma_cycles(machine: Machine, nbytes: int, active_cores: int) -> int:
    # the device memory bandwidth is shared by the cores that are moving data
    return _ceil(nbytes * max(1, active_cores), int(machine.memory_bytes_per_cycle))


def _sticks(n_elems: int, dtype: torch.dtype, machine: Machine) -> int:
    return _ceil(n_elems, machine.stick_elems(dtype))


def _enumerate(splits: tuple[Split, ...]) -> Iterator[tuple[int, tuple[tuple[int, int], ...]]]:
    """(core, ranges) of every non-empty tile; cores numbered in mixed radix over splits."""
    core_ids = itertools.product(*(range(s.cores) for s in splits))
    for idx in core_ids:
        core = 0
        for s, i in zip(splits, idx, strict=True):
            core = core * s.cores + i
        for ranges in itertools.product(*(list(s.ranges(i)) for s, i in zip(splits, idx, strict=True))):
            yield core, ranges


# --------------------------------------------------------------------------- elementwise


@functools.lru_cache(maxsize=4096)
def plan_elementwise(
    numel: int,
    in_dtypes: tuple[torch.dtype, ...],
    out_dtype: torch.dtype,
    machine: Machine,
    passes: int = 1,
) -> Plan:
    """Flat elementwise work over ``numel`` output elements, split on stick boundaries.

    ``passes`` is the vector/special-function unit passes per output stick (1 for add,
    more for transcendental functions).
    """
    dtypes = (*in_dtypes, out_dtype)
    unit = max(machine.stick_elems(d) for d in dtypes)  # align to the widest stick
    bytes_per_elem = sum(_itemsize(d) for d in dtypes)
    max_units = machine.usable_scratchpad_bytes // (unit * bytes_per_elem)
    if max_units < 1:
        raise SnpuPlanError(
            f"one stick of an elementwise op needs {unit * bytes_per_elem} bytes of scratchpad"
        )
    units = max(1, _ceil(numel, unit))
    cores, steps = _balanced(units, machine.cores, max_units)
    split = Split("flat", max(numel, 1), unit, cores, steps)
    tiles = []
    for core, ranges in _enumerate((split,)):
        n = ranges[0][1] - ranges[0][0]
        sticks = sum(_sticks(n, d, machine) for d in dtypes)
        nbytes = sum(_sticks(n, d, machine) * machine.stick_bytes for d in dtypes)
        compute = _sticks(n, out_dtype, machine) * passes
        dma = _dma_cycles(machine, nbytes, cores)
        cycles = max(compute, dma) + machine.tile_overhead_cycles
        tiles.append(
            Tile(core, ranges, TileCost(core, cycles, nbytes, sticks, n * bytes_per_elem, dma_cycles=dma))
        )
    return Plan("elementwise", (split,), tuple(tiles))


# --------------------------------------------------------------------------- row-wise


@functools.lru_cache(maxsize=4096)
def plan_rows(
    rows: int,
    row_len: int,
    dtype: torch.dtype,
    out_len: int,
    machine: Machine,
    passes: int = 1,
    chunk_rows: bool = False,
    work_dtype: torch.dtype = torch.float32,
) -> Plan:
    """Row-wise work (reductions, softmax, norms): whole rows per tile, rows across cores.

    The reduced dimension (``row_len``, laid out in sticks) is never split across cores.
    With ``chunk_rows`` (sum, amax, var...) a row too long for the scratchpad is split
    into sequential steps on the same core, which keeps a running partial; without it
    (softmax, norms need the whole row) such a row is an error.
    """
    in_unit = machine.stick_elems(dtype)
    row_sticks = max(1, _ceil(row_len, in_unit))
    out_sticks = max(1, _ceil(out_len, machine.stick_elems(dtype))) if out_len else 0
    # input sticks, output sticks, and a work copy in the working precision
    work_factor = max(1, _itemsize(work_dtype) // _itemsize(dtype))
    bytes_per_row = (row_sticks * (1 + work_factor) + out_sticks) * machine.stick_bytes
    budget = machine.usable_scratchpad_bytes
    if bytes_per_row <= budget:
        col_split = Split("reduce", max(row_len, 1), in_unit, 1, 1)
        max_rows = budget // bytes_per_row
    elif chunk_rows:
        per_stick = (1 + work_factor) * machine.stick_bytes
        max_sticks = (budget - machine.stick_bytes * 4) // per_stick
        col_split = Split("reduce", row_len, in_unit, 1, _ceil(row_sticks, max_sticks))
        max_rows = 1
    else:
        raise SnpuPlanError(
            f"a row of {row_len} {str(dtype).removeprefix('torch.')} elements needs {bytes_per_row} bytes of "
            f"scratchpad; a core has {budget} usable, and this op cannot split its row"
        )
    cores, steps = _balanced(max(rows, 1), machine.cores, max_rows)
    row_split = Split("rows", max(rows, 1), 1, cores, steps)
    splits = (row_split, col_split)
    tiles = []
    for core, ranges in _enumerate(splits):
        nr = ranges[0][1] - ranges[0][0]
        nc = ranges[1][1] - ranges[1][0]
        last_chunk = ranges[1][1] == col_split.extent
        in_st = nr * _ceil(nc, in_unit)
        out_st = nr * out_sticks if last_chunk else 0
        nbytes = (in_st + out_st) * machine.stick_bytes
        compute = in_st * passes
        dma = _dma_cycles(machine, nbytes, cores)
        cycles = max(compute, dma) + machine.tile_overhead_cycles
        scratch = nr * (_ceil(nc, in_unit) * (1 + work_factor) + out_sticks) * machine.stick_bytes
        tiles.append(
            Tile(core, ranges, TileCost(core, cycles, nbytes, in_st + out_st, scratch, dma_cycles=dma))
        )
    return Plan("rows", splits, tuple(tiles))


def longest_row(dtype: torch.dtype, machine: Machine, *, output_row: bool) -> int:
    """The longest row ``plan_rows`` holds in one tile (without ``chunk_rows``), in elements.

    ``output_row``: the tile also holds an output row of the same length (softmax,
    layer_norm), else one value per row (argmax, nll_loss). Found by asking
    ``plan_rows`` itself, so it is the limit the kernels meet.
    """

    def fits(n: int) -> bool:
        try:
            _plan_one_row(n, dtype, machine, output_row)
        except SnpuPlanError:
            return False
        return True

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _plan_one_row(n: int, dtype: torch.dtype, machine: Machine, output_row: bool) -> Plan:
    return plan_rows.__wrapped__(1, n, dtype, n if output_row else 1, machine, 1, False)


# --------------------------------------------------------------------------- matmul


@dataclass(frozen=True)
class _MatmulShape:
    batch: int
    m: int
    n: int
    k: int


def _matmul_footprint(mt: int, nt: int, kt: int, isz: int) -> int:
    # A and B tiles in the input dtype, the C accumulator in fp32
    return (mt * kt + kt * nt) * isz + mt * nt * 4


def _matmul_tile_cost(
    machine: Machine,
    dtype: torch.dtype,
    core: int,
    m: int,
    n: int,
    k: int,
    first_k: bool,
    last_k: bool,
    active: int,
) -> TileCost:
    isz = _itemsize(dtype)
    st = machine.stick_elems(dtype)
    # A is laid out in sticks along K, B and C along N
    a_sticks = m * _ceil(k, st)
    b_sticks = k * _ceil(n, st)
    c_sticks = m * _ceil(n, st) if last_k else 0
    sticks = a_sticks + b_sticks + c_sticks
    nbytes = sticks * machine.stick_bytes
    macs = m * n * k
    # the 8x8 arrays work on 8-row, 8-column blocks: ragged edges waste lanes
    padded = _ceil(m, 8) * 8 * _ceil(n, 8) * 8 * k
    compute = _ceil(padded, machine.macs_per_cycle_per_core(dtype))
    dma = _dma_cycles(machine, nbytes, active)
    cycles = max(compute, dma) + machine.tile_overhead_cycles
    scratch = (m * k + k * n) * isz + m * n * 4
    return TileCost(core, cycles, nbytes, sticks, scratch, macs, dma_cycles=dma)


def _estimate_matmul(
    machine: Machine,
    dtype: torch.dtype,
    shape: _MatmulShape,
    cb: int,
    cm: int,
    cn: int,
    ck: int,
    mt: int,
    nt: int,
    kt: int,
) -> float:
    """Cycles of the busiest core, analytically (used to choose among candidate plans)."""
    st = machine.stick_elems(dtype)
    per_b = _ceil(shape.batch, cb)
    per_m = _ceil(shape.m, cm)
    per_n = _ceil(_ceil(shape.n, st), cn) * st
    per_k = _ceil(_ceil(shape.k, st), ck) * st
    sm, sn, sk = _ceil(per_m, mt), _ceil(per_n, nt), _ceil(per_k, kt)
    m, n, k = _ceil(per_m, sm), _ceil(per_n, sn), _ceil(per_k, sk)
    cost = _matmul_tile_cost(machine, dtype, 0, m, n, k, True, True, cb * cm * cn * ck)
    ring = 0 if ck == 1 else (ck - 1) * per_m * per_n * 4 // machine.ring_bytes_per_cycle
    return per_b * sm * sn * sk * cost.cycles + cost.dma_cycles + ring, per_b * sm * sn * sk


# plans within this fraction of the fastest are equal: the one with fewest tiles wins
_PLAN_TIE = 0.01


def k_split_allowed(batch: int, m: int, n: int, dtype: torch.dtype, machine: Machine) -> bool:
    """Whether a matmul may split K across cores: only when M, N and batch run out."""
    return max(batch, 1) * _ceil(max(m, 1), 8) * _ceil(max(n, 1), machine.stick_elems(dtype)) < machine.cores


@functools.lru_cache(maxsize=1024)
def plan_matmul(batch: int, m: int, n: int, k: int, dtype: torch.dtype, machine: Machine) -> Plan:
    """Plan ``batch`` products of (m x k) @ (k x n): split batch, M and N across cores, K last."""
    if batch * m * n * k == 0:
        return Plan("matmul", (), ())  # nothing to multiply: no tiles, no cost
    shape = _MatmulShape(batch, m, n, k)
    isz = _itemsize(dtype)
    st = machine.stick_elems(dtype)
    n_units, k_units = _ceil(max(n, 1), st), _ceil(max(k, 1), st)
    pow2 = [2**i for i in range(int(math.log2(machine.cores)) + 1)]
    candidates: list[tuple[float, int, tuple[int, ...]]] = []
    for cb in pow2:
        if cb > max(batch, 1):
            break
        for cm in pow2:
            if cb * cm > machine.cores or cm > max(m, 1):
                break
            for cn in pow2:
                if cb * cm * cn > machine.cores or cn > n_units:
                    break
                # K is split across cores only when batch x M x N cannot give every core
                # an 8-row, one-stick block of its own
                ck_options = [1]
                if k_split_allowed(batch, m, n, dtype, machine):
                    ck_options += [c for c in pow2[1:] if cb * cm * cn * c <= machine.cores and c <= k_units]
                per_m = _ceil(max(m, 1), cm)
                per_n = _ceil(n_units, cn) * st
                for ck in ck_options:
                    per_k = _ceil(k_units, ck) * st
                    for mt in (8, 16, 32, 64, 128, 256, 512, 1024):
                        mt = min(mt, per_m)
                        for nt in (st, 2 * st, 4 * st, 8 * st, 16 * st, 32 * st):
                            nt = min(nt, per_n)
                            free = machine.usable_scratchpad_bytes - mt * nt * 4
                            kt = (free // ((mt + nt) * isz)) // st * st if free > 0 else 0
                            kt = min(kt, per_k)
                            if kt < min(st, per_k) or kt <= 0:
                                continue
                            est, steps = _estimate_matmul(machine, dtype, shape, cb, cm, cn, ck, mt, nt, kt)
                            candidates.append((est, steps, (cb, cm, cn, ck, mt, nt, kt)))
    best = None
    if candidates:
        fastest = min(c[0] for c in candidates)
        # among (nearly) equally fast plans, fewer and larger tiles: less descriptor work
        best = min((c for c in candidates if c[0] <= fastest * (1 + _PLAN_TIE)), key=lambda c: (c[1], c[0]))
    if best is None:
        raise SnpuPlanError(
            f"no tiling of a {m}x{k} @ {k}x{n} matmul fits {machine.usable_scratchpad_bytes} bytes"
        )
    cb, cm, cn, ck, mt, nt, kt = best[2]
    per_m = _ceil(max(m, 1), cm)
    per_n_units = _ceil(n_units, cn)
    per_k_units = _ceil(k_units, ck)
    splits = (
        Split("batch", max(batch, 1), 1, cb, _ceil(max(batch, 1), cb)),
        Split("m", max(m, 1), 1, cm, _ceil(per_m, mt)),
        Split("n", max(n, 1), st, cn, _ceil(per_n_units, _ceil(nt, st))),
        Split("k", max(k, 1), st, ck, _ceil(per_k_units, kt // st)),
    )
    active = cb * cm * cn * ck
    tiles = []
    k_split = splits[3]
    for core, ranges in _enumerate(splits):
        (b0, b1), (m0, m1), (n0, n1), (k0, k1) = ranges
        first_k = k0 % (k_split.tile_elems * k_split.steps) == 0
        last_k = k1 == k or (k1 % (k_split.tile_elems * k_split.steps) == 0)
        c = _matmul_tile_cost(machine, dtype, core, m1 - m0, n1 - n0, k1 - k0, first_k, last_k, active)
        for _ in range(b1 - b0):
            tiles.append(Tile(core, ranges, c))
    ring = 0 if ck == 1 else (ck - 1) * per_m * per_n_units * st * 4 // machine.ring_bytes_per_cycle
    _check_fits(tiles, machine)
    return Plan("matmul", splits, tuple(tiles), extra_cycles=ring)


def _check_fits(tiles: list[Tile], machine: Machine) -> None:
    worst = max((t.cost.scratchpad_bytes for t in tiles), default=0)
    if worst > machine.usable_scratchpad_bytes:
        raise SnpuPlanError(
            f"a tile needs {worst} bytes of scratchpad; a core has {machine.usable_scratchpad_bytes}"
        )


def utilisation(plan: Plan, dtype: torch.dtype, machine: Machine) -> float:
    """Modelled MACs over the peak MACs of the cycles the plan takes."""
    rec = plan.record("matmul")
    if rec.cycles == 0:
        return 0.0
    return rec.macs / (rec.cycles * machine.peak_macs_per_cycle(dtype))


# --------------------------------------------------------------------------- attention


def _attention_footprint(lq: int, sc: int, e: int, ev: int, isz: int) -> int:
    # q block, k and v chunks in the input dtype; scores, accumulator and the running
    # max and sum in fp32
    return (lq * e + sc * e + sc * ev) * isz + (lq * sc + lq * ev + 2 * lq) * 4


@functools.lru_cache(maxsize=1024)
def plan_attention(
    n: int, lq_total: int, s: int, e: int, ev: int, dtype: torch.dtype, machine: Machine, causal: bool = False
) -> Plan:
    """Flash-style attention: (batch x heads) and query blocks across cores, keys in chunks.

    Each tile holds a block of query rows and one chunk of keys and values; a core walks
    the chunks in order keeping the running max, sum and output accumulator, so the
    softmax over keys is never split across cores. With ``causal`` (top-left aligned)
    the tiles whose keys all lie after their last query are not planned at all.
    """
    isz = _itemsize(dtype)
    st = machine.stick_elems(dtype)
    n, lq_total, s = max(n, 1), max(lq_total, 1), max(s, 1)
    best = None
    # causal: smaller query blocks let whole tiles above the diagonal be skipped
    for lq in ((256,) if causal else (lq_total,)) + (512, 256, 128, 64, 32, 16, 8):
        lq = min(lq, lq_total)
        for sc in ((256,) if causal else ()) + (_ceil(s, st) * st, 1024, 512, 256, 128, 64, st):
            sc = min(sc, _ceil(s, st) * st)
            if _attention_footprint(lq, sc, e, ev, isz) <= machine.usable_scratchpad_bytes:
                best = (lq, sc)
                break
        if best:
            break
    if best is None:
        raise SnpuPlanError(
            f"attention with head dims {e}/{ev} does not fit {machine.usable_scratchpad_bytes} bytes even in 8-row blocks"
        )
    lq, sc = best
    cn, steps_n = _balanced(n, machine.cores, 1)
    blocks = _ceil(lq_total, lq)
    cl, steps_l = _balanced(blocks, max(1, machine.cores // cn), 1)
    splits = (
        Split("batch_heads", n, 1, cn, steps_n),
        Split("query", lq_total, lq, cl, steps_l),
        Split("keys", s, st, 1, _ceil(_ceil(s, st), sc // st)),
    )
    active = cn * cl
    tiles = []
    for core, ranges in _enumerate(splits):
        _, (q0, q1), (k0, k1) = ranges  # one batch-head per tile
        if causal and k0 > q1 - 1:
            continue
        rows, chunk = q1 - q0, k1 - k0
        first, last = k0 == 0, k1 == s or (causal and k1 >= q1)
        macs = rows * chunk * (e + ev)
        sticks = (rows * _ceil(e, st) if first else 0) + chunk * (_ceil(e, st) + _ceil(ev, st))
        sticks += rows * _ceil(ev, st) if last else 0
        nbytes = sticks * machine.stick_bytes
        padded = _ceil(rows, 8) * 8 * _ceil(chunk, 8) * 8 * (e + ev)
        compute = _ceil(padded, machine.macs_per_cycle_per_core(dtype)) + 4 * _ceil(rows * chunk, st)
        dma = _dma_cycles(machine, nbytes, active)
        cycles = max(compute, dma) + machine.tile_overhead_cycles
        scratch = _attention_footprint(rows, chunk, e, ev, isz)
        tiles.append(
            Tile(core, ranges, TileCost(core, cycles, nbytes, sticks, scratch, macs, dma_cycles=dma))
        )
    return Plan("attention", splits, tuple(tiles))
