"""Rules on the fixture upstream tree: each decorator kind, dtypes, ops, features, upstream-disabled."""

from __future__ import annotations

import pytest

from selector.rules import RuleContext, classify

P = "test/test_fixture_ops.py::TestFixtureDevicePRIVATEUSE1::"
OPS = "test/test_fixture_ops.py::TestFixtureOpsPRIVATEUSE1::"


@pytest.mark.parametrize(
    ("test_id", "mode", "rule", "says"),
    [
        (P + "test_cuda_streams_snpu", "skip", "device-restriction", "@onlyCUDA"),
        (P + "test_cpu_only_thing_snpu", "skip", "device-restriction", "@onlyCPU"),
        (P + "test_on_cuda_only_snpu", "skip", "device-restriction", "onlyOn('cuda')"),
        (P + "test_two_devices_snpu", "skip", "device-restriction", "needs 2 devices; snpu exposes 1"),
        (P + "test_softmax_dtypes_snpu_float64", "skip", "dtype-support", "dtype float64"),
        (P + "test_softmax_dtypes_snpu_complex64", "skip", "dtype-support", "dtype complex64"),
        (P + "test_to_sparse_snpu", "skip", "feature-needs", "needs sparse"),
        (P + "test_compiled_snpu", "skip", "feature-needs", "needs compile"),
        (P + "test_upstream_disabled_snpu", "skip", "upstream-disabled", "pytorch/pytorch#4242"),
        ("test/distributed/test_fixture_dist.py::TestFixtureDist::test_all_reduce", "skip", "feature-needs", "distributed"),
        (OPS + "test_compare_cpu_cholesky_inverse_snpu_float32", "skip", "op-support", "no kernel for op cholesky_inverse"),
        (OPS + "test_compare_cpu_softmax_snpu_float32", "run", "op-supported", "kernel for op softmax"),
        (OPS + "test_compare_cpu_softmax_snpu_float64", "skip", "dtype-support", "float64"),
    ],
)
def test_rule_decides_with_its_name_in_the_reason(inventory, caps, disabled, test_id, mode, rule, says):
    decision = classify(inventory.by_id()[test_id], RuleContext(caps, disabled))
    assert decision is not None
    assert (decision.mode, decision.rule) == (mode, rule)
    assert decision.reason.startswith(f"[{rule}] ")
    assert says in decision.reason


def test_rules_leave_plain_tests_to_the_agent(inventory, caps, disabled):
    undecided = sorted(t.method for t in inventory.tests if classify(t, RuleContext(caps, disabled)) is None)
    assert "test_add_plain_snpu" in undecided and "test_injection_snpu" in undecided
    assert "test_softmax_dtypes_snpu_float32" in undecided  # onlyNativeDeviceTypes includes PrivateUse1


def test_disabled_entries_for_other_platforms_do_not_apply(inventory, caps, disabled):
    # test_simple is disabled upstream on mac only; test_add_plain only for the CUDA variant
    ctx = RuleContext(caps, disabled)
    simple = inventory.by_id()["test/test_fixture_plain.py::TestFixturePlain::test_simple"]
    plain = inventory.by_id()[P + "test_add_plain_snpu"]
    assert classify(simple, ctx) is None
    assert classify(plain, ctx) is None


def test_real_disabled_list_loads_and_matches_a_device_neutral_entry(caps):
    from crcr.data import DISABLED_TESTS
    from selector.disabled import DisabledTests

    real = DisabledTests(DISABLED_TESTS)
    assert len(real) > 20


def test_generated_capability_shape_drives_the_rules(inventory):
    from selector.capabilities import load_capabilities

    from .conftest import FIX

    caps = load_capabilities(FIX / "snpu-capabilities-generated-shape.yaml")
    assert caps.device == "snpu" and caps.limits["device_count"] == 1
    assert caps.feature("compile") is False and caps.feature("cpu_fallback") is False
    ctx = RuleContext(caps, None)
    by_id = inventory.by_id()

    def decide(method):
        return classify(by_id[OPS + method], ctx)

    assert decide("test_compare_cpu_add_snpu_float32").mode == "run"
    assert decide("test_compare_cpu_sin_snpu_float16").reason.startswith("[op-support]")  # sin passes only at float32
    soft = decide("test_compare_cpu_softmax_snpu_float32")
    assert soft.mode == "skip" and "capability sweep" in soft.reason and "not close" in soft.reason
    int_add = decide("test_compare_cpu_add_snpu_int64")
    assert (int_add.mode, int_add.rule) == ("run", "op-supported")  # held natively; the op decides
    assert "does not support dtype float64" in decide("test_compare_cpu_add_snpu_float64").reason


def test_committed_snpu_capability_file_refuses_float64_and_complex():
    from pathlib import Path

    from selector.capabilities import load_capabilities

    caps = load_capabilities(Path(__file__).resolve().parents[2] / "configs" / "backends" / "snpu.yaml")
    assert {"float32", "float16", "bfloat16", "int64", "bool"} <= caps.dtypes
    assert {"float64", "complex64", "complex128"} <= caps.refused_dtypes and not caps.refused_dtypes & caps.dtypes
    assert caps.device == "snpu" and caps.has_opinfo and caps.supports_op("add", "float32")


def _template_test(template: str, op: str, op_dtypes: list[str] | None = None, cls: str = "TestCommonPRIVATEUSE1"):
    from crcr.contracts.inventory import InventoryTest

    method = f"{template}_{op.replace('.', '_')}_snpu"
    return InventoryTest(id=f"test/test_ops.py::{cls}::{method}", file="test/test_ops.py", cls=cls, method=method,
                         template=template, device="snpu", op=op, op_dtypes=op_dtypes, fingerprint="f")


def test_dtype_claim_tests_are_planned_by_claimed_dtypes_not_by_the_kernel(caps):
    """test_dtypes fails on a backend whose dtypes differ from the OpInfo's claim, even with a kernel."""
    ctx = RuleContext(caps)
    assert caps.supports_op("softmax")
    claimed_wide = _template_test("test_dtypes", "softmax", ["bfloat16", "float16", "float32", "float64"])
    decision = classify(claimed_wide, ctx)
    assert (decision.mode, decision.rule) == ("xfail", "dtype-claims")
    assert "claimed but not working on snpu: float64" in decision.reason
    assert decision.pattern == "TestCommonPRIVATEUSE1::test_dtypes_.*"
    # the same template runs where the capability file's dtypes equal the claim
    equal = _template_test("test_dtypes", "softmax", sorted(caps.dtypes))
    decision = classify(equal, ctx)
    assert (decision.mode, decision.rule) == ("run", "dtype-claims") and "equal the OpInfo's claimed dtypes" in decision.reason
    # a _refs entry's test_dtypes is a dtype-claim test too (refs are no exception)
    ref = _template_test("test_dtypes", "_refs.softmax", ["bfloat16", "float16", "float32", "float64"])
    assert classify(ref, ctx).rule == "dtype-claims"
    # an unreadable claim is not guessed at: the op rules decide
    assert classify(_template_test("test_dtypes", "softmax", None), ctx).rule == "op-supported"


def test_python_ref_tests_need_prims_kernels(caps):
    ctx = RuleContext(caps)
    assert not any(a.startswith("prims::") for a in caps.aten_ops)
    for test in (_template_test("test_python_ref", "_refs.softmax"),
                 _template_test("test_python_ref_executor", "softmax")):
        decision = classify(test, ctx)
        assert (decision.mode, decision.rule) == ("skip", "python-refs") and "prims" in decision.reason
    # the torch-fallback variant reaches prims too
    assert classify(_template_test("test_python_ref_torch_fallback", "_refs.softmax"), ctx).rule == "python-refs"
    # plain templates over _refs entries (unary_ufuncs and binary_ufuncs hold refs in 2.13) run the
    # reference's prims: no prims kernel, skip
    plain = classify(_template_test("test_contig_vs_every_other", "_refs.softmax"), ctx)
    assert (plain.rule, plain.mode) == ("python-refs", "skip")
    caps.features["prims"] = True  # a backend that routes prims::* to its kernels says so
    assert classify(_template_test("test_python_ref", "_refs.softmax"), ctx).rule != "python-refs"
    del caps.features["prims"]
    caps.aten_ops.add("prims::add")
    assert classify(_template_test("test_python_ref", "_refs.softmax"), ctx).rule != "python-refs"
