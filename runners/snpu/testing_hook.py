"""Point ``TORCH_TEST_DEVICES`` at this file to run PyTorch's device-generic tests on snpu.

    TORCH_TEST_DEVICES=$(python -c 'import runners.snpu.testing_hook as h; print(h.__file__)') \\
    PYTORCH_TESTING_DEVICE_ONLY_FOR=privateuse1 python -m pytest test/test_ops.py

``torch.testing._internal.common_device_type`` runs this file with ``runpy`` while it is
being imported and appends ``TEST_CLASS`` to its device test bases. Running it installs
snpu first, so the device exists before any test class is instantiated. (Installing
snpu before importing ``torch.testing._internal`` at all, e.g. from a conftest, is even
better: then ``common_utils.NATIVE_DEVICES`` names snpu too; this hook patches that
tuple when it comes too late.) Imported as a module, this file only installs the device.
"""

from __future__ import annotations

import sys

from runners.snpu import install

install()


def register_test_base() -> None:
    """Make an already imported ``common_device_type`` see snpu (idempotent).

    For when ``torch.testing._internal`` was imported before snpu was installed (another
    test module in the same process): its device list and NATIVE_DEVICES were computed
    without snpu; add them now.
    """
    cdt = sys.modules.get("torch.testing._internal.common_device_type")
    if cdt is not None and cdt.PrivateUse1TestBase not in cdt.device_type_test_bases:
        cdt.device_type_test_bases.append(cdt.PrivateUse1TestBase)
    _patch_common_utils()


def _patch_common_utils() -> None:
    cu = sys.modules.get("torch.testing._internal.common_utils")
    if cu is not None and "snpu" not in cu.NATIVE_DEVICES:
        cu.NATIVE_DEVICES = (*cu.NATIVE_DEVICES, "snpu")
        cu.TEST_PRIVATEUSE1 = True
        cu.TEST_PRIVATEUSE1_DEVICE_TYPE = "snpu"
    # common_device_type holds its own binding of the tuple (``from common_utils import NATIVE_DEVICES``),
    # which onlyNativeDeviceTypes reads: without this, those tests skip themselves on snpu
    cdt = sys.modules.get("torch.testing._internal.common_device_type")
    if cdt is not None and "snpu" not in getattr(cdt, "NATIVE_DEVICES", ("snpu",)):
        cdt.NATIVE_DEVICES = (*cdt.NATIVE_DEVICES, "snpu")


_globals = globals()
if "PrivateUse1TestBase" in _globals and "device_type_test_bases" in _globals:
    # run by common_device_type through runpy: hand it snpu's test base exactly once
    _bases = _globals["device_type_test_bases"]
    TEST_CLASS = _globals["PrivateUse1TestBase"]
    while TEST_CLASS in _bases:  # already there when snpu was installed earlier
        _bases.remove(TEST_CLASS)
    _patch_common_utils()


def path() -> str:
    """The file to put in ``TORCH_TEST_DEVICES``."""
    return __file__
