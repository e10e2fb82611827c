"""A file's device classes are collected as ``TestFooPRIVATEUSE1`` or ``TestBarSNPU``: instantiating a test that
takes a device runs ``PrivateUse1TestBase.setUpClass``, which renames the base's device_type to the backend's name,
so every class instantiated after the first is named for ``snpu`` (upstream's test_floatx: ``TestFloat8DtypePRIVATEUSE1``
and ``TestFloat4DtypeSNPU``). Every place that maps a collected id to its source, CPU twin or device class takes
both names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crcr.contracts.inventory import device_class_names, generic_class
from selector.agent.tools import Tools
from selector.capabilities import load_capabilities
from selector.disabled import DisabledTests
from tests.selector.reading_fixtures import device_test, traced_plan, write_checkout

ROOT = Path(__file__).resolve().parents[2]
FILE = "test/test_two_classes.py"

SRC = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestFirst(TestCase):
    def test_ones(self, device):
        self.assertEqual(torch.ones(3, device=device).sum().item(), 3)


class TestSecond(TestCase):
    def test_doubles(self, device):
        x = torch.ones(3, device=device) * 2
        self.assertEqual(x.sum().item(), 6)


instantiate_device_type_tests(TestFirst, globals())
instantiate_device_type_tests(TestSecond, globals())

if __name__ == "__main__":
    run_tests()
"""

# as pytest collects the file for snpu; the static inventory names every class PRIVATEUSE1 (the last one)
COLLECTED = [("TestFirstPRIVATEUSE1", "test_ones"), ("TestSecondSNPU", "test_doubles")]
STATIC = ("TestSecondPRIVATEUSE1", "test_doubles")


def test_both_names_lead_to_the_generic_class():
    assert (
        generic_class("TestSecondSNPU", "snpu")
        == generic_class("TestSecondPRIVATEUSE1", "snpu")
        == "TestSecond"
    )
    assert (
        generic_class("TestSecondCUDA", "snpu") == "TestSecond"
        and generic_class("TestSecond", "snpu") is None
    )
    assert device_class_names("TestSecondSNPU", "snpu") == ["TestSecondSNPU", "TestSecondPRIVATEUSE1"]
    assert device_class_names("TestSecondPRIVATEUSE1", "snpu") == ["TestSecondPRIVATEUSE1", "TestSecondSNPU"]
    assert device_class_names("TestPlain", "snpu") == ["TestPlain"]


def _plan(root: Path, kind: str, tests: list[Any]) -> dict[str, tuple[str, str]]:
    decided = traced_plan(root, tests, kind)
    return {t.id: (decided[t.id].mode, decided[t.id].reason) for t in tests}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = write_checkout(tmp_path_factory.mktemp("checkout"), {FILE: SRC})
    tests = [device_test(FILE, cls, method, None) for cls, method in [*COLLECTED, STATIC]]
    return {"root": root, "tests": tests, **{kind: _plan(root, kind, tests) for kind in ("cpu", "shadow")}}


def test_the_agent_reads_the_source_of_a_class_collected_under_the_backends_name(checkout):
    caps = load_capabilities(ROOT / "configs" / "backends" / "snpu.yaml")
    tests = checkout["tests"]
    tools = Tools(caps, {t.id: t for t in tests}, checkout["root"])
    for t in tests:
        source = tools.read_test_source(t.id)
        assert source is not None and f"def {t.template}(self, device)" in source, (t.id, source)


@pytest.mark.parametrize("cls,method", [*COLLECTED, STATIC])
def test_the_cpu_twin_is_found_under_either_name(checkout, cls, method):
    mode, reason = checkout["cpu"][f"{FILE}::{cls}::{method}_snpu"]
    assert mode == "run" and "passes on the CPU" in reason, reason
    assert "no CPU twin" not in reason, reason


@pytest.mark.parametrize("cls,method", [*COLLECTED, STATIC])
def test_the_shadow_run_finds_the_device_class_under_either_name(checkout, cls, method):
    """The static inventory's TestSecondPRIVATEUSE1 is TestSecondSNPU in the shadow child; it runs all the same."""
    mode, reason = checkout["shadow"][f"{FILE}::{cls}::{method}_snpu"]
    assert mode == "run" and "passes in the shadow run" in reason, reason
    assert "TestSecondSNPU.test_doubles_snpu" in reason or cls == "TestFirstPRIVATEUSE1", reason


def test_an_upstream_disabled_test_is_matched_under_the_backends_name(tmp_path):
    path = tmp_path / "disabled.json"
    path.write_text(json.dumps({"test_doubles_cpu (__main__.TestSecondCPU)": ["7", "https://x/7", []]}))
    disabled = DisabledTests(path, device="snpu")
    for cls in ("TestSecondSNPU", "TestSecondPRIVATEUSE1"):
        entry = disabled.lookup(cls, "test_doubles_snpu")
        assert entry is not None and entry.issue == "7", cls
