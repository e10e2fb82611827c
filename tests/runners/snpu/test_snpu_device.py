"""The snpu device as a user sees it: factories, transfers, printing, refusals, fallback."""

from __future__ import annotations

import logging

import pytest
import torch

import runners.snpu
from runners.snpu.errors import SnpuDtypeError, SnpuUnsupportedOpError


def test_install_is_idempotent_and_device_exists() -> None:
    runners.snpu.install()
    runners.snpu.install()
    assert runners.snpu.is_installed()
    x = torch.ones(2, device="snpu")
    assert x.device == torch.device("snpu", 0)
    assert torch.snpu.is_available() and torch.snpu.device_count() == 1


def test_round_trip_to_and_from_cpu_keeps_values() -> None:
    cpu = torch.randn(5, 7)
    dev = cpu.to("snpu")
    assert dev.device.type == "snpu"
    back = dev.cpu()
    assert type(back) is torch.Tensor and back.device.type == "cpu"
    assert torch.equal(back, cpu)


def test_tolist_and_item_copy_to_the_host_like_a_real_device() -> None:
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).to("snpu")
    assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert (t * 2)[1].tolist() == [6.0, 8.0, 10.0]
    assert t.sum().item() == 15.0


def test_factories_make_the_requested_shapes() -> None:
    assert torch.arange(6, device="snpu").cpu().tolist() == list(range(6))
    assert torch.zeros(2, 3, device="snpu").shape == (2, 3)
    assert torch.full((4,), 2.5, device="snpu").cpu().tolist() == [2.5] * 4
    assert torch.eye(3, device="snpu").cpu().trace().item() == 3.0
    assert torch.empty(0, device="snpu").numel() == 0


def test_printing_names_the_device() -> None:
    text = repr(torch.tensor([1.0, 2.0]).to("snpu"))
    assert "device='snpu:0'" in text and "1." in text
    half = repr(torch.ones(2, dtype=torch.float16, device="snpu"))
    assert "dtype=torch.float16" in half and "snpu:0" in half


def test_assert_close_works_on_device_tensors() -> None:
    a = torch.randn(3, 3, device="snpu")
    torch.testing.assert_close(a, a.clone())
    with pytest.raises(AssertionError):
        torch.testing.assert_close(a, a + 1)


def test_binary_ops_broadcast_and_promote_like_cpu() -> None:
    a = torch.randn(4, 1, 3)
    b = torch.randint(0, 5, (5, 1))
    got = (a.to("snpu") * b.to("snpu")).cpu()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, a * b)
    h = torch.randn(8, dtype=torch.float16)
    assert (h.to("snpu") + 2.5).dtype == torch.float16


def test_in_place_op_through_a_view_reaches_the_base() -> None:
    x = torch.zeros(4, 4, device="snpu")
    x[1].add_(3)
    x[:, 2].fill_(7)
    expected = torch.zeros(4, 4)
    expected[1].add_(3)
    expected[:, 2].fill_(7)
    assert torch.equal(x.cpu(), expected)


def test_float64_is_refused_with_a_clear_error() -> None:
    with pytest.raises(SnpuDtypeError, match="float64"):
        torch.ones(2, dtype=torch.float64, device="snpu")
    with pytest.raises(RuntimeError, match="no torch.float64 units"):
        torch.ones(2).double().to("snpu")
    with pytest.raises(RuntimeError):
        torch.ones(2, device="snpu").to(torch.complex64)


def test_unsupported_op_names_op_device_and_capability_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRCR_SNPU_FALLBACK", raising=False)
    x = torch.tensor([0, 1, 1, 3], device="snpu")
    with pytest.raises(NotImplementedError) as info:
        torch.bincount(x)
    msg = str(info.value)
    assert "aten::bincount" in msg and "snpu" in msg and "configs/backends/snpu.yaml" in msg
    assert isinstance(info.value, SnpuUnsupportedOpError)


def test_cpu_fallback_is_logged_and_counted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CRCR_SNPU_FALLBACK", "cpu")
    a = torch.tensor([0, 1, 1, 3, 3, 3])
    before = runners.snpu.fallback_counts().get("aten::bincount", 0)
    with caplog.at_level(logging.DEBUG, logger="runners.snpu"), runners.snpu.profile() as prof:
        counts = torch.bincount(a.to("snpu"))
    assert counts.device.type == "snpu"
    assert counts.cpu().tolist() == [1, 2, 0, 3]
    assert runners.snpu.fallback_counts()["aten::bincount"] == before + 1
    assert prof.totals()["fallbacks"] >= 1
    assert any("bincount" in r.getMessage() for r in caplog.records)


def test_mixing_devices_is_refused_like_cuda() -> None:
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3, device="snpu") + torch.ones(3)
    # a CPU scalar tensor is fine, as on CUDA
    assert (torch.ones(3, device="snpu") + torch.tensor(2.0)).cpu().tolist() == [3.0] * 3


def test_out_variant_resizes_the_device_tensor() -> None:
    out = torch.empty(0, device="snpu")
    torch.arange(4, out=out)
    assert out.shape == (4,)


def test_synchronize_contract() -> None:
    # PyTorch 2.13's Python device guard cannot synchronize: torch.accelerator refuses,
    # torch.snpu.synchronize() works (kernels run synchronously). See docs/snpu.md.
    torch.snpu.synchronize()
    with pytest.raises(RuntimeError, match="synchroniz"):
        torch.accelerator.synchronize()


def test_importing_the_package_has_no_side_effects() -> None:
    import subprocess
    import sys

    code = (
        "import sys, runners.snpu; "
        "print('torch' in sys.modules, runners.snpu.is_installed.__module__ == 'runners.snpu')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["False", "True"]


def test_memory_stats_count_allocations() -> None:
    before = torch.snpu.memory_stats()
    torch.empty(1000, device="snpu")
    after = torch.snpu.memory_stats()
    assert after["allocations"] == before["allocations"] + 1
    assert after["allocated_bytes"] - before["allocated_bytes"] == 4000


def test_memory_allocated_counts_live_tensors_once_per_storage() -> None:
    import gc

    gc.collect()
    base = torch.snpu.memory_allocated()
    torch.snpu.reset_peak_memory_stats()
    t = torch.zeros(1024, 256, device="snpu")  # 1 MiB of float32
    view = t[10:20]  # a view shares the storage: no new memory
    assert torch.snpu.memory_allocated() - base == 1024 * 256 * 4
    del t
    assert torch.snpu.memory_allocated() - base == 1024 * 256 * 4  # the view keeps it alive
    del view
    gc.collect()
    assert torch.snpu.memory_allocated() == base
    assert torch.snpu.max_memory_allocated() - base >= 1024 * 256 * 4


def test_a_storage_allocated_on_snpu_raises_instead_of_killing_the_interpreter() -> None:
    """snpu has no C++ allocator: a storage made on the device itself (a device storage's clone(), as
    a deterministic-resize check does; ``UntypedStorage(n, device=...)``) crashed the process (SIGSEGV).
    Run in a subprocess so that a crash fails this test instead of ending the run."""
    import subprocess
    import sys

    code = (
        "import torch, runners.snpu\n"
        "from runners.snpu.errors import SnpuStorageError\n"
        "runners.snpu.install()\n"
        "a = torch.zeros(10, device='snpu')\n"
        "torch.use_deterministic_algorithms(True)\n"
        "a.resize_(20)\n"
        "torch.use_deterministic_algorithms(False)\n"
        "for make in (lambda: a.untyped_storage().clone(), lambda: torch.UntypedStorage(8, device='snpu'),\n"
        "             lambda: torch.TypedStorage(4, dtype=torch.float32, device='snpu')):\n"
        "    try:\n"
        "        make()\n"
        "    except SnpuStorageError as e:\n"
        "        print('refused', isinstance(e, RuntimeError))\n"
        "print(torch.UntypedStorage(8).nbytes(), torch.UntypedStorage(8, device='meta').device)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:4] == ["refused True"] * 3 + ["8 meta"]
