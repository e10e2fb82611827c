"""Embedded mirror of upstream test/test_ops.py (TestCommon) over the installed op_db.

Each template mirrors one of upstream's core OpInfo checks and is instantiated per
device and dtype by torch's own ``instantiate_device_type_tests`` and ``@ops``, so the
ids follow upstream's naming: ``TestCommonPRIVATEUSE1::test_compare_cpu_add_snpu_float32``.

- test_compare_cpu: the op on the device equals the op on the CPU
- test_numpy_ref: the op on the device equals the OpInfo's NumPy reference, a reference
  independent of torch (a fault in torch's own Python code shows here and nowhere else)
- test_noncontiguous_samples: non-contiguous inputs give the contiguous result
- test_out_matches_functional: the ``out=`` variant writes the functional result and returns
  ``out`` (one dtype per op, as upstream's test_out; named apart from it because upstream's
  test_out checks more, and OpInfos mark their expected failures against that name)
- test_dtypes: the dtypes that work on the device are the ones the OpInfo claims
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops, skipCPUIf
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.testing._internal.opinfo.core import (
    BinaryUfuncInfo,
    ReductionOpInfo,
    SpectralFuncInfo,
    UnaryUfuncInfo,
)

from runners.suites import _checks

_OPS = _checks.selected(op_db)
# as upstream: elementwise ufuncs and reductions compare with NumPy in their own files
# (test_unary_ufuncs.py, test_binary_ufuncs.py); test_numpy_ref covers the other ops with a ref
_WITH_NUMPY_REF = [
    op for op in _OPS
    if op.ref is not None and not isinstance(op, UnaryUfuncInfo | BinaryUfuncInfo | ReductionOpInfo | SpectralFuncInfo)
]
_WITH_OUT = [op for op in _OPS if op.supports_out]
# dtypes probed by test_dtypes: what a device commonly has or lacks
_PROBE_DTYPES = (
    torch.bool, torch.uint8, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
)


class TestCommon(TestCase):
    exact_dtype = True

    if _OPS:  # empty when CRCR_SUITE_OPS leaves no op for this template
        # as upstream, not on the CPU itself: there it compares the CPU with itself, and the
        # OpInfos' expected failures for this test describe accelerators
        @skipCPUIf(True, "compares the device with the CPU: nothing to compare on the CPU itself")
        @ops(_OPS)
        def test_compare_cpu(self, device, dtype, op):
            checked = 0
            for sample in _checks.bounded(op.sample_inputs("cpu", dtype, requires_grad=False)):
                expected = _checks.call(op, sample)
                actual = _checks.call(op, _checks.to_device(sample, device))
                self.assertEqual(_checks.to_cpu(actual), expected, exact_device=False)
                checked += 1
            if not checked:
                self.skipTest(f"{op.name} generates no samples for {dtype}")

    if _WITH_NUMPY_REF:  # empty when CRCR_SUITE_OPS leaves no op for this template
        # exactly upstream's dtypes: the OpInfos' expected failures for this test assume them
        # (devices without float64 still meet NumPy in the ufunc files, in float32)
        @ops(_WITH_NUMPY_REF, allowed_dtypes=(torch.float64, torch.long, torch.complex128))
        def test_numpy_ref(self, device, dtype, op):
            checked = 0
            for sample in _checks.bounded(op.reference_inputs(device, dtype)):
                # compare_with_reference runs op on the sample and op.ref on its NumPy twin
                self.compare_with_reference(op, op.ref, sample)
                checked += 1
            if not checked:
                self.skipTest(f"{op.name} generates no reference inputs for {dtype}")

    if _OPS:  # empty when CRCR_SUITE_OPS leaves no op for this template
        @ops(_OPS)
        def test_noncontiguous_samples(self, device, dtype, op):
            checked = 0
            for sample in _checks.bounded(op.sample_inputs(device, dtype, requires_grad=False)):
                expected = _checks.call(op, sample)
                actual = _checks.call(op, sample.noncontiguous())
                self.assertEqual(_checks.to_cpu(actual), _checks.to_cpu(expected))
                checked += 1
            if not checked:
                self.skipTest(f"{op.name} generates no samples for {dtype}")

    if _WITH_OUT:  # empty when CRCR_SUITE_OPS leaves no op for this template
        @ops(_WITH_OUT, dtypes=OpDTypes.any_one)
        def test_out_matches_functional(self, device, dtype, op):
            checked = 0
            for sample in _checks.bounded(op.sample_inputs(device, dtype, requires_grad=False)):
                expected = _checks.call(op, sample)
                if not isinstance(expected, torch.Tensor):
                    continue  # multi-output out= takes a tuple per op; single tensors are the core case
                out = torch.empty_like(expected)
                returned = op(sample.input, *sample.args, out=out, **sample.kwargs)
                self.assertEqual(_checks.to_cpu(out), _checks.to_cpu(expected))
                self.assertTrue(returned is out, msg="out= must return the tensor it wrote")
                checked += 1
            if not checked:
                self.skipTest(f"{op.name} has no single-tensor sample for out= in {dtype}")

    if _OPS:  # empty when CRCR_SUITE_OPS leaves no op for this template
        @ops(_OPS, dtypes=OpDTypes.none)
        def test_dtypes(self, device, op):
            claimed = set(op.supported_dtypes(torch.device(device).type))
            works = set()
            for dtype in _PROBE_DTYPES:
                try:
                    sample = next(iter(op.sample_inputs(device, dtype, requires_grad=False)), None)
                    if sample is None:
                        continue
                    _checks.call(op, sample)
                except Exception:  # noqa: S112 - any failure means the dtype does not work here
                    continue
                works.add(dtype)
            probed = set(_PROBE_DTYPES)
            claimed_but_fail = sorted(str(d) for d in (claimed & probed) - works)
            work_but_unclaimed = sorted(str(d) for d in works - claimed)
            self.assertFalse(
                claimed_but_fail,
                msg=f"{op.name} claims {claimed_but_fail} on {device} but they fail; "
                f"also working but unclaimed: {work_but_unclaimed}",
            )


instantiate_device_type_tests(TestCommon, globals())

if __name__ == "__main__":
    run_tests()
