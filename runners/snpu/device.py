"""Registration of snpu as PyTorch's PrivateUse1 backend.

``install()`` renames PrivateUse1 to ``snpu``, registers the backend module
(``torch.snpu``), the hooks and the device guard, and the factory kernels that PyTorch
reaches through the PrivateUse1 dispatch key (``empty``, ``empty_strided``,
``_copy_from``). Everything else reaches ``SnpuTensor.__torch_dispatch__``.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from runners.snpu import backward, dispatch, machine, memory, tensor
from runners.snpu.errors import SnpuDtypeError, SnpuInstallError, SnpuStorageError

NAME = "snpu"

_lock = threading.Lock()
_installed = False
_library: torch.library.Library | None = None


class SnpuModule:
    """``torch.snpu``: what PyTorch and tests ask of a device module."""

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def _lazy_init() -> None:
        return None

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def set_device(device: Any) -> None:
        idx = torch.device(NAME, device).index if isinstance(device, int) else torch.device(device).index
        if idx not in (None, 0):
            raise RuntimeError(f"snpu has one device (snpu:0); got {device!r}")

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """Kernels run synchronously: nothing is ever in flight."""
        return None

    # snpu computes on the CPU's generator, so seeding the CPU seeds snpu. These must not
    # call torch.manual_seed: it calls manual_seed_all on every device module.
    @staticmethod
    def manual_seed(seed: int) -> None:
        return None

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        return None

    @staticmethod
    def seed() -> None:
        return None

    @staticmethod
    def seed_all() -> None:
        return None

    @staticmethod
    def initial_seed() -> int:
        return torch.initial_seed()

    @staticmethod
    def get_rng_state(device: Any = "snpu") -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device: Any = "snpu") -> None:
        torch.set_rng_state(new_state)

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]

    @staticmethod
    def is_bf16_supported() -> bool:
        return True

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "snpu (simulated NPU, 32 cores)"

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        """Live device memory (active_bytes, its peak) and cumulative factory allocations."""
        return memory.stats()

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        """Bytes held by the storages of live snpu tensors (as torch.cuda.memory_allocated)."""
        return memory.stats()["active_bytes"]

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return memory.stats()["peak_active_bytes"]

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        memory.reset_peak()

    @staticmethod
    def machine() -> machine.Machine:
        return machine.current()


class SnpuHooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class SnpuDeviceGuard(torch._C._acc.DeviceGuard):
    # PyTorch 2.13's Python guard exposes only the device type; see docs/snpu.md for
    # what that means for torch.accelerator.
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def _check_dtype(dtype: torch.dtype | None, op: str) -> torch.dtype:
    dtype = dtype or torch.get_default_dtype()
    if dtype in dispatch.REFUSED_DTYPES:
        raise SnpuDtypeError(dtype, op)
    return dtype


def _count_alloc(t: torch.Tensor) -> None:
    memory.count_allocation(t.numel() * t.element_size())


def _empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = _check_dtype(dtype, "aten::empty.memory_format")
    data = torch.empty(size, dtype=dtype, memory_format=memory_format or torch.contiguous_format)
    _count_alloc(data)
    return tensor.SnpuTensor(data)


def _empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = _check_dtype(dtype, "aten::empty_strided")
    data = torch.empty_strided(size, stride, dtype=dtype)
    _count_alloc(data)
    return tensor.SnpuTensor(data)


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    src_data = src._data if isinstance(src, tensor.SnpuTensor) else src
    if isinstance(dst, tensor.SnpuTensor):
        dst._data.copy_(src_data)
    else:
        dst.copy_(src_data)
    return dst


def install() -> None:
    """Register the snpu device; safe to call any number of times, from any thread."""
    global _installed, _library
    with _lock:
        if _installed:
            return
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", NAME):
            raise SnpuInstallError(
                f"the PrivateUse1 backend is already registered as {current!r}",
                hint="snpu needs PrivateUse1 for itself: run it in a process without another out-of-tree backend",
            )
        machine.set_current(machine.machine_from_env())
        if current == "privateuseone":
            from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

            _setup_privateuseone_for_python_backend(
                NAME, backend_module=SnpuModule(), hook=SnpuHooks(), device_guard=SnpuDeviceGuard()
            )
        tensor.DEVICE = torch.device(NAME, 0)
        dispatch.set_device_type(NAME)
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
        lib.impl("empty_strided", _empty_strided, "PrivateUse1")
        lib.impl("_copy_from", _copy_from, "PrivateUse1")
        _library = lib
        from runners.snpu import kernels  # noqa: F401 - registers every kernel
        from runners.snpu.kernels.attention import register_autograd_kernels

        register_autograd_kernels(lib)
        _guard_storage_allocation()
        backward.install()  # snpu errors inside backward() keep their type

        _installed = True


def _guard_storage_allocation() -> None:
    """A storage allocated on snpu itself (``torch.UntypedStorage(n, device="snpu")``, a device storage's
    ``clone()``, ``TypedStorage(..., device="snpu")``) asks PrivateUse1's C++ allocator, which a Python
    backend does not have: torch dereferences a null allocator and the interpreter dies (SIGSEGV). Such
    a call raises :class:`SnpuStorageError` instead; storages on other devices are made as before."""
    storage_cls = torch.UntypedStorage
    if getattr(storage_cls, "_snpu_guarded", False):
        return
    base_new = torch._C.StorageBase.__new__

    def __new__(cls, *args: Any, **kwargs: Any):
        device = kwargs.get("device")
        try:
            kind = torch.device(device).type if device is not None else None
        except (RuntimeError, TypeError):
            kind = None  # torch's own constructor says what is wrong with it
        if kind == NAME:
            raise SnpuStorageError()
        return base_new(cls, *args, **kwargs)

    storage_cls.__new__ = __new__  # type: ignore[method-assign]
    storage_cls._snpu_guarded = True  # type: ignore[attr-defined]


def is_installed() -> bool:
    return _installed
