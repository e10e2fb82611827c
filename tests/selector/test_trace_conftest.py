"""The trace loads a test file through pytest, as the run does: the checkout's ``conftest.py`` files and their hooks
run first.

Held back round 11: ``crcr select inventory`` and ``crcr run`` collect through pytest, which runs the checkout's
``test/conftest.py`` (there a shim restoring names old test files import); the trace child imported the file
without it, every trace of test_linalg and test_torch was lost to an ``ImportError``, and three tests that fail on
any device were planned ``run`` from the static reading."""

from __future__ import annotations

from pathlib import Path

from crcr.contracts.inventory import Inventory
from crcr.contracts.plan import load_plan
from runners.cpu_trace import conftests
from tests.selector.reading_fixtures import device_test

FILE = "test/linalg/test_old_names.py"
CLS = "TestOldNamesPRIVATEUSE1"

# an old upstream file: it imports a name torch 2.13 no longer has, which the checkout's conftest restores
SRC = '''
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.testing._internal.common_device_type import onlyOldDevices


class TestOldNames(TestCase):
    @onlyOldDevices
    def test_double_sum(self, device):
        t = torch.ones(4, device=device, dtype=torch.float64)
        self.assertEqual(t.sum().item(), 4.0)


instantiate_device_type_tests(TestOldNames, globals(), allow_mps=True)

if __name__ == "__main__":
    run_tests()
'''

OUTER = '''
import torch.testing._internal.common_device_type as common_device_type

common_device_type.CRCR_OUTER_RAN = True
'''

# a hook, as a shim must be when it imports torch's test harness: it runs after crcr's plugin set the device up
INNER = '''
def pytest_sessionstart(session):
    import torch.testing._internal.common_device_type as common_device_type

    assert common_device_type.CRCR_OUTER_RAN, "the outer conftest runs first"
    common_device_type.onlyOldDevices = lambda fn: fn
'''


def _checkout(root: Path, inner: str = INNER) -> Path:
    (root / "test" / "linalg").mkdir(parents=True)
    (root / "conftest.py").write_text(OUTER, encoding="utf-8")
    (root / "test" / "conftest.py").write_text(inner, encoding="utf-8")
    (root / "test" / "linalg" / "conftest.py").write_text("# nothing to patch here\n", encoding="utf-8")
    (root / FILE).write_text(SRC, encoding="utf-8")
    return root


def _plan(cli, tmp_path: Path, src: Path, out: str) -> tuple[int, str, object]:
    test = device_test(FILE, CLS, "test_double_sum", None)
    inv = tmp_path / "inv.json"
    Inventory(source="pytorch-src", device="snpu", tests=[test]).write(inv)
    code, _, err = cli("select", "plan", "-b", "snpu", "--inventory", inv, "--pytorch-src", src,
                       "--out", tmp_path / out)
    return code, err, load_plan(tmp_path / out).resolve(test.id) if code == 0 else None


def test_the_conftests_of_every_folder_down_to_the_file_outermost_first(tmp_path):
    root = _checkout(tmp_path / "src")
    assert [p.relative_to(root).as_posix() for p in conftests(root, FILE)] == [
        "conftest.py", "test/conftest.py", "test/linalg/conftest.py"]
    assert conftests(root, "../elsewhere/test_x.py") == []


def test_the_trace_runs_the_checkouts_conftest_before_the_file(cli, tmp_path):
    """With the conftest's patch the test is traced: its float64 tensor on the device decides ``skip``."""
    src = _checkout(tmp_path / "src")
    code, err, decided = _plan(cli, tmp_path, src, "plan")
    assert code == 0, err
    assert "traced 1 of 1 tests" in err and "did not load in the trace child" not in err, err
    assert decided.mode == "skip" and "device-shadow run" in decided.reason and "float64" in decided.reason, \
        decided.reason


def test_a_conftest_that_raises_is_named_and_the_next_plan_tries_again(cli, tmp_path):
    """A conftest that fails in the trace child loses the file's traces; the warning names the conftest and its
    error, the static reading plans the test, and the lost traces are not cached: once the environment is mended, the
    next plan traces the test."""
    needs_sdk = ("from pathlib import Path\n\nif not Path(__file__).with_name('sdk-ready').exists():\n"
                 "    raise RuntimeError('the backend SDK is not set up')\n" + INNER)
    src = _checkout(tmp_path / "src", inner=needs_sdk)
    code, err, decided = _plan(cli, tmp_path, src, "first")
    assert code == 0, err
    assert ("warning: cpu trace: test/linalg/test_old_names.py did not load in the trace child (ImportError: "
            "pytest could not load test/conftest.py (as crcr run loads test/linalg/test_old_names.py): RuntimeError: "
            "the backend SDK is not set up)") in err, err
    assert "static reading" in decided.reason, decided.reason

    (src / "test" / "sdk-ready").touch()  # the environment mended, the conftest's text unchanged
    code, err, decided = _plan(cli, tmp_path, src, "second")
    assert code == 0, err
    assert "0 from cache, 1 run in" in err, err
    assert decided.mode == "skip" and "float64" in decided.reason, decided.reason
