"""The device-shadow trace: snpu tests are planned from a run of the snpu test itself with snpu's tensors and the
CPU's kernels, which sees the paths a wrapper-subclass device takes and the CPU twin does not. (A crash or a
timeout in the shadow run falls back to the static reading: tests/selector/test_cpu_trace.py runs its fixture
with both kinds.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.selector.reading_fixtures import device_test, traced_plan, write_checkout

ROOT = Path(__file__).resolve().parents[2]
FILE = "test/test_shadowed.py"
CLS = "TestShadowedPRIVATEUSE1"

SRC = '''
import torch
import torch.nn.functional as F
from torch.overrides import is_tensor_like
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


def _decompose_plain_only(t):
    # as DecompCrossRefMode: only plain tensors are decomposed, a subclass is left alone and the check fails
    if type(t) is not torch.Tensor:
        raise AssertionError("nothing was decomposed")
    return t * 2


class TestShadowed(TestCase):
    def test_plain_tensor_path(self, device):
        x = torch.ones(4, device=device)
        self.assertEqual(_decompose_plain_only(x).sum().item(), 8)

    def test_tensor_like_path(self, device):
        x = torch.ones(4, device=device)
        self.assertTrue(is_tensor_like(x))
        self.assertIs(type(x), torch.Tensor)

    def _helper_double(self, device):
        return torch.linspace(0, 1, 5, device=device, dtype=torch.float64)

    def test_helper_double(self, device):
        self.assertEqual(self._helper_double(device).shape, (5,))

    def test_missing_kernel(self, device):
        x = torch.randn(2, 4, 3, device=device, requires_grad=True)
        F.group_norm(x, 2).sum().backward()
        self.assertEqual(x.grad.shape, x.shape)

    def test_runs(self, device):
        x = torch.ones(3, device=device) * 2
        self.assertEqual(x.sum().item(), 6)


class TestNotDeviceGeneric(TestCase):
    def test_registered_device(self):
        name = torch._C._get_privateuse1_backend_name()
        if name == "privateuseone":
            self.skipTest("no PrivateUse1 backend registered")
        x = torch.randn(6).to(name)
        self.assertEqual(x.softmax(0).sum().item(), 1.0, atol=1e-5, rtol=0)

    def test_registered_device_double(self):
        name = torch._C._get_privateuse1_backend_name()
        if name == "privateuseone":
            self.skipTest("no PrivateUse1 backend registered")
        x = torch.ones(3, dtype=torch.float64).to(name)
        self.assertEqual(x.sum().item(), 3)


instantiate_device_type_tests(TestShadowed, globals())

if __name__ == "__main__":
    run_tests()
'''

NOARG_FILE = "test/test_noarg.py"
NOARG_SRC = '''
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestNoArg(TestCase):
    # its only test takes no device argument (as upstream's test_current_accelerator): nothing but the class's
    # setUpClass sets device_type to the backend's name
    def test_device_type_without_device_argument(self):
        self.assertEqual(self.device_type, "snpu")
        x = torch.ones(2, device=self.device_type)
        self.assertEqual(x.sum().item(), 2)


instantiate_device_type_tests(TestNoArg, globals())

if __name__ == "__main__":
    run_tests()
'''

DEVICE_TESTS = ["test_plain_tensor_path", "test_tensor_like_path", "test_helper_double", "test_missing_kernel",
                "test_runs"]
PLAIN_TESTS = ["test_registered_device", "test_registered_device_double"]


def _plain_test(method: str):
    """A test of a class that is not device-generic: the same id on every device (pytest's collection for snpu)."""
    test = device_test(FILE, "TestNotDeviceGeneric", method, None)
    return test.model_copy(update={"id": f"{FILE}::TestNotDeviceGeneric::{method}", "method": method})


def _plan(root: Path, kind: str) -> dict[str, tuple[str, str]]:
    made = [device_test(FILE, CLS, m, None) for m in DEVICE_TESTS] + [_plain_test(m) for m in PLAIN_TESTS]
    made.append(device_test(NOARG_FILE, "TestNoArgPRIVATEUSE1", "test_device_type_without_device_argument", None))
    decided = traced_plan(root, made, kind)
    return {t.template: (decided[t.id].mode, decided[t.id].reason) for t in made}


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """(mode, reason) per test method planned with each trace kind, and the checkout (``root``) they ran in."""
    root = write_checkout(tmp_path_factory.mktemp("checkout"), {FILE: SRC, NOARG_FILE: NOARG_SRC})
    return {"root": root, **{kind: _plan(root, kind) for kind in ("cpu", "shadow")}}


SHADOW = "the device-shadow run of "


@pytest.mark.parametrize("method", ["test_plain_tensor_path", "test_tensor_like_path"])
def test_a_path_only_the_wrapper_subclass_takes_is_seen(plans, method):
    """The CPU twin's tensors are plain tensors, so it passes and says run; on snpu the test fails (its tensors are
    a subclass): the shadow run takes snpu's path and says xfail."""
    cpu_mode, cpu_reason = plans["cpu"][method]
    assert cpu_mode == "run" and "passes on the CPU" in cpu_reason, cpu_reason
    mode, reason = plans["shadow"][method]
    assert mode == "xfail", reason
    assert f"{SHADOW}{CLS}.{method}_snpu (snpu's tensors, CPU's kernels)" in reason, reason
    assert "fails in the shadow run" in reason and "AssertionError" in reason, reason


def test_a_test_without_a_device_argument_sees_the_class_set_up(plans):
    """unittest runs setUpClass before a class's tests; PrivateUse1TestBase sets device_type ("snpu") there. A test
    without a device argument reads it: without the set-up it saw "privateuse1" and the shadow run failed."""
    mode, reason = plans["shadow"]["test_device_type_without_device_argument"]
    assert mode == "run" and "passes in the shadow run" in reason, reason


def test_a_float64_helper_is_recorded_not_raised(plans):
    """snpu refuses float64 at the factory; the shadow records the dtype, runs on, and the plan skips naming it."""
    mode, reason = plans["shadow"]["test_helper_double"]
    assert mode == "skip", reason
    assert SHADOW in reason and "float64 device tensors, a dtype snpu refuses" in reason, reason


def test_a_missing_kernel_skips_though_the_shadow_ran_it_on_the_cpu(plans):
    mode, reason = plans["shadow"]["test_missing_kernel"]
    assert mode == "skip", reason
    assert SHADOW in reason and "aten::native_group_norm_backward, which snpu has no kernel for" in reason, reason


def test_a_test_that_passes_in_the_shadow_runs(plans):
    mode, reason = plans["shadow"]["test_runs"]
    assert mode == "run" and SHADOW in reason and "passes in the shadow run" in reason, reason
    assert "mul.Tensor" in reason, reason


def test_a_class_without_a_device_argument_is_run_as_it_is(plans):
    """A plain TestCase has no CPU twin (static reading); the shadow runs it as it is, snpu registered."""
    cpu_mode, cpu_reason = plans["cpu"]["test_registered_device"]
    assert "no CPU trace (no CPU twin)" in cpu_reason, cpu_reason
    mode, reason = plans["shadow"]["test_registered_device"]
    assert mode == "run", reason
    assert f"{SHADOW}TestNotDeviceGeneric.test_registered_device " in reason and "_softmax" in reason, reason
    mode, reason = plans["shadow"]["test_registered_device_double"]
    assert mode == "skip" and "float64" in reason, reason


def test_each_kind_has_its_own_cache_and_says_which_it_is(plans):
    """Both kinds ran on one checkout: each wrote its own cache, and its traces say which kind made them."""
    import json

    kinds = {}
    for kind in ("cpu", "shadow"):
        found = list((plans["root"] / f"data-{kind}" / "selector").glob("cpu-trace-*.json"))
        assert len(found) == 2, found  # one per upstream file
        kinds[kind] = {rec.get("kind", "cpu") for path in found
                       for rec in json.loads(path.read_text(encoding="utf-8")).values()}
    assert kinds == {"cpu": {"cpu"}, "shadow": {"device-shadow"}}


def test_an_unknown_trace_kind_is_refused(cli, tmp_path):
    code, _, err = cli("select", "plan", "-b", "snpu", "--trace-with", "gpu", "--out", tmp_path / "plan")
    assert code != 0
    assert "--trace-with 'gpu': one of shadow, cpu" in err, err
    assert not (tmp_path / "plan").exists()
