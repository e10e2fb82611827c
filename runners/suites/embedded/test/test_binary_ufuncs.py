"""Embedded mirror of upstream test/test_binary_ufuncs.py (TestBinaryUfuncs) over the installed op_db.

- test_reference_numerics: each binary ufunc on the device equals its NumPy reference
  on the OpInfo's reference inputs (broadcasting included): a reference independent of torch
"""

from __future__ import annotations

from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import binary_ufuncs
from torch.testing._internal.common_utils import TestCase, run_tests

from runners.suites import _checks

_WITH_REF = [op for op in _checks.selected(binary_ufuncs) if op.ref is not None]


class TestBinaryUfuncs(TestCase):
    exact_dtype = False

    if _WITH_REF:  # empty when CRCR_SUITE_OPS leaves no op for this template
        @ops(_WITH_REF, allowed_dtypes=_checks.REFERENCE_DTYPES)
        def test_reference_numerics(self, device, dtype, op):
            _checks.check_reference_numerics(self, op, device, dtype)


instantiate_device_type_tests(TestBinaryUfuncs, globals())

if __name__ == "__main__":
    run_tests()
