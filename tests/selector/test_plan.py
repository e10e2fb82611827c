"""Planning: files per upstream file, patterns verified by the one resolver, round trip, cache, determinism."""

from __future__ import annotations

import shutil

from crcr.contracts.plan import load_plan
from selector.agent.offline import OfflineAgent
from selector.plan import run_plan
from selector.planfiles import merge_plan_text

from .conftest import FIX, UPSTREAM

P = "test/test_fixture_ops.py::TestFixtureDevicePRIVATEUSE1::"


def _plan(inventory, caps, disabled, tools, out, data_dir=None):
    return run_plan(inventory, backend="snpu", out_dir=out, caps=caps, disabled=disabled, agent=OfflineAgent(),
                    tools=tools, data_dir=data_dir)


def test_plan_files_mirror_upstream_and_resolve_to_every_decision(inventory, caps, disabled, tools, tmp_path):
    out = tmp_path / "snpu"
    report = _plan(inventory, caps, disabled, tools, out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml")) == [
        "distributed/test_fixture_dist.yaml", "test_fixture_ops.yaml", "test_fixture_plain.yaml"]
    assert report.pattern_entries > 0 and report.entries < len(inventory.tests)
    plan = load_plan(out)
    for t in inventory.tests:
        d = plan.resolve(t.id)
        assert d.source in ("rules", "agent"), t.id
        assert d.reason.strip()
    f64 = "test/test_fixture_ops.py::TestFixtureOpsPRIVATEUSE1::test_compare_cpu_add_snpu_float64"
    assert plan.resolve(f64).mode == "skip"
    assert "dtype float64" in plan.resolve(f64).reason
    assert plan.resolve(P + "test_cuda_streams_snpu").reason.startswith("[device-restriction]")
    text = (out / "test_fixture_ops.yaml").read_text()
    assert "id: TestFixtureOpsPRIVATEUSE1::.*_float64" in text  # one entry for a shared decision


def test_output_is_deterministic(inventory, caps, disabled, tools, tmp_path):
    _plan(inventory, caps, disabled, tools, tmp_path / "a")
    _plan(inventory, caps, disabled, tools, tmp_path / "b")
    for p in (tmp_path / "a").rglob("*.yaml"):
        assert p.read_bytes() == (tmp_path / "b" / p.relative_to(tmp_path / "a")).read_bytes()


REVIEWER_BLOCK = """  # reviewer: softmax float32 hangs on our firmware, see INTERNAL-77
  - id: TestFixtureDevicePRIVATEUSE1::test_softmax_dtypes_snpu_float32
    mode: xfail     # until firmware 3.1
    reason: 'hangs on firmware 3.0: INTERNAL-77'
    source: reviewer
"""


def test_reviewer_entry_and_comments_survive_replanning_byte_for_byte(inventory, caps, disabled, tools, tmp_path):
    out = tmp_path / "snpu"
    _plan(inventory, caps, disabled, tools, out)
    path = out / "test_fixture_ops.yaml"
    text = path.read_text()
    marker = "tests:\n"
    edited = text.replace(marker, marker + REVIEWER_BLOCK, 1)
    edited = edited.replace("defaults: {mode: skip", "# a note the team keeps at the top\ndefaults: {mode: skip", 1)
    path.write_text(edited)
    # re-plan with a changed capability file, so bot entries really change around the reviewer's
    caps.dtypes.add("float64")
    _plan(inventory, caps, disabled, tools, out)
    after = path.read_text()
    assert REVIEWER_BLOCK in after
    assert "# a note the team keeps at the top\n" in after
    assert "TestFixtureDevicePRIVATEUSE1::.*_float64" not in after  # the bot's own entry did change
    plan = load_plan(out)
    d = plan.resolve(P + "test_softmax_dtypes_snpu_float32")
    assert (d.mode, d.source) == ("xfail", "reviewer")


def test_replanning_unchanged_inventory_reuses_every_decision(inventory, caps, disabled, tools, tmp_path):
    out, data = tmp_path / "snpu", tmp_path / "data"
    first = _plan(inventory, caps, disabled, tools, out, data)
    before = {p: p.read_bytes() for p in out.rglob("*.yaml")}
    second = _plan(inventory, caps, disabled, tools, out, data)
    assert first.classified == len(inventory.tests) and first.reused == 0
    assert second.classified == 0 and second.reused == len(inventory.tests)
    assert second.files_unchanged == second.files and second.files_written == 0
    assert before == {p: p.read_bytes() for p in out.rglob("*.yaml")}


def test_changed_test_is_the_only_one_reclassified(inventory, caps, disabled, tools, tmp_path, opdb):
    from selector.inventory.static_ast import scan_checkout

    out, data = tmp_path / "snpu", tmp_path / "data"
    _plan(inventory, caps, disabled, tools, out, data)
    root = tmp_path / "src"
    shutil.copytree(UPSTREAM, root)
    f = root / "test" / "test_fixture_ops.py"
    f.write_text(f.read_text().replace("x.cholesky_inverse()\n", "torch.add(x, x)\n"))
    inv2, _ = scan_checkout(root, opdb, {})
    from selector.agent.tools import Tools

    report = _plan(inv2, caps, disabled, Tools(caps, inv2.by_id(), root), out, data)
    assert report.classified == 1
    assert load_plan(out).resolve(P + "test_injection_snpu").mode == "run"


def test_deleted_bot_entry_hands_its_comment_to_the_entry_before():
    header = {"backend": "snpu", "upstream": {"file": "test/t.py"}}
    text = """schema_version: 1
backend: snpu
upstream: {file: test/t.py}
tests:
  - id: A::a
    mode: run
    reason: kept by a reviewer
    source: reviewer
  - id: B::b
    mode: run
    reason: bot
    source: rules
  # about C: keep it skipped
  - id: C::c
    mode: skip
    reason: reviewer says so
    source: reviewer
"""
    out = merge_plan_text(text, header, [])
    assert "B::b" not in out
    assert "  # about C: keep it skipped\n  - id: C::c\n" in out
    assert "  - id: A::a\n    mode: run\n    reason: kept by a reviewer\n    source: reviewer\n" in out
    assert merge_plan_text(out, header, []) == out


def test_capability_fixture_is_in_the_documented_shape():
    from selector.capabilities import load_capabilities

    caps = load_capabilities(FIX / "snpu-capabilities.yaml")
    assert "float64" not in caps.dtypes and caps.supports_op("nn.functional.relu")
    assert caps.supports_op("add") and not caps.supports_op("fft.fft")


def test_inventory_file_outside_test_tree_cannot_escape_the_plan_dir(caps, disabled, tmp_path):
    from crcr.contracts.inventory import Inventory, InventoryTest
    from crcr.errors import InputError
    from selector.agent.tools import Tools

    evil = Inventory(source="embedded", tests=[InventoryTest(
        id="../../outside.py::C::test_x", file="../../outside.py", cls="C", method="test_x", fingerprint="f")])
    import pytest

    with pytest.raises(InputError, match="outside"):
        run_plan(evil, backend="snpu", out_dir=tmp_path / "plan", caps=caps, disabled=disabled, agent=OfflineAgent(),
                 tools=Tools(caps, evil.by_id(), UPSTREAM), data_dir=None)
    assert not (tmp_path / "outside.yaml").exists()
    # and the agent's source reader stays inside its root
    assert Tools(caps, evil.by_id(), UPSTREAM).read_test_source("../../outside.py::C::test_x") is None


def test_resolver_prefilter_never_changes_a_match():
    """The contract's literal prefilter must be conservative: whatever fullmatches contains the literals."""
    import random
    import re

    from crcr.contracts.plan import required_literals

    rng = random.Random(7)
    atoms = ["a", "b", "_", ":", ".", ".*", "(a|b)", "[ab]", "a?", "b*", "\\.", "(_.*)?", "a{1,2}", "\\w", "b+", "(?i)A"]
    for _ in range(3000):
        pattern = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 6)))
        try:
            rx = re.compile(pattern)
        except re.error:
            continue
        lits = required_literals(pattern)
        for _ in range(15):
            s = "".join(rng.choice("ab_:.A") for _ in range(rng.randint(0, 8)))
            if rx.fullmatch(s):
                assert all(lit in s for lit in lits), (pattern, lits, s)


def test_replanning_with_a_new_rule_never_lets_an_appended_pattern_outrank_a_decision(tmp_path):
    """An existing file keeps its entries in place and new ones are appended; a new run pattern over an
    op must not win over an older dtype pattern for the tests the older rule still decides."""
    from crcr.contracts.inventory import Inventory, InventoryTest
    from crcr.contracts.plan import load_plan
    from selector.plan import Decided, write_plan

    cls = "TestCommonPRIVATEUSE1"
    tests = [InventoryTest(id=f"test/test_ops.py::{cls}::test_out_{op}_snpu_{dt}", file="test/test_ops.py", cls=cls,
                           method=f"test_out_{op}_snpu_{dt}", template="test_out", device="snpu", dtype=dt, op=op,
                           fingerprint="f") for op in ("add", "sub") for dt in ("float32", "float64")]
    inv = Inventory(source="pytorch-src", tests=tests)
    skip64 = Decided("skip", "[dtype-support] snpu does not support dtype float64", "rules", "f", "dtype-support",
                     f"{cls}::.*_float64")
    old = {t.id: skip64 if t.dtype == "float64" else Decided("skip", "[op-support] no kernel", "rules", "f",
                                                             "op-support", f"{cls}::.*_{t.op}_snpu(_.*)?")
           for t in tests}
    write_plan(inv, old, tmp_path, "snpu")
    new = {t.id: skip64 if t.dtype == "float64" else Decided(
        "run", f"[template-probe] the out probe of op {t.op} passed", "rules", "f", "template-probe",
        f"{cls}::test_out_{t.op}_snpu(_.*)?") for t in tests}
    write_plan(inv, new, tmp_path, "snpu")  # no cache: merged onto the file the first plan wrote
    plan = load_plan(tmp_path)
    for t in tests:
        assert plan.resolve(t.id).mode == new[t.id].mode, t.id
