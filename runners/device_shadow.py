"""The device-shadow trace: run an snpu test itself with snpu's tensors and the CPU's kernels, and record the aten
ops its device tensors go through.

The CPU trace (``runners.cpu_trace``) runs a test's CPU twin, whose tensors are plain tensors; on snpu they are a
Python wrapper subclass (``SnpuTensor``), and code that branches on that (``DecompCrossRefMode`` decomposes plain
tensors only, ``from_dlpack`` returns a plain tensor) takes another path on the device than on the CPU. This runner
imports the upstream file with snpu registered exactly as ``crcr run --device snpu`` registers it
(``runners.snpu.testing_hook`` as ``TORCH_TEST_DEVICES``, only the PRIVATEUSE1 instantiation), and runs the very
test the plan is for (``TestFooPRIVATEUSE1.test_x_snpu_float32``; a test of a class that is not device-generic
runs as it is, seeing snpu registered) under ``runners.snpu.shadow``: snpu's tensor type, device identity, views
and host/device copies, with every op's compute on the CPU and float64/complex recorded instead of refused. No
snpu compute kernel runs, so the outcome never depends on snpu's numerics; the planner then checks the recorded
ops, dtypes, layouts and rows against the capability file exactly as for a CPU trace.

Run in a child process (``python -m runners.device_shadow IN OUT``), same request and output lines as
``runners.cpu_trace``; each ``CpuTrace`` has ``kind="device-shadow"`` and ``twin`` = the test run.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from crcr.contracts.inventory import device_class_names
from runners.cpu_trace import (
    RunLabel,
    import_or_report,
    import_test_file,
    row_length,
    run_traces,
    run_unittest,
    serve,
)

SHADOW_RUN = RunLabel("the device-shadow run", "in the device-shadow run")


def code_digest() -> str:
    """A digest of the recording code (this runner, snpu's shadow mode and dispatch, the CPU trace it shares code
    with): cached traces are reused only while it is unchanged."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for rel in ("device_shadow.py", "cpu_trace.py", "snpu/shadow.py", "snpu/dispatch.py", "snpu/tensor.py",
                "snpu/device.py"):
        h.update((here / rel).read_bytes())
    return h.hexdigest()[:12]


def _load(root: Path, file: str) -> Any:
    import runners.snpu as snpu

    snpu.install()  # before torch.testing._internal: NATIVE_DEVICES names snpu
    from runners.snpu import testing_hook

    testing_hook.register_test_base()
    return import_test_file(root, file)


def trace_tests(root: Path, file: str, tests: list[list[str]], emit: Any) -> None:
    """Run each ``[id, cls, method, device]`` of ``file`` in snpu's shadow mode; ``emit`` a line per start and end."""
    module = import_or_report(lambda: _load(root, file), emit)
    if module is None:
        return
    from runners.snpu.shadow import ShadowRecorder, shadow

    def find(cls_name: str, method: str, device: str) -> tuple[Any, str, str]:
        # the id's class as collected, else its other name (TestFooPRIVATEUSE1 / TestFooSNPU: which one a class gets
        # depends on whether a device class of the process was set up before it was instantiated)
        names = device_class_names(cls_name, device)
        cls = next((c for c in (getattr(module, n, None) for n in names) if c is not None), None)
        return cls, method, f"no test {cls_name}.{method} in the file as snpu instantiates it"

    def run(cls: Any, method: str) -> tuple[str, str, list[dict[str, Any]]]:
        rec = ShadowRecorder(row_length)
        outcome, error = run_unittest(cls, method, shadow(rec), SHADOW_RUN)
        return outcome, error, rec.result()

    run_traces(tests, emit, find, run, "device-shadow")


def main(argv: list[str]) -> int:
    from runners.snpu import testing_hook

    os.environ["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1"  # as crcr run --device snpu: snpu's tests only
    os.environ["TORCH_TEST_DEVICES"] = testing_hook.path()
    os.environ.pop("CRCR_SNPU_FALLBACK", None)  # the shadow decides where compute runs, not this switch
    return serve(argv, trace_tests)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
