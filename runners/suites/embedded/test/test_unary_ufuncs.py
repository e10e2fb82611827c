"""Embedded mirror of upstream test/test_unary_ufuncs.py (TestUnaryUfuncs) over the installed op_db.

- test_reference_numerics_normal: each unary ufunc on the device equals its NumPy
  reference on the OpInfo's reference inputs: a reference independent of torch
"""

from __future__ import annotations

from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import unary_ufuncs
from torch.testing._internal.common_utils import TestCase, run_tests

from runners.suites import _checks

_WITH_REF = [op for op in _checks.selected(unary_ufuncs) if op.ref is not None]


class TestUnaryUfuncs(TestCase):
    # NumPy promotes differently from torch (e.g. integer inputs of sqrt): values are compared
    exact_dtype = False

    if _WITH_REF:  # empty when CRCR_SUITE_OPS leaves no op for this template
        @ops(_WITH_REF, allowed_dtypes=_checks.REFERENCE_DTYPES)
        def test_reference_numerics_normal(self, device, dtype, op):
            _checks.check_reference_numerics(self, op, device, dtype)


instantiate_device_type_tests(TestUnaryUfuncs, globals())

if __name__ == "__main__":
    run_tests()
