"""The static reading tells a Python-level torch function (``torch.nn.init.*_``: Python composed of other ops, no
aten op of its name) from an op: it demands no snpu kernel named after the former."""

from __future__ import annotations

from pathlib import Path

from selector.agent.offline import OfflineAgent, python_level, python_level_calls, torch_calls
from selector.agent.tools import Tools
from tests.selector.reading_fixtures import device_test, write_checkout

FILE = "test/test_python_level.py"
SRC = """
import torch
from torch import nn
from torch.testing._internal.common_utils import TestCase


class TestPythonLevel(TestCase):
    def test_init_helpers(self, device):
        w = torch.empty(4, 4, device=device)
        torch.nn.init.kaiming_uniform_(w)
        nn.init.trunc_normal_(w, mean=0.0, std=1.0)
        self.assertEqual(w.abs().sum().item() > 0, True)

    def test_init_helper_only(self, device):
        w = torch.empty(4, 4, device=device)
        torch.nn.init.xavier_normal_(w)

    def test_init_helper_and_a_missing_op(self, device):
        w = torch.empty(4, 4, device=device)
        torch.nn.init.orthogonal_(w)
        torch.cholesky_inverse(w)

    def test_an_op_of_the_same_name(self, device):
        w = torch.empty(4, 4, device=device)
        torch.nn.init.uniform_(w)
"""
CLS = "TestPythonLevelPRIVATEUSE1"
METHODS = (
    "test_init_helpers",
    "test_init_helper_only",
    "test_init_helper_and_a_missing_op",
    "test_an_op_of_the_same_name",
)


def test_python_functions_without_an_op_of_their_name_are_told_from_ops():
    assert python_level("torch.nn.init.kaiming_uniform_") and python_level("nn.init.trunc_normal_")
    # an op, a builtin bound to one, a Python function that wraps the aten op of its name, a name torch lacks
    assert not python_level("torch.add") and not python_level("torch.nn.init.uniform_")
    assert not python_level("torch.einsum") and not python_level("torch.nn.init.no_such_init_")
    # Python that makes a tensor of another layout needs that layout's kernels (round 11's no-trace baseline planned
    # nested-tensor tests run when torch.nested.nested_tensor was read as Python over other ops; snpu refused them)
    assert not python_level("torch.nested.nested_tensor") and not python_level("torch.nested.as_nested_tensor")


def test_the_static_reading_demands_no_kernel_for_a_python_level_function(tmp_path: Path, caps):
    import ast

    root = write_checkout(tmp_path, {FILE: SRC})
    tests = {m: device_test(FILE, CLS, m, None) for m in METHODS}
    tools = Tools(caps, {t.id: t for t in tests.values()}, root)
    fn = tools.test_function(tests["test_init_helpers"].id)
    assert isinstance(fn, ast.FunctionDef)
    assert "kaiming_uniform_" not in torch_calls(fn) and "trunc_normal_" not in torch_calls(fn)
    assert python_level_calls(fn) == ["nn.init.trunc_normal_", "torch.nn.init.kaiming_uniform_"]

    answers, _ = OfflineAgent().decide(list(tests.values()), tools)
    helpers, only, missing, same = (answers[tests[m].id] for m in METHODS)
    # before: "it calls kaiming_uniform_, trunc_normal_, which snpu has no kernel for" (skip)
    assert helpers.mode == "run" and "no kernel for" not in helpers.reason, helpers.reason
    assert "torch.nn.init.kaiming_uniform_ are Python over other ops" in helpers.reason, helpers.reason
    assert only.mode == "run" and "torch.nn.init.xavier_normal_ is Python over other ops" in only.reason, (
        only.reason
    )
    # an op without a kernel beside it still decides, named alone
    assert (
        missing.mode == "skip" and "cholesky_inverse" in missing.reason and "orthogonal" not in missing.reason
    )
    # nn.init.uniform_ is Python, but aten has uniform_: read as that op, as before (not named a Python helper)
    assert same.mode == "run" and "Python over other ops" not in same.reason, same.reason
