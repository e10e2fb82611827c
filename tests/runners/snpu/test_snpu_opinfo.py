"""Upstream OpInfo samples on snpu, compared with the CPU: device-generic, as upstream runs them.

For every OpInfo entry the capability file (configs/backends/snpu.yaml) says passes in
some dtype, a test per dtype (float32, float16, bfloat16) runs a deterministic subset
of the op's samples on snpu and on the CPU at the dtype's usual tolerances. Where the
file says the op fails in a dtype, the test checks that it still fails: the capability
file must tell the selector the truth both ways. Instantiated with
``instantiate_device_type_tests(..., only_for="privateuse1")``, exactly as an out-of-tree
backend instantiates upstream tests.
"""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

import runners.snpu
from runners.snpu.opinfo_sweep import opinfo_name, run_sample, samples_for
from runners.snpu.testing_hook import register_test_base
from runners.testfn import fast_test_fn_lookup

runners.snpu.install()
register_test_base()

from torch.testing._internal.common_device_type import instantiate_device_type_tests, onlyCUDA, ops  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import TestCase  # noqa: E402

CAPABILITY_FILE = Path(__file__).resolve().parents[3] / "configs" / "backends" / "snpu.yaml"
CAPS = yaml.safe_load(CAPABILITY_FILE.read_text(encoding="utf-8"))
BY_DTYPE = CAPS["opinfo"]["by_dtype"]
PASSING = {d: set(v["pass"]) for d, v in BY_DTYPE.items()}
FAILING = {d: dict(v["fail"]) for d, v in BY_DTYPE.items()}
CLAIMED = set().union(*PASSING.values())


def _cuda_only(op) -> bool:
    """Entries upstream restricts to CUDA (jiterator, Triton-DSL kernels) never run on snpu."""
    return any(onlyCUDA in getattr(d, "decorators", [d]) for d in op.decorators)


OPS = [op for op in op_db if opinfo_name(op) in CLAIMED and not _cuda_only(op)]
SAMPLES_PER_TEST = 3  # the full sweep is `crcr snpu capabilities` and the coverage benchmark


class TestSnpuOpInfo(TestCase):
    def run(self, result=None):
        # as the sweep runs: upstream's @ops wrapper looks up the running test once per test (clear_tracked_input),
        # through inspect.stack() unless runners.testfn's walk stands in
        with fast_test_fn_lookup():
            return super().run(result)

    @ops(OPS, allowed_dtypes=(torch.float32, torch.float16, torch.bfloat16))
    def test_matches_cpu(self, device, dtype, op) -> None:
        name = opinfo_name(op)
        dname = str(dtype).removeprefix("torch.")
        self.assertEqual(torch.device(device).type, "snpu")
        if name in PASSING[dname]:
            for sample in samples_for(op, dtype, SAMPLES_PER_TEST):
                run_sample(op, sample, dtype)
        elif name in FAILING[dname]:
            # claimed to fail: it must still fail (an op that starts passing means the
            # capability file is stale: regenerate it with `crcr snpu capabilities`)
            with self.assertRaises(Exception):  # noqa: B017 - any failure class is the claim
                for sample in samples_for(op, dtype, None):
                    run_sample(op, sample, dtype)
        else:
            # not swept in this dtype: the CPU reference has no such dtype for this op
            self.assertNotIn(dtype, op.supported_dtypes("cpu"))


instantiate_device_type_tests(TestSnpuOpInfo, globals(), only_for="privateuse1")


def test_snpu_opinfo_tests_were_instantiated() -> None:
    """Importing torch.testing._internal before snpu is installed silently yields no snpu tests."""
    cls = globals().get("TestSnpuOpInfoPRIVATEUSE1")
    assert cls is not None, "no snpu test class: install snpu before torch.testing._internal is imported"
    tests = [n for n in dir(cls) if n.startswith("test_matches_cpu_")]
    assert len(tests) >= len(OPS) >= 150
    assert all("_snpu_" in n or "_privateuse1_" in n for n in tests)
