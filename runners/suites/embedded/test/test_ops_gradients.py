"""Embedded mirror of upstream test/test_ops_gradients.py (TestBwdGradients).

- test_fn_grad: ``torch.autograd.gradcheck`` on the device in float64, as upstream
  (skipped with a reason on a device that has no float64, such as snpu, and for
  samples too large to check cheaply)
- test_backward_compare_cpu: gradients computed on the device equal those on the CPU
  (float32; the check that still covers autograd where gradcheck cannot run)
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

from runners.suites import _checks

_DIFFERENTIABLE = [op for op in _checks.selected(op_db) if op.supports_autograd]


def _grads(op, sample, device):
    """Run ``op`` on ``sample`` moved to ``device``; return the outputs and the input grads."""
    moved = _checks.to_device(sample, device)
    leaves = [t for t in _checks.tensors_of((moved.input, moved.args, moved.kwargs)) if t.requires_grad]
    outputs = _checks.differentiable_outputs(sample.output_process_fn_grad(_checks.call(op, moved)))
    if not leaves or not outputs:
        return None
    # a fixed cotangent per output (ones), so device and CPU differentiate the same thing
    grads = torch.autograd.grad(outputs, leaves, [torch.ones_like(o) for o in outputs], allow_unused=True)
    return _checks.to_cpu([o for o in outputs]), _checks.to_cpu([g for g in grads])


class TestBwdGradients(TestCase):
    exact_dtype = True

    if _DIFFERENTIABLE:  # empty when CRCR_SUITE_OPS leaves no op for this template
        @ops(_DIFFERENTIABLE, allowed_dtypes=(torch.float64,))
        def test_fn_grad(self, device, dtype, op):
            if not _checks.device_supports(device, dtype):
                self.skipTest(f"{device} has no {dtype}: gradcheck needs double precision")
            checked = 0
            for sample in _checks.bounded(op.sample_inputs(device, dtype, requires_grad=True), 1):
                if not isinstance(sample.input, torch.Tensor):
                    continue  # ops over tensor lists (multi_dot, cat): gradcheck below takes one input
                if sum(t.numel() for t in _checks.tensors_of((sample.input, sample.args))) > _checks.MAX_GRADCHECK_NUMEL:
                    continue

                def fn(*inputs, sample=sample):
                    out = op(*inputs, *sample.args, **sample.kwargs)
                    return sample.output_process_fn_grad(out)

                self.assertTrue(torch.autograd.gradcheck(fn, (sample.input,), check_batched_grad=False, fast_mode=True))
                checked += 1
            if not checked:
                self.skipTest(f"{op.name}: no sample small enough for a cheap gradcheck")

    if _DIFFERENTIABLE:  # empty when CRCR_SUITE_OPS leaves no op for this template
        @ops(_DIFFERENTIABLE, allowed_dtypes=(torch.float32,))
        def test_backward_compare_cpu(self, device, dtype, op):
            checked = 0
            for sample in _checks.bounded(op.sample_inputs("cpu", dtype, requires_grad=True)):
                expected = _grads(op, sample, "cpu")
                if expected is None:
                    continue
                actual = _grads(op, sample, device)
                self.assertEqual(actual, expected, exact_device=False)
                checked += 1
            if not checked:
                self.skipTest(f"{op.name}: no sample with differentiable inputs and outputs")


instantiate_device_type_tests(TestBwdGradients, globals())

if __name__ == "__main__":
    run_tests()
