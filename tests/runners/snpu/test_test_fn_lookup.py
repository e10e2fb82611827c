"""Upstream's running-test lookup (``extract_test_fn``) without its stack walk, where crcr runs upstream sample
iterators and tests in bulk: the template probes, the capability sweep, the trace children."""

from __future__ import annotations

import unittest

import torch
from torch.testing._internal import common_utils
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo import core

from runners.cpu_trace import run_traces
from runners.snpu.opinfo_sweep import sweeping
from runners.testfn import fast_test_fn_lookup, test_fn_from_frames


def test_the_walk_finds_the_running_test_as_upstream_does_inside_and_outside_a_test():
    class TestLookup(unittest.TestCase):
        def test_inside(self):
            self.found = (test_fn_from_frames(), common_utils.extract_test_fn())

    case = TestLookup("test_inside")
    assert case.run().wasSuccessful()
    assert case.found[0] is case.found[1] is TestLookup.test_inside
    assert test_fn_from_frames() is None and common_utils.extract_test_fn() is None
    upstream = common_utils.extract_test_fn
    with fast_test_fn_lookup():  # both names upstream calls it by, for the while
        assert (
            common_utils.extract_test_fn is test_fn_from_frames
            and core.extract_test_fn is test_fn_from_frames
        )
    assert common_utils.extract_test_fn is upstream and core.extract_test_fn is upstream


def _samples_in_a_test() -> tuple[object, list[torch.Tensor]]:
    """``add``'s float32 samples as ``op.sample_inputs`` gives them inside a test (seeded by the test's name)."""
    add = next(op for op in op_db if op.name == "add" and not op.variant_test_name)

    class TestSeeded(unittest.TestCase):
        def test_samples(self):
            self.got = [s.input.clone() for s in add.sample_inputs("cpu", torch.float32)]
            self.lookup = common_utils.extract_test_fn

    case = TestSeeded("test_samples")
    assert case.run().wasSuccessful()
    return case.lookup, case.got


def test_the_sweep_looks_up_the_running_test_without_the_stack_walk_and_gets_the_same_samples():
    upstream_lookup, upstream = _samples_in_a_test()
    with sweeping():
        sweep_lookup, swept = _samples_in_a_test()
    assert upstream_lookup is not test_fn_from_frames and sweep_lookup is test_fn_from_frames
    assert len(swept) == len(upstream) > 0
    assert all(torch.equal(a, b) for a, b in zip(swept, upstream, strict=True))


def test_the_trace_children_run_their_tests_with_the_walk():
    seen, lines = [], []

    def run(cls, method):
        seen.append(common_utils.extract_test_fn)
        return "passed", "", []

    run_traces(
        [["t.id", "C", "test_x", "cpu"]], lines.append, lambda *a: (unittest.TestCase, "run", ""), run, "cpu"
    )
    assert seen == [test_fn_from_frames] and lines[-1]["outcome"] == "passed"
    assert common_utils.extract_test_fn is not test_fn_from_frames
