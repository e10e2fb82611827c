"""The one plan resolver: exact ids, patterns, precedence, defaults, bad files."""

from __future__ import annotations

import pytest

from crcr.contracts.plan import load_plan, parse_plan_file, plan_path_for
from crcr.errors import ContractError, InputError

PLAN = """\
schema_version: 1
backend: snpu
upstream: {file: test/test_ops.py, torch: 2.13.0}
defaults: {mode: skip, reason: not yet classified}
tests:
  - id: TestCommonPRIVATEUSE1::test_compare_cpu_.*_float64
    mode: skip
    reason: snpu has no float64 units
    source: rules
  - id: TestCommonPRIVATEUSE1::test_compare_cpu_add_snpu_float64
    mode: xfail
    reason: logs saw it fail
    source: logs
  - id: TestCommonPRIVATEUSE1::test_compare_cpu_.*
    mode: run
    reason: core kernels
    source: agent
  - id: TestCommonPRIVATEUSE1::test_compare_cpu_sub_snpu_float32
    mode: skip
    reason: reviewer says no
    source: reviewer
"""


def test_precedence_and_patterns(tmp_path):
    (tmp_path / "test_ops.yaml").write_text(PLAN)
    plan = load_plan(tmp_path)
    # agent pattern beats rules pattern
    d = plan.resolve("test/test_ops.py::TestCommonPRIVATEUSE1::test_compare_cpu_mul_snpu_float64")
    assert (d.mode, d.source) == ("run", "agent")
    # logs exact beats agent pattern
    d = plan.resolve("test/test_ops.py::TestCommonPRIVATEUSE1::test_compare_cpu_add_snpu_float64")
    assert (d.mode, d.source, d.reason) == ("xfail", "logs", "logs saw it fail")
    # reviewer wins
    d = plan.resolve("test/test_ops.py::TestCommonPRIVATEUSE1::test_compare_cpu_sub_snpu_float32")
    assert (d.mode, d.source) == ("skip", "reviewer")
    # no entry: defaults
    d = plan.resolve("test/test_ops.py::TestCommonPRIVATEUSE1::test_other_snpu")
    assert (d.mode, d.source) == ("skip", "default")
    # a file no plan covers
    assert plan.resolve("test/test_nn.py::TestNN::test_x").source == "unplanned"
    assert len(plan.digest) == 16


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (("mode: run", "mode: sometimes"), "tests.2.mode"),
        (("reason: core kernels", "reason: '  '"), "reason must say why"),
        (("schema_version: 1", "schema_version: 7"), "schema_version"),
        (("tests:", "tests: !!python/object/apply:os.system ['true']"), "not valid YAML"),
        (("- id: TestCommonPRIVATEUSE1::test_compare_cpu_.*\n", "- id: 'Test(::'\n"), "not a valid pattern"),
    ],
)
def test_bad_plan_files_say_what_is_wrong(mutation, message):
    with pytest.raises(ContractError) as info:
        parse_plan_file(PLAN.replace(*mutation), "p.yaml")
    assert message in str(info.value)
    assert str(info.value).startswith("p.yaml")


def test_missing_directory_and_path_escape(tmp_path):
    with pytest.raises(InputError):
        load_plan(tmp_path / "nope")
    assert plan_path_for(tmp_path, "test/nn/test_conv.py") == (tmp_path / "nn" / "test_conv.yaml").resolve()
    with pytest.raises(InputError):
        plan_path_for(tmp_path, "test/../../etc/passwd.py")


def test_indexed_resolution_matches_a_scan_of_every_entry():
    """The resolver looks only at patterns whose literal can occur in the id (and caches per
    id): it must decide exactly what checking every entry in order decides."""
    import random
    import re

    from crcr.contracts.plan import SOURCE_RANK

    ops = ["add", "abs", "mm", "t", "H", "_softmax", "nn_functional_softsign", "a", "ab"]
    entries = [("T::.*", "skip", "rules"), ("T::test_.*_float64", "skip", "rules"), ("T::.*_t_.*", "xfail", "agent"),
               ("T::(test_a|test_b).*", "run", "logs"), ("T::test_[ab]bs_.*", "xfail", "rules"),
               ("T::test_add_snpu_float32", "xfail", "logs"), ("T::.*mm.*", "run", "reviewer")]
    entries += [(f"T::.*_{op}_snpu(_.*)?", random.Random(i).choice(["run", "xfail", "skip"]),
                 random.Random(i).choice(["rules", "agent"])) for i, op in enumerate(ops)]
    text = "schema_version: 1\nbackend: snpu\nupstream: {file: test/test_x.py}\ntests:\n" + "".join(
        f"  - id: '{i}'\n    mode: {m}\n    reason: r{n}\n    source: {s}\n" for n, (i, m, s) in enumerate(entries))
    pf = parse_plan_file(text)
    rng = random.Random(7)
    ids = [f"T::test_{rng.choice(ops)}_snpu_{rng.choice(['float32', 'float64', 'int8'])}" for _ in range(300)]
    ids += ["T::x", "T::", "T::test_add_snpu_float32", "U::test_mm", "T::test_abs_snpu"]
    for tid in ids * 2:  # twice: the second time from the cache
        best, chosen = None, None
        for index, e in enumerate(pf.tests):
            exact = e.id == tid
            if exact or (e.regex is not None and re.fullmatch(e.id, tid)):
                key = (SOURCE_RANK[e.source], exact, index)
                if best is None or key > best:
                    best, chosen = key, e
        got = pf.resolve(tid)
        assert (got.entry.id if got.entry else None) == (chosen.id if chosen else None), tid
