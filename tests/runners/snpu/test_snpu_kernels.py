"""Kernels tile for real, count what their plans say, refuse what does not fit, train."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import runners.snpu
from runners.snpu import machine
from runners.snpu.errors import SnpuPlanError
from runners.snpu.kernels.common import poison_outside_tiles
from runners.snpu.planner import plan_elementwise, plan_matmul

torch.manual_seed(0)

CASES = {
    "broadcast_add": lambda a, b: a + b[0],
    "matmul": lambda a, b: a @ b.T,
    "addmm_bias_view": lambda a, b: torch.addmm(a[:, :1], a, b.T, beta=0.5, alpha=2),
    "cross_entropy_weighted": lambda a, b: F.cross_entropy(
        a, (torch.arange(160) % 80).to(a.device), weight=b[0].abs()
    ),
    "softmax": lambda a, b: F.softmax(a, dim=0),
    "layer_norm": lambda a, b: F.layer_norm(a, (a.shape[-1],)),
    "layer_norm_affine": lambda a, b: F.layer_norm(a, (a.shape[-1],), b[0], b[1]),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "masked_fill": lambda a, b: a.masked_fill(b > 0, 2.0),
    "log_softmax_last": lambda a, b: F.log_softmax(a, dim=-1),
    "amax": lambda a, b: a.amax(1),
    "sum_dim": lambda a, b: a.sum(0),
    "var": lambda a, b: a.var(1),
    "sdpa": lambda a, b: F.scaled_dot_product_attention(a[None, None], b[None, None], b[None, None]),
    "embedding": lambda a, b: F.embedding(torch.tensor([3, 1, 3]).to(a.device), b),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_poisoning_memory_outside_each_tile_changes_nothing(case: str) -> None:
    # small scratchpad: many tiles, so a tile reading its neighbours' sticks would show
    a = torch.randn(160, 80)
    b = torch.randn(160, 80)
    fn = CASES[case]
    expected = fn(a, b)
    saved = machine.current()
    machine.set_current(machine.Machine(usable_scratchpad_bytes=32 * 1024))
    try:
        plain = fn(a.to("snpu"), b.to("snpu")).cpu()
        with poison_outside_tiles():
            poisoned = fn(a.to("snpu"), b.to("snpu")).cpu()
    finally:
        machine.set_current(saved)
    torch.testing.assert_close(plain, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(poisoned, plain, rtol=0, atol=0)


def test_an_ops_counters_are_the_sum_over_its_tiles() -> None:
    a, b = torch.randn(256, 512), torch.randn(512, 384)
    with runners.snpu.profile() as prof:
        (a.to("snpu") @ b.to("snpu")).cpu()
    mm = [r for r in prof.records if r.op == "aten::mm"]
    assert len(mm) == 1
    plan = plan_matmul(1, 256, 384, 512, torch.float32, machine.current())
    costs = [t.cost for t in plan.tiles]
    assert mm[0].macs == sum(c.macs for c in costs) == 256 * 512 * 384
    assert mm[0].bytes_moved == sum(c.bytes_moved for c in costs)
    assert mm[0].sticks == sum(c.sticks for c in costs)
    assert mm[0].tiles == len(costs)
    assert mm[0].core_cycles == sum(c.cycles for c in costs)
    assert mm[0].peak_scratchpad_bytes == max(c.scratchpad_bytes for c in costs)


def test_profile_reports_per_op_counters_for_a_run() -> None:
    x = torch.randn(64, 128).to("snpu")
    with runners.snpu.profile() as prof:
        y = F.softmax(x * 2, dim=-1).sum()
    assert y.cpu().item() == pytest.approx(64.0, rel=1e-4)
    by_op = prof.by_op()
    assert {"aten::mul.Tensor", "aten::_softmax", "aten::sum"} <= set(by_op)
    expected = plan_elementwise(64 * 128, (torch.float32,), torch.float32, machine.current()).record("x")
    assert by_op["aten::mul.Tensor"]["sticks"] == expected.sticks
    assert prof.totals()["cycles"] == sum(r.cycles for r in prof.records) > 0


def test_a_row_too_long_for_the_scratchpad_is_refused_clearly() -> None:
    x = torch.randn(1, 1_000_000).to("snpu")
    with pytest.raises(SnpuPlanError, match="cannot split its row") as info:
        F.softmax(x, dim=-1)
    assert "CRCR_SNPU_USABLE_SCRATCHPAD_BYTES" in (info.value.hint or "")
    # sum may chunk a long row on one core: no error, exact enough
    torch.testing.assert_close(x.sum().cpu(), x.cpu().sum(), rtol=1e-4, atol=1e-2)


def test_a_training_step_on_snpu_matches_the_cpu() -> None:
    torch.manual_seed(1)

    def make() -> torch.nn.Module:
        torch.manual_seed(2)
        return torch.nn.Sequential(
            torch.nn.Linear(24, 48), torch.nn.LayerNorm(48), torch.nn.GELU(), torch.nn.Linear(48, 6)
        )

    x, y = torch.randn(16, 24), torch.randint(0, 6, (16,))
    cpu_model, dev_model = make(), make().to("snpu")
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
    dev_opt = torch.optim.SGD(dev_model.parameters(), lr=0.1, momentum=0.9)
    xd, yd = x.to("snpu"), y.to("snpu")
    for _ in range(3):
        for model, opt, inp, tgt in ((cpu_model, cpu_opt, x, y), (dev_model, dev_opt, xd, yd)):
            opt.zero_grad()
            loss = F.cross_entropy(model(inp), tgt)
            loss.backward()
            opt.step()
    torch.testing.assert_close(
        F.cross_entropy(dev_model(xd), yd).cpu(), F.cross_entropy(cpu_model(x), y), rtol=1e-4, atol=1e-5
    )
    for p_cpu, p_dev in zip(cpu_model.parameters(), dev_model.parameters(), strict=True):
        assert p_dev.device.type == "snpu"
        torch.testing.assert_close(p_dev.cpu(), p_cpu, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_matmul_accumulates_in_fp32(dtype: torch.dtype) -> None:
    a, b = torch.randn(64, 2048, dtype=dtype), torch.randn(2048, 64, dtype=dtype)
    got = (a.to("snpu") @ b.to("snpu")).cpu()
    ref = (a.float() @ b.float()).to(dtype)
    assert got.dtype == dtype
    torch.testing.assert_close(got, ref, rtol=2e-2, atol=1e-1)
