"""Rules on the fixture upstream tree: each decorator kind, dtypes, ops, features, upstream-disabled."""

from __future__ import annotations

import pytest

from crcr.contracts.inventory import InventoryTest
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
        (
            "test/distributed/test_fixture_dist.py::TestFixtureDist::test_all_reduce",
            "skip",
            "feature-needs",
            "distributed",
        ),
        (
            OPS + "test_compare_cpu_cholesky_inverse_snpu_float32",
            "skip",
            "op-support",
            "no kernel for op cholesky_inverse",
        ),
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
    assert decide("test_compare_cpu_sin_snpu_float16").reason.startswith(
        "[op-support]"
    )  # sin passes only at float32
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
    assert {
        "float64",
        "complex64",
        "complex128",
    } <= caps.refused_dtypes and not caps.refused_dtypes & caps.dtypes
    assert caps.device == "snpu" and caps.has_opinfo and caps.supports_op("add", "float32")


def _template_test(
    template: str, op: str, op_dtypes: list[str] | None = None, cls: str = "TestCommonPRIVATEUSE1"
):
    return _probe_test(template, op, dtype=None, op_dtypes=op_dtypes, cls=cls)


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
    assert (decision.mode, decision.rule) == (
        "run",
        "dtype-claims",
    ) and "equal the OpInfo's claimed dtypes" in decision.reason
    # a _refs entry's test_dtypes is a dtype-claim test too (refs are no exception)
    ref = _template_test("test_dtypes", "_refs.softmax", ["bfloat16", "float16", "float32", "float64"])
    assert classify(ref, ctx).rule == "dtype-claims"
    # an unreadable claim is not guessed at: the op rules decide
    assert classify(_template_test("test_dtypes", "softmax", None), ctx).rule == "op-supported"


def test_python_ref_tests_need_prims_kernels(caps):
    ctx = RuleContext(caps)
    assert not any(a.startswith("prims::") for a in caps.aten_ops)
    for test in (
        _template_test("test_python_ref", "_refs.softmax"),
        _template_test("test_python_ref_executor", "softmax"),
    ):
        decision = classify(test, ctx)
        assert (decision.mode, decision.rule) == ("skip", "python-refs") and "prims" in decision.reason
    # the torch-fallback variant reaches prims too
    assert (
        classify(_template_test("test_python_ref_torch_fallback", "_refs.softmax"), ctx).rule == "python-refs"
    )
    # plain templates over _refs entries (unary_ufuncs and binary_ufuncs hold refs in 2.13) run the
    # reference's prims: no prims kernel, skip
    plain = classify(_template_test("test_contig_vs_every_other", "_refs.softmax"), ctx)
    assert (plain.rule, plain.mode) == ("python-refs", "skip")
    caps.features["prims"] = True  # a backend that routes prims::* to its kernels says so
    assert classify(_template_test("test_python_ref", "_refs.softmax"), ctx).rule != "python-refs"
    del caps.features["prims"]
    caps.aten_ops.add("prims::add")
    assert classify(_template_test("test_python_ref", "_refs.softmax"), ctx).rule != "python-refs"


def _probe_test(
    template: str,
    op: str,
    dtype: str | None = "float32",
    decorators: list[str] | None = None,
    op_dtypes: list[str] | None = None,
    cls: str = "TestCommonPRIVATEUSE1",
) -> InventoryTest:
    method = f"{template}_{op.replace('.', '_')}_snpu" + (f"_{dtype}" if dtype else "")
    return InventoryTest(
        id=f"test/test_ops.py::{cls}::{method}",
        file="test/test_ops.py",
        cls=cls,
        method=method,
        template=template,
        device="snpu",
        dtype=dtype,
        op=op,
        op_dtypes=op_dtypes,
        decorators=decorators or [],
        fingerprint="f",
    )


@pytest.mark.parametrize(
    ("template", "decorators", "family"),
    [
        ("test_out", [], "out"),
        ("test_out_warning", [], "out"),
        ("test_dtypes", [], "dtypes"),
        ("test_python_ref", [], "python_ref"),
        ("test_python_ref_torch_fallback", [], "ref_fallback"),
        ("test_noncontiguous_samples", [], "noncontiguous"),
        ("test_broadcast_python_scalar", [], "python_scalar"),
        ("test_variant_consistency_eager", [], "variants"),
        ("test_fn_grad", [], "grad"),
        ("test_compare_cpu", [], "samples"),
        # templates over the unary ufunc list call op(t) on lone tensors: their own families
        ("test_contig_vs_every_other", ["ops(unary_ufuncs)"], "unary_noncontiguous"),
        ("test_reference_numerics", ["ops(unary_ufuncs)"], "unary_values"),
        ("test_variant_consistency", ["ops(unary_ufuncs)"], "unary_variants"),
        (
            "test_float_domains",
            ["ops((_fn for _fn in unary_ufuncs if _fn.domain != (None, None)))"],
            "unary_domain",
        ),
    ],
)
def test_each_template_is_planned_from_its_familys_probe(template, decorators, family):
    from selector.rules import template_family

    assert template_family(_probe_test(template, "add", decorators=decorators)) == family


@pytest.fixture
def snpu_caps():
    from pathlib import Path

    from selector.capabilities import load_capabilities

    return load_capabilities(Path(__file__).resolve().parents[2] / "configs" / "backends" / "snpu.yaml")


def test_template_probe_answers_decide_run_skip_or_xfail_with_the_error(snpu_caps):
    caps = snpu_caps
    from selector.rules import probe_key, reads_key

    ctx = RuleContext(caps)
    out_add, out_ones = _probe_test("test_out", "add"), _probe_test("test_out", "ones")
    scalar = _probe_test("test_broadcast_python_scalar", "copysign")
    assert classify(out_ones, ctx).rule != "template-probe"  # no answers: the op rules decide as before
    caps.attach_probes(
        {
            probe_key("out", "add", "float32"): None,
            probe_key(
                "out", "ones", "float32"
            ): "SnpuUnsupportedOpError: aten op aten::ones.out is not implemented",
            probe_key("python_scalar", "copysign", "float32"): "TypeError: unsupported operand",
            probe_key(
                "attrs", "add", "handles_extremals"
            ): "ProbeMismatch: the template reads op.handles_extremals, "
            "which this torch's BinaryUfuncInfo does not have",
        },
        {reads_key(_probe_test("test_reference_numerics", "add")): "handles_extremals"},
    )
    run = classify(out_add, ctx)
    assert (run.mode, run.rule) == ("run", "template-probe") and "out= semantics" in run.reason
    assert run.pattern == "TestCommonPRIVATEUSE1::test_out_add_snpu(_.*)?"
    refused = classify(out_ones, ctx)
    assert (refused.mode, refused.rule) == ("skip", "template-probe")
    assert (
        "aten::ones.out is not implemented" in refused.reason
        and refused.evidence["probe"] == "out|ones|float32"
    )
    failed = classify(scalar, ctx)
    assert (failed.mode, failed.rule) == ("xfail", "template-probe") and "Python number" in failed.reason
    stale = classify(_probe_test("test_reference_numerics", "add"), ctx)
    assert (
        stale.mode == "xfail"
        and "op.handles_extremals" in stale.reason
        and "another torch version" in stale.reason
    )
    # a refused dtype is decided before any probe: no probe is asked for it
    assert classify(_probe_test("test_out", "add", "float64"), ctx).rule == "dtype-support"


def test_probe_requests_skip_decided_tests_and_what_the_sweep_answered(snpu_caps):
    caps = snpu_caps
    from selector.rules import probe_requests

    tests = [
        _probe_test("test_out", "add"),
        _probe_test("test_out", "add", "float64"),
        _probe_test("test_out", "add", "uint32"),
        _probe_test("test_compare_cpu", "softmax"),
    ]
    caps.opinfo_by_dtype = {"float32": {"softmax"}}
    reqs = probe_requests(tests, RuleContext(caps), {"test/test_ops.py::test_out": "supports_out"})
    assert ("out", "add", "float32") in reqs and ("attrs", "add", "supports_out") in reqs
    assert not any(r[2] == "float64" for r in reqs)  # refused dtype: decided without a probe
    assert ("out", "add", "uint32") in reqs  # neither held nor refused: the probe finds out
    assert not any(r[0] == "samples" for r in reqs)  # the capability sweep already ran softmax's samples


def test_dtype_pair_tests_are_planned_by_every_dtype_of_the_pair(caps):
    """``@dtypes(*product(all, all))`` instantiates a template with ``dtypes=(a, b)``: the inventory keeps
    both (as the id's suffix joins them), and a refused one skips the test; a pair of held dtypes does not."""
    import torch

    from runners.inventory import describe

    def instantiate(first, second):
        def test_pair_promotion(self, device, dtypes):
            a = torch.ones(3).to(device=device, dtype=dtypes[0])
            return a.to(dtypes[1])

        test_pair_promotion.__defaults__ = ({"device": "snpu", "dtypes": (first, second)},)
        name = f"test_pair_promotion_snpu_{str(first)[6:]}_{str(second)[6:]}"
        item = type(
            "Item",
            (),
            {"nodeid": f"test/test_pairs.py::TestPairsPRIVATEUSE1::{name}", "obj": test_pair_promotion},
        )()
        return describe(item, "snpu")

    refused = instantiate(torch.bfloat16, torch.complex128)
    assert refused.dtype == "bfloat16_complex128"
    decision = classify(refused, RuleContext(caps))
    assert (decision.mode, decision.rule) == ("skip", "dtype-support") and "complex128" in decision.reason
    held = instantiate(torch.float32, torch.bfloat16)
    assert held.dtype == "float32_bfloat16" and classify(held, RuleContext(caps)) is None


def test_a_feature_named_by_a_parametrized_argument_is_needed_only_where_it_is_set(caps):
    """``@parametrize("sparse_grad", [False, True])``: the instance with sparse_grad=False builds nothing
    sparse and is not skipped for sparse; the one with True still is."""
    import torch

    from runners.inventory import describe

    def parametrize(name, values):  # stands for torch's @parametrize: the inventory reads its text only
        return lambda fn: fn

    @parametrize("sparse_grad", [False, True])
    def test_gather_grad(self, device, dtype, sparse_grad):
        torch.ones(2, device=device, dtype=dtype).sum()

    def instance(flag: bool):
        fn = lambda self, device, dtype, sparse_grad: None  # noqa: E731
        fn.__wrapped__ = test_gather_grad
        fn.__name__ = "test_gather_grad"
        fn.__defaults__ = ({"device": "snpu", "dtype": torch.float32, "sparse_grad": flag},)
        name = f"test_gather_grad_sparse_grad_{flag}_snpu_float32"
        item = type("Item", (), {"nodeid": f"test/test_g.py::TestGPRIVATEUSE1::{name}", "obj": fn})()
        return describe(item, "snpu")

    off, on = instance(False), instance(True)
    assert off.decorators and "sparse" not in off.features and "sparse" in on.features
    assert classify(on, RuleContext(caps)).rule == "feature-needs"
    decided = classify(off, RuleContext(caps))
    assert decided is None or decided.rule != "feature-needs"


def test_a_host_test_named_after_sparse_is_left_to_the_agent(caps):
    """Held-back round 9: ``TestNNInit::test_sparse_only_works_on_2d_inputs`` (about the dense initializer
    ``nn.init.sparse_``, a plain TestCase collected for snpu) got the ``sparse`` feature from its name and was
    skipped for snpu's missing sparse support, yet it builds only CPU tensors and passed. A host test's sparse
    tensors are on the CPU: the rule leaves it to the agent (its device-shadow run); a device test still needs it."""
    from runners.inventory import describe

    def collected(nodeid: str, name: str, with_device: bool):
        fn = (lambda self, device: None) if with_device else (lambda self: None)
        fn.__name__ = name
        if with_device:
            fn.__defaults__ = ({"device": "snpu"},)
        item = type("Item", (), {"nodeid": nodeid, "obj": fn})()
        return describe(item, "snpu")

    host = collected("test/nn/test_init.py::TestNNInit::test_sparse_only_works_on_2d_inputs",
                     "test_sparse_only_works_on_2d_inputs", with_device=False)
    device = collected("test/test_s.py::TestSPRIVATEUSE1::test_sparse_sum_snpu", "test_sparse_sum", with_device=True)
    assert "sparse" in host.features and "sparse" in device.features
    decided = classify(host, RuleContext(caps))
    assert decided is None or decided.rule != "feature-needs"
    assert classify(device, RuleContext(caps)).rule == "feature-needs"
