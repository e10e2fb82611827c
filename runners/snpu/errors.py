"""Errors the simulated NPU raises on purpose.

    CrcrError
    ├── SnpuUnsupportedOpError   (also NotImplementedError) an aten op with no snpu kernel
    ├── SnpuDtypeError           (also RuntimeError) float64 / complex, which the machine lacks
    ├── SnpuPlanError            (also RuntimeError) a tile plan that cannot fit the scratchpad
    ├── SnpuTileViolation        (also RuntimeError) the tiling proof caught a read outside a tile
    ├── SnpuKernelResultError    (also RuntimeError) a kernel returned what its op's schema does not
    └── SnpuInstallError         registration failed (another PrivateUse1 backend, bad torch)

Each inherits the builtin PyTorch tests expect (``NotImplementedError`` for a missing
kernel, ``RuntimeError`` otherwise, as a real device raises for a dtype it lacks), so
upstream tests and ``pytest.raises`` see the usual classes while crcr's CLI prints them
as crcr errors. A dtype refusal must not be a ``TypeError``: torch's binary-operator
wrappers turn a ``TypeError`` into ``NotImplemented``, and Python then reports an
unrelated "unsupported operand type(s)".
"""

from __future__ import annotations

from crcr.errors import CrcrError

CAPABILITY_FILE = "configs/backends/snpu.yaml"


class SnpuUnsupportedOpError(CrcrError, NotImplementedError):
    reference = "snpu-unsupported-op"

    def __init__(self, op: str) -> None:
        super().__init__(
            f"aten op {op} is not implemented on the snpu device",
            hint=f"see {CAPABILITY_FILE} for the ops snpu supports, or set CRCR_SNPU_FALLBACK=cpu to run it on the CPU",
        )
        self.op = op


class SnpuDtypeError(CrcrError, RuntimeError):
    reference = "snpu-unsupported-dtype"

    def __init__(self, dtype: object, op: str) -> None:
        super().__init__(
            f"snpu has no {dtype} units ({op}); native dtypes are float32, float16 and bfloat16",
            hint="use float32 (or float16/bfloat16); integers and bool are for indexing and masks only",
        )
        self.dtype = dtype
        self.op = op


class SnpuStorageError(CrcrError, RuntimeError):
    """A storage allocated on the device itself: snpu (a Python backend) has no device allocator."""

    reference = "snpu-device-storage"

    def __init__(self) -> None:
        super().__init__(
            "snpu cannot allocate a storage on the device itself (torch.UntypedStorage(..., device='snpu'), "
            "a device storage's clone()): a Python backend has no PrivateUse1 allocator",
            hint="make the tensor with a factory (torch.empty(n, device='snpu')) or keep the storage on the CPU",
        )


class SnpuPlanError(CrcrError, RuntimeError):
    reference = "snpu-plan-does-not-fit"

    def __init__(self, message: str) -> None:
        super().__init__(
            message, hint="split the work into smaller pieces or raise CRCR_SNPU_USABLE_SCRATCHPAD_BYTES"
        )


class SnpuTileViolation(CrcrError, RuntimeError):
    """Under the tiling proof: a kernel read outside its tile (more than its plan declares)."""

    reference = "snpu-tile-violation"

    def __init__(self, message: str) -> None:
        super().__init__(message, hint="a tile must load only its own region, through kernels.common.load()")


class SnpuKernelResultError(CrcrError, RuntimeError):
    """An snpu kernel returned something its op's schema does not return (a bug in the kernel)."""

    reference = "snpu-kernel-result"

    def __init__(self, op: str, message: str) -> None:
        super().__init__(
            f"snpu kernel for {op} {message}", hint="the kernel must return what the op's schema declares"
        )
        self.op = op


class SnpuInstallError(CrcrError, RuntimeError):
    reference = "snpu-install-failed"
