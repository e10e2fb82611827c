"""The devices ``crcr run`` targets: cpu, cuda and snpu.

For each: the environment that makes PyTorch's device-generic tests instantiate only
that device (``PYTORCH_TESTING_DEVICE_ONLY_FOR``), a check that the device exists here
(cuda without a GPU raises ``DeviceUnavailableError``, exit status 3, rather than a run
of skips that looks green), the install step inside the pytest process (snpu registers
itself before any test module imports ``torch.testing._internal``) and the per-test
counters the device reports (snpu's ``profile()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crcr.errors import InputError
from runners.errors import DeviceUnavailableError


@dataclass(frozen=True)
class Device:
    name: str
    only_for: str  # value of PYTORCH_TESTING_DEVICE_ONLY_FOR
    class_suffix: str  # how instantiated classes are named (dispatch key)


DEVICES: dict[str, Device] = {
    "cpu": Device("cpu", "cpu", "CPU"),
    "cuda": Device("cuda", "cuda", "CUDA"),
    "snpu": Device("snpu", "privateuse1", "PRIVATEUSE1"),
}


def get_device(name: str) -> Device:
    if name not in DEVICES:
        raise InputError(f"unknown device {name!r}", hint=f"choose one of: {', '.join(sorted(DEVICES))}")
    return DEVICES[name]


def check_available(name: str) -> None:
    """Raise ``DeviceUnavailableError`` when the device cannot run here."""
    device = get_device(name)
    if device.name == "cuda":
        import torch

        if not torch.cuda.is_available():
            built = torch.version.cuda
            why = (f"this torch ({torch.__version__}) is built without CUDA" if not built
                   else f"torch {torch.__version__} (CUDA {built}) sees no GPU")
            raise DeviceUnavailableError(
                f"--device cuda: {why}; nothing was run",
                hint="run cuda jobs on a GPU machine with a CUDA build of torch, or choose --device cpu/snpu",
            )
    elif device.name == "snpu":
        try:
            import runners.snpu as snpu
        except ImportError as exc:  # pragma: no cover - part of this distribution
            raise DeviceUnavailableError(f"--device snpu: runners.snpu cannot be imported ({exc})") from exc
        if not hasattr(snpu, "install"):
            raise DeviceUnavailableError("--device snpu: runners.snpu has no install()")


def snpu_testing_hook() -> Path:
    """snpu's ``TORCH_TEST_DEVICES`` hook file (found without importing torch)."""
    import runners.snpu as snpu

    return Path(snpu.__file__).resolve().parent / "testing_hook.py"


def child_env(name: str) -> dict[str, str]:
    """Environment for the pytest subprocess: the variables backends set for upstream tests."""
    device = get_device(name)
    env = {
        "PYTORCH_TESTING_DEVICE_ONLY_FOR": device.only_for,
        "CRCR_RUN_DEVICE": device.name,
        # upstream's repro hint in failure messages is noise in excerpts: we print our own
        "PYTORCH_PRINT_REPRO_ON_FAILURE": "0",
    }
    if device.name == "snpu":
        hook = snpu_testing_hook()
        if hook.is_file():
            # the way an out-of-tree backend runs upstream's test/ folder; the plugin also
            # installs snpu before collection, and the hook keeps the test base listed once
            env["TORCH_TEST_DEVICES"] = str(hook)
    return env


def prepare_in_child(name: str) -> None:
    """Called in the pytest process before collection: register out-of-tree devices."""
    if name == "snpu":
        import runners.snpu as snpu

        snpu.install()


class _SnpuCounters:
    """Per-test snpu counters: a ``profile()`` block around the test."""

    def __init__(self) -> None:
        import runners.snpu as snpu

        self._cm = snpu.profile()
        self._profile: Any = None

    def __enter__(self) -> _SnpuCounters:
        self._profile = self._cm.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)

    def snapshot(self) -> dict[str, Any] | None:
        if self._profile is None:
            return None
        totals = dict(self._profile.totals())
        return totals if totals.get("ops") else totals | {"ops": 0}


def counters_for(name: str) -> Any:
    """A factory of per-test counter blocks for the device, or None when it has none."""
    return _SnpuCounters if name == "snpu" else None
