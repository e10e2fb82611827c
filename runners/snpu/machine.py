"""Parameters of the modelled machine (after IBM Spyre's published architecture).

Defaults follow docs/snpu.md; each can be overridden by a ``CRCR_SNPU_<NAME>`` variable
(read once at ``install()``) or by passing a ``Machine`` to the planner directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace

import torch

STICK_BYTES = 128


@dataclass(frozen=True)
class Machine:
    """What one snpu chip has; every plan and every counter is computed from this."""

    cores: int = 32
    scratchpad_bytes: int = 2 * 1024 * 1024
    # usable after reserved space and headroom: about 1.55 MiB
    usable_scratchpad_bytes: int = 1_625_292
    stick_bytes: int = STICK_BYTES
    clock_hz: float = 1.0e9
    corelets_per_core: int = 2
    # an 8x8 systolic array per corelet: 64 fp16/bf16 MAC per cycle, fp32 at a quarter
    macs_per_corelet_half: int = 64
    fp32_mac_divisor: int = 4
    # the special-function / vector unit: one stick per cycle per core
    sticks_per_cycle_vector: int = 1
    memory_bandwidth_bytes_per_s: float = 200e9
    ring_bytes_per_cycle: int = 128
    # fixed cost of starting a tile (descriptor setup, synchronisation)
    tile_overhead_cycles: int = 64

    @property
    def memory_bytes_per_cycle(self) -> float:
        """Device memory bandwidth in bytes per clock cycle, shared by all cores."""
        return self.memory_bandwidth_bytes_per_s / self.clock_hz

    def macs_per_cycle_per_core(self, dtype: torch.dtype) -> int:
        per_core = self.macs_per_corelet_half * self.corelets_per_core
        return per_core if dtype in (torch.float16, torch.bfloat16) else per_core // self.fp32_mac_divisor

    def peak_macs_per_cycle(self, dtype: torch.dtype) -> int:
        return self.macs_per_cycle_per_core(dtype) * self.cores

    def stick_elems(self, dtype: torch.dtype) -> int:
        """Elements per stick: 64 for fp16, 32 for fp32, 128 for bool/int8."""
        return max(1, self.stick_bytes // _itemsize(dtype))

    def as_dict(self) -> dict[str, float | int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def machine_from_env(environ: dict[str, str] | None = None) -> Machine:
    """The default machine with ``CRCR_SNPU_<FIELD>`` overrides applied."""
    env = os.environ if environ is None else environ
    changes: dict[str, float | int] = {}
    for f in fields(Machine):
        raw = env.get(f"CRCR_SNPU_{f.name.upper()}")
        if raw is None:
            continue
        try:
            changes[f.name] = float(raw) if f.type == "float" else int(raw)
        except ValueError as exc:
            from crcr.errors import ConfigError

            raise ConfigError(
                f"CRCR_SNPU_{f.name.upper()}={raw!r} is not a number", hint=f"set it to a {f.type}"
            ) from exc
    return replace(Machine(), **changes)


_current = Machine()


def current() -> Machine:
    """The machine the installed device models."""
    return _current


def set_current(machine: Machine) -> None:
    global _current
    _current = machine
