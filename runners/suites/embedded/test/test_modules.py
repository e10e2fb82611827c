"""Embedded mirror of upstream test/test_modules.py (TestModule) over the installed module_db.

- test_forward: a module built on the CPU and moved to the device computes what the
  CPU module computes, on the first module inputs the ModuleInfo generates
"""

from __future__ import annotations

import copy

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, run_tests

from runners.suites import _checks

_MODULES = _checks.selected(module_db)


class TestModule(TestCase):
    exact_dtype = True

    if _MODULES:  # empty when CRCR_SUITE_OPS leaves no op for this template
        @modules(_MODULES, allowed_dtypes=(torch.float32, torch.float16, torch.bfloat16))
        def test_forward(self, device, dtype, module_info, training):
            module_inputs = module_info.module_inputs_func(module_info, device="cpu", dtype=dtype,
                                                           requires_grad=False, training=training)
            checked = 0
            for module_input in _checks.bounded(module_inputs):
                if module_input.forward_input is None:
                    continue
                args, kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
                torch.manual_seed(0)
                cpu_module = module_info.module_cls(*args, **kwargs).to(dtype=dtype)
                cpu_module.train(training)
                dev_module = copy.deepcopy(cpu_module).to(device)
                fargs, fkwargs = module_input.forward_input.args, module_input.forward_input.kwargs
                expected = cpu_module(*fargs, **fkwargs)
                dev_args = [_checks.to_device_value(a, device) for a in fargs]
                dev_kwargs = {k: _checks.to_device_value(v, device) for k, v in fkwargs.items()}
                actual = dev_module(*dev_args, **dev_kwargs)
                self.assertEqual(_checks.to_cpu(actual), _checks.to_cpu(expected), exact_device=False)
                checked += 1
            if not checked:
                self.skipTest(f"{module_info.name} generates no forward inputs for {dtype}")


instantiate_device_type_tests(TestModule, globals())

if __name__ == "__main__":
    run_tests()
