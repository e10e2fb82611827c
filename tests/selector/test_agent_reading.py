"""What the offline agent and the dtype rule read in a test's source: harness helpers and host code are
not device ops, and a dtype in a test's name decides only when the body builds a tensor of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from crcr.contracts.inventory import InventoryTest
from selector.agent.offline import OfflineAgent
from selector.agent.tools import Tools
from selector.rules import RuleContext, classify
from tests.selector.reading_fixtures import device_test

SRC = """
import random
import numpy as np
import torch
from torch.testing._internal.common_dtype import all_types_and
from torch.testing._internal.common_device_type import dtypes


class TestReading(TestCase):
    @dtypes(*torch.testing.get_all_dtypes(include_complex=False))
    def test_harness_in_decorator(self, device, dtype):
        x = torch.ones(4, dtype=dtype, device=device)
        self.assertEqual(x.add(x), 2 * x)

    def test_harness_in_body(self, device):
        for dt in torch.testing.get_all_fp_dtypes() + all_types_and(torch.half):
            shape = []
            shape.append(random.randint(1, 3))
            x = torch.ones(shape, dtype=dt, device=device)
            self.assertEqual(x.mul(x), x, msg="{} differs".format(dt))
            np.vander(np.ones(3), 2)

    def test_host_code_and_a_missing_op(self, device):
        rows = {}.items()
        x = torch.ones(3, device=device)
        torch.cholesky_inverse(x)

    @dtypes(torch.float64)
    def test_dtype_ignored(self, device, dtype):
        t = torch.ones(5, 5, device=device)
        self.assertTrue(t.abs() is not t)

    @dtypes(torch.float64)
    def test_dtype_only_compared(self, device, dtype):
        if dtype == torch.float64 or dtype in (torch.half,):
            return
        t = torch.ones(5, device=device)
        t.neg()

    def test_builds_double(self, device):
        a = torch.ones(3, dtype=torch.float, device=device)
        b = torch.ones(3, dtype=torch.double, device=device)
        self.assertEqual((a + b).dtype, torch.double)

    def test_complex_literal(self, device):
        t = torch.tensor([1, 2 + 1j], device=device)
        t.neg()

    def test_compares_double_only(self, device):
        t = torch.ones(3, device=device)
        if t.dtype == torch.double:
            return
        t.neg()

    @dtypes(torch.float64)
    def test_dtype_used(self, device, dtype):
        t = torch.ones(5, dtype=dtype, device=device)
        t.neg()
"""
CLS = "TestReadingPRIVATEUSE1"


def _test(method: str, dtype: str | None) -> InventoryTest:
    return device_test("test/test_reading.py", CLS, method, dtype)


@pytest.fixture
def reading(tmp_path: Path, caps) -> tuple[Tools, dict[str, InventoryTest]]:
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_reading.py").write_text(SRC, encoding="utf-8")
    tests = {
        m: _test(m, d)
        for m, d in (
            ("test_harness_in_decorator", "int16"),
            ("test_harness_in_body", None),
            ("test_host_code_and_a_missing_op", None),
            ("test_dtype_ignored", "float64"),
            ("test_dtype_only_compared", "float64"),
            ("test_dtype_used", "float64"),
            ("test_builds_double", None),
            ("test_complex_literal", None),
            ("test_compares_double_only", None),
        )
    }
    return Tools(caps, {t.id: t for t in tests.values()}, tmp_path), tests


def test_harness_helpers_and_host_calls_are_not_device_ops(reading):
    tools, tests = reading
    picked = [
        tests["test_harness_in_decorator"],
        tests["test_harness_in_body"],
        tests["test_host_code_and_a_missing_op"],
    ]
    answers, _ = OfflineAgent().decide(picked, tools)
    deco, body, host = (answers[t.id] for t in picked)
    # before: get_all_dtypes (decorator), get_all_fp_dtypes / append / format / vander (body) read as
    # ops without a kernel, so both tests were planned skip although they only add and multiply
    assert deco.mode == "run" and "add" in deco.reason and "get_all" not in deco.reason
    # the body's loop builds every dtype of its lists, float64 included (refused): skipped for that, not
    # for a harness name read as an op
    assert body.mode == "skip" and "float64" in body.reason and "no kernel" not in body.reason
    for word in ("get_all", "append", "format", "vander", "randint", "all_types"):
        assert word not in body.reason
    # a real op without a kernel still decides, next to host code that is ignored
    assert host.mode == "skip" and "cholesky_inverse" in host.reason and "items" not in host.reason


def test_dtype_rule_decides_only_when_the_dtype_reaches_a_tensor(reading, caps):
    tools, tests = reading
    with_source = RuleContext(caps, None, dtype_reaches=tools.dtype_reaches)
    assert tools.dtype_reaches(tests["test_dtype_ignored"]) is False
    assert tools.dtype_reaches(tests["test_dtype_only_compared"]) is False
    assert tools.dtype_reaches(tests["test_dtype_used"]) is True
    assert tools.dtype_reaches(tests["test_harness_in_body"]) is None  # no dtype argument
    # the fixture device does not hold float64: the rule skips only the test that builds a float64 tensor
    used = classify(tests["test_dtype_used"], with_source)
    assert used is not None and used.mode == "skip" and "float64" in used.reason
    for name in ("test_dtype_ignored", "test_dtype_only_compared"):
        assert classify(tests[name], with_source) is None  # the agent reads what it calls
        blind = classify(tests[name], RuleContext(caps, None))
        assert blind is not None and blind.rule == "dtype-support"  # without source: as before
    answers, _ = OfflineAgent().decide([tests["test_dtype_ignored"]], tools)
    assert answers[tests["test_dtype_ignored"].id].mode == "run"


def test_a_body_that_builds_refused_dtype_tensors_is_skipped(reading):
    """float64 / complex tensors the body builds by name (no dtype argument) are refused by the fixture
    device; a dtype that is only compared builds nothing."""
    tools, tests = reading
    picked = [tests[n] for n in ("test_builds_double", "test_complex_literal", "test_compares_double_only")]
    answers, _ = OfflineAgent().decide(picked, tools)
    double, cplx, compared = (answers[t.id] for t in picked)
    assert double.mode == "skip" and "float64" in double.reason and "refuses" in double.reason
    assert cplx.mode == "skip" and "complex64" in cplx.reason
    assert compared.mode == "run"
