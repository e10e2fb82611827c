"""`crcr select upgrade` does not miss a change an entry reaches through a helper it calls: the helpers that helper
names are part of the entry (``ref=reference_masked_std_var(np.std)`` builds its reference with opinfo/utils.py's
``reference_reduction_numpy``, whose wrapper changed in 2.11.0; masked.std and masked.var were not re-evaluated)."""

from __future__ import annotations

from pathlib import Path

from selector.inventory.opinfo import opinfo_inventory
from selector.inventory.sources import TorchSources
from selector.upgrade import compare
from tests.selector.test_upgrade_false_positives import _torch

UTILS = """
def reference_reduction_numpy(f, supports_keepdims=True):
    @wraps(f)
    def wrapper(x, *args, **kwargs):
        mask = kwargs.pop("mask", None)
        if mask is not None:
            assert mask.layout == torch.strided
        return f(x, *args, **kwargs)
    return wrapper
"""
UTILS_NEW = UTILS.replace(
    "            assert mask.layout == torch.strided",
    "            if mask.layout != torch.strided:\n"
    "                raise AssertionError(f'Expected strided, got {mask.layout}')",
)
MASKED = """
from torch.testing._internal.opinfo.utils import reference_reduction_numpy

def reference_masked_std_var(numpy_fn):
    ref = reference_reduction_numpy(numpy_fn)

    def func(input, dim=None, unbiased=None, **kwargs):
        return ref(input, dim, ddof=1 if unbiased else 0, **kwargs)
    return func

op_db = [
    ReductionOpInfo('masked.std', ref=reference_masked_std_var(np.std)),
    ReductionOpInfo('masked.sum', ref=reference_reduction_numpy(np.sum)),
    ReductionOpInfo('masked.mean', ref=None),
]
"""


def _changed(tmp_path: Path, old: dict[str, str], new: dict[str, str]) -> list[str]:
    before = opinfo_inventory(TorchSources(_torch(tmp_path, "2.10.0", old)), device="snpu")
    after = opinfo_inventory(TorchSources(_torch(tmp_path, "2.11.0", new)), device="snpu")
    diff = compare(before, after)
    assert diff.added == [] and diff.removed == []
    return diff.changed


def test_a_change_in_a_helper_that_a_called_helper_names_changes_the_entry(tmp_path):
    """reference_masked_std_var(np.std) is specialised for its call; the reference_reduction_numpy it calls changed,
    so masked.std changed as much as masked.sum, which calls it directly; masked.mean reaches neither."""
    old = {"opinfo/utils.py": UTILS, "opinfo/definitions/_masked.py": MASKED}
    new = {**old, "opinfo/utils.py": UTILS_NEW}
    assert _changed(tmp_path / "a", old, new) == ["masked.std", "masked.sum"]
    # a change to the called helper itself changes only the entry that calls it
    own = {
        **old,
        "opinfo/definitions/_masked.py": MASKED.replace(
            "ddof=1 if unbiased else 0", "ddof=int(bool(unbiased))"
        ),
    }
    assert _changed(tmp_path / "b", old, own) == ["masked.std"]
