"""diff (Markdown per flipped test), explain, Spyre export/import, pick."""

from __future__ import annotations

import json

import pytest

from crcr.contracts.pick import load_pick
from crcr.contracts.plan import load_plan
from selector.agent.offline import OfflineAgent
from selector.diff import diff_plans, render_markdown
from selector.diffparse import parse_diff
from selector.explain import explain
from selector.pick import PickContext, pick
from selector.plan import run_plan
from selector.spyre import export_spyre, import_spyre

OPS = "test/test_fixture_ops.py::TestFixtureOpsPRIVATEUSE1::"
DEV = "test/test_fixture_ops.py::TestFixtureDevicePRIVATEUSE1::"


@pytest.fixture
def planned(inventory, caps, disabled, tools, tmp_path):
    out = tmp_path / "snpu"
    run_plan(inventory, backend="snpu", out_dir=out, caps=caps, disabled=disabled, agent=OfflineAgent(), tools=tools,
             data_dir=None)
    return out


def test_diff_markdown_lists_flips_with_reasons(planned, inventory, tmp_path, cli):
    import shutil

    new = tmp_path / "new"
    shutil.copytree(planned, new)
    f = new / "test_fixture_ops.yaml"
    f.write_text(f.read_text().replace("tests:\n", """tests:
  - id: TestFixtureOpsPRIVATEUSE1::test_compare_cpu_softmax_snpu_.*
    mode: xfail
    reason: softmax kernel regressed in firmware 3.0 (INTERNAL-12)
    source: reviewer
""", 1))
    flips, n = diff_plans(load_plan(planned), load_plan(new), inventory)
    assert n == len(inventory.tests)
    assert {fl.test_id for fl in flips} == {OPS + "test_compare_cpu_softmax_snpu_" + d for d in
                                            ("bfloat16", "float16", "float32", "float64")}
    md = render_markdown(flips, n)
    assert "4 of" in md and "run → **xfail**" in md and "skip → **xfail**" in md and "INTERNAL-12" in md
    inventory.write(tmp_path / "inv.json")
    code, out, err = cli("select", "diff", planned, new, "--inventory", tmp_path / "inv.json")
    assert code == 0 and "| `" + OPS + "test_compare_cpu_softmax_snpu_float32` |" in out


def test_explain_names_entry_shadowed_entries_and_history(planned, tmp_path):
    f = planned / "test_fixture_ops.yaml"
    f.write_text(f.read_text().replace("tests:\n", """tests:
  - id: TestFixtureOpsPRIVATEUSE1::test_compare_cpu_add_snpu_float32
    mode: skip
    reason: add float32 hangs (INTERNAL-9)
    source: reviewer
""", 1))
    hist = tmp_path / "history.jsonl"
    hist.write_text(json.dumps({"id": OPS + "test_compare_cpu_add_snpu_float32", "outcome": "failed", "run": "r7",
                                "error": "TimeoutError"}) + "\n")
    info = explain(load_plan(planned), OPS + "test_compare_cpu_add_snpu_float32", hist)
    assert (info["mode"], info["source"]) == ("skip", "reviewer")
    assert info["also_matching"] and info["also_matching"][0]["source"] == "rules"
    assert info["history"][0]["run"] == "r7"


def test_spyre_export_then_import_round_trips_modes(planned, inventory, tmp_path):
    text, notes = export_spyre(load_plan(planned), inventory)
    assert notes == []
    assert "mandatory_success" in text and "${TORCH_ROOT}/test/test_fixture_ops.py" in text
    assert "# [dtype-support] snpu does not support dtype float64" in text
    files, notes = import_spyre(text, "snpu", "spyre.yaml")
    assert "test/test_fixture_ops.py" in files
    out = tmp_path / "imported"
    from crcr.contracts.plan import plan_path_for

    for up, body in files.items():
        p = plan_path_for(out, up)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body)
    a, b = load_plan(planned), load_plan(out)
    for t in inventory.tests:
        assert a.resolve(t.id).mode == b.resolve(t.id).mode, t.id
    assert b.resolve(DEV + "test_cuda_streams_snpu").source == "reviewer"


def test_spyre_import_of_their_format():
    text = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_binary_ufuncs.py
      unlisted_test_mode: skip
      tests:
        - names:
            - TestBinaryUfuncs::test_scalar_support
          mode: xfail
          edits: {dtypes: {exclude: [{name: bfloat16}]}}
        - names: [generate_not_implemented_tests]
          mode: mandatory_success
  global: {supported_dtypes: [{name: float16}]}
"""
    files, notes = import_spyre(text, "spyre")
    plan_text = files["test/test_binary_ufuncs.py"]
    from crcr.contracts.plan import parse_plan_file

    pf = parse_plan_file(plan_text)
    d = pf.resolve("TestBinaryUfuncsPRIVATEUSE1::test_scalar_support_snpu_float16")
    assert d.mode == "xfail" and "dtype/op edits" in d.reason
    assert pf.resolve("TestBinaryUfuncsPRIVATEUSE1::test_other_snpu").mode == "skip"
    assert any("generate_not_implemented_tests" in n for n in notes)


DIFF = """diff --git a/aten/src/ATen/native/SoftMax.cpp b/aten/src/ATen/native/SoftMax.cpp
--- a/aten/src/ATen/native/SoftMax.cpp
+++ b/aten/src/ATen/native/SoftMax.cpp
@@ -120,7 +120,7 @@ TORCH_IMPL_FUNC(softmax_cpu_out)
-  auto dim_ = maybe_wrap_dim(dim, input.dim());
+  auto dim_ = maybe_wrap_dim(dim, input_.dim());
diff --git a/test/test_fixture_ops.py b/test/test_fixture_ops.py
--- a/test/test_fixture_ops.py
+++ b/test/test_fixture_ops.py
@@ -40,6 +40,7 @@ class TestFixtureDevice(TestCase):
     def test_add_plain(self, device):
         a = torch.ones(3, device=device)
+        a = a * 2
         torch.add(a, a)
"""


def test_pick_ranks_edited_tests_and_touched_ops_within_budget(planned, inventory):
    ctx = PickContext(parse_diff(DIFF), pr_text="Fix softmax dim wrapping", failures={OPS + "test_compare_cpu_sin_snpu_float32": 2})
    result = pick(load_plan(planned), inventory, ctx, budget_s=6.0)
    ids = [t.id for t in result.tests]
    assert ids[0] == DEV + "test_add_plain_snpu"
    assert "[edited-test]" in result.tests[0].reason
    softmax = [t for t in result.tests if "softmax" in t.id]
    assert softmax and all("[op-touched] the diff's hunks touch op softmax" in t.reason for t in softmax)  # softmax_cpu_out
    assert all(load_plan(planned).resolve(i).mode == "run" for i in ids)
    assert sum(t.estimated_s for t in result.tests) <= 6.0
    assert result.dropped and any("budget" in d.reason for d in result.dropped)


def test_pick_via_cli_writes_a_pick_file(planned, inventory, tmp_path, cli):
    inventory.write(tmp_path / "inv.json")
    (tmp_path / "pr.diff").write_text(DIFF)
    code, out, err = cli("select", "pick", "--diff", tmp_path / "pr.diff", "--inventory", tmp_path / "inv.json",
                         "--plan", planned, "--out", tmp_path / "pick.json", "--budget", "100")
    assert code == 0, err
    p = load_pick(tmp_path / "pick.json")
    assert p.backend == "snpu" and p.tests and all(t.reason for t in p.tests)
    first = json.loads((tmp_path / "pick.json").read_text())["tests"][0]
    assert first["id"] == DEV + "test_add_plain_snpu"
