"""CPU trace: what a plain device test's CPU twin did, recorded once on this machine.

Written by ``runners.cpu_trace`` (the CPU twin) or ``runners.device_shadow`` (the device test itself, snpu's
tensors with the CPU's kernels: ``kind`` says which; one JSON line per test), cached by ``crcr select plan`` in the data dir
(``selector/cpu-trace-<key>.json``: test id -> trace) and read by the selector's agents, which plan the
device test from it (docs/selector.md, "CPU trace"). Each ``TraceOp`` is one aten overload called on
tensors that would live on the device.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CPU_TRACE_SCHEMA_VERSION = 1
TraceKind = Literal["cpu", "device-shadow"]
TraceOutcome = Literal["passed", "failed", "skipped", "timeout", "no_twin", "trace_broke", "crashed", "lost"]


class TraceOp(BaseModel):
    """One aten overload the twin called with a device tensor (or inside a factory given the device)."""

    model_config = ConfigDict(extra="forbid")

    op: str = Field(description="overload, e.g. aten::add.Tensor")
    dtypes: list[str] = Field(default_factory=list, description="dtypes of its device tensors, e.g. float32")
    layouts: list[str] = Field(default_factory=list, description="layouts of its device tensors, e.g. strided")
    numel: int = Field(0, description="largest device tensor it saw")
    row: int | None = Field(None, description="softmax / layer-norm row length, where the op reduces over one")


class CpuTrace(BaseModel):
    """The traced run's outcome and the ops it called on device tensors, in the order first called."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = CPU_TRACE_SCHEMA_VERSION
    # absent in traces written before the device-shadow run existed: those are CPU twins
    kind: TraceKind = Field("cpu", description="cpu: the CPU twin ran; device-shadow: the device test ran on the "
                            "device's tensors with the CPU's kernels (runners.snpu.shadow)")
    id: str | None = Field(None, description="the device test's pytest id")
    outcome: TraceOutcome
    error: str = Field("", description="the exception line, or why there is no trace")
    twin: str | None = Field(None, description="the test run, e.g. TestFooCPU.test_x_cpu_float32 (cpu) or "
                             "TestFooPRIVATEUSE1.test_x_snpu_float32 (device-shadow)")
    seconds: float | None = None
    ops: list[TraceOp] = Field(default_factory=list)

    def evidence(self) -> dict:
        """What a plan decided from this trace depends on (not the time it took)."""
        return self.model_dump(exclude={"seconds"}, exclude_none=True)
