"""Upgrade (plan diff after a version change) and refine (results -> modes with evidence)."""

from __future__ import annotations

import json

from crcr.contracts.plan import load_plan
from crcr.contracts.results import RunMeta, RunResults, TestResult
from selector.agent.offline import OfflineAgent
from selector.plan import run_plan
from selector.refine import accuracy, refine

from .conftest import FIX

OPS = "test/test_fixture_ops.py::TestFixtureOpsPRIVATEUSE1::"
DEV = "test/test_fixture_ops.py::TestFixtureDevicePRIVATEUSE1::"


def _results(run_id, tests, sha="abc123"):
    return RunResults(run=RunMeta(run_id=run_id, device="snpu", upstream_sha=sha), tests=[TestResult(**t) for t in tests])


def _planned(inventory, caps, disabled, tools, tmp_path):
    out = tmp_path / "snpu"
    run_plan(inventory, backend="snpu", out_dir=out, caps=caps, disabled=disabled, agent=OfflineAgent(), tools=tools,
             data_dir=None)
    return out


def test_refine_failures_xpasses_and_flakes(inventory, caps, disabled, tools, tmp_path):
    out = _planned(inventory, caps, disabled, tools, tmp_path)
    path = out / "test_fixture_ops.yaml"
    path.write_text(path.read_text().replace("tests:\n", """tests:
  - id: TestFixtureDevicePRIVATEUSE1::test_matmul_floats_snpu_float32
    mode: run
    reason: a reviewer insists
    source: reviewer
  - id: TestFixtureDevicePRIVATEUSE1::test_softmax_dtypes_snpu_float32
    mode: xfail
    reason: failed in an earlier run
    source: logs
""", 1))
    r1 = _results("run-1", [
        {"id": OPS + "test_compare_cpu_sin_snpu_float32", "outcome": "failed", "error_class": "NotImplementedError",
         "message": "NotImplementedError: aten::sin.out is not implemented for snpu"},
        {"id": OPS + "test_compare_cpu_exp_snpu_float16", "outcome": "failed", "error_class": "AssertionError",
         "message": "Tensor-likes are not close!\nMismatched elements: 3 / 4"},
        {"id": DEV + "test_softmax_dtypes_snpu_float32", "outcome": "xpassed"},
        {"id": DEV + "test_add_plain_snpu", "outcome": "passed"},
        {"id": DEV + "test_matmul_floats_snpu_float32", "outcome": "failed", "error_class": "RuntimeError", "message": "boom"},
        {"id": OPS + "test_compare_cpu_abs_snpu_int32", "outcome": "passed"},
        {"id": OPS + "test_compare_cpu_cholesky_inverse_snpu_float32", "outcome": "passed"},
    ])
    r2 = _results("run-2", [{"id": OPS + "test_compare_cpu_abs_snpu_int32", "outcome": "failed", "error_class": "AssertionError",
                              "message": "off by one"}])
    plan = load_plan(out)
    before = accuracy(plan, [r1])
    report = refine(out, plan, [r1, r2], history=tmp_path / "history.jsonl")
    plan = load_plan(out)
    sin = plan.resolve(OPS + "test_compare_cpu_sin_snpu_float32")
    assert (sin.mode, sin.source) == ("skip", "logs")
    assert sin.entry.evidence.error == "NotImplementedError" and sin.entry.evidence.run == "run-1"
    assert "not implemented" in sin.entry.evidence.excerpt
    exp = plan.resolve(OPS + "test_compare_cpu_exp_snpu_float16")
    assert exp.mode == "xfail" and exp.entry.evidence.excerpt == "Tensor-likes are not close!"
    soft = plan.resolve(DEV + "test_softmax_dtypes_snpu_float32")
    assert soft.mode == "xfail" and soft.entry.proposal == "run" and "promotion" in soft.reason
    flaky = plan.resolve(OPS + "test_compare_cpu_abs_snpu_int32")
    assert flaky.mode == "xfail" and "flaky" in flaky.reason and "abc123" in flaky.reason
    reviewer = plan.resolve(DEV + "test_matmul_floats_snpu_float32")
    assert (reviewer.mode, reviewer.source) == ("run", "reviewer")
    assert any("test_matmul_floats_snpu_float32" in c for c in report.reviewer_conflicts)
    assert plan.resolve(DEV + "test_add_plain_snpu").source == "agent"  # a pass confirms; nothing written
    chol = plan.resolve(OPS + "test_compare_cpu_cholesky_inverse_snpu_float32")  # rules said skip; it passed
    assert (chol.mode, chol.source) == ("run", "logs") and "planned skip but passed" in chol.reason
    after = accuracy(plan, [r1])
    assert after["accuracy"] > before["accuracy"]
    rows = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert {"id": OPS + "test_compare_cpu_abs_snpu_int32", "outcome": "failed"}.items() <= rows[-1].items() or any(
        r["run"] == "run-2" for r in rows)


def test_refine_twice_is_stable(inventory, caps, disabled, tools, tmp_path):
    out = _planned(inventory, caps, disabled, tools, tmp_path)
    r = _results("run-1", [{"id": OPS + "test_compare_cpu_sin_snpu_float32", "outcome": "failed",
                            "error_class": "NotImplementedError", "message": "not implemented"}])
    refine(out, load_plan(out), [r])
    snapshot = {p: p.read_bytes() for p in out.rglob("*.yaml")}
    refine(out, load_plan(out), [r])
    assert snapshot == {p: p.read_bytes() for p in out.rglob("*.yaml")}


def test_upgrade_replans_only_changed_and_shows_the_diff(cli, tmp_path):
    """Two versions of the fixture tree: one test changed, one added, one removed."""
    import shutil

    from .conftest import UPSTREAM

    old_root, new_root = tmp_path / "old", tmp_path / "new"
    shutil.copytree(UPSTREAM, old_root)
    shutil.copytree(UPSTREAM, new_root)
    f = new_root / "test" / "test_fixture_ops.py"
    text = f.read_text()
    text = text.replace("x.cholesky_inverse()\n", "torch.add(x, x)\n")  # changed: now runs
    text = text.replace("    def test_compiled(self, device):\n        torch.compile(torch.sin)(torch.ones(2, device=device))\n",
                        "    def test_new_thing(self, device):\n        torch.exp(torch.ones(2, device=device))\n")
    f.write_text(text)
    caps = FIX / "snpu-capabilities.yaml"
    for name, root in (("old", old_root), ("new", new_root)):
        code, out, err = cli("select", "inventory", "--static", "--pytorch-src", root, "--out", tmp_path / f"{name}.json")
        assert code == 0, err
    plan_dir = tmp_path / "plan"
    code, out, err = cli("select", "plan", "-b", "snpu", "--inventory", tmp_path / "old.json", "--capabilities", caps,
                         "--out", plan_dir, "--pytorch-src", old_root)
    assert code == 0, err
    ops_yaml = plan_dir / "test_fixture_ops.yaml"
    ops_yaml.write_text(ops_yaml.read_text().replace("tests:\n", "tests:\n  # keep\n" + """  - id: TestFixtureDevicePRIVATEUSE1::test_add_plain_snpu
    mode: skip
    reason: reviewer override
    source: reviewer
""", 1))
    # another machine: no decision cache; unchanged tests keep the plan's decisions anyway
    for cached in (tmp_path / "data" / "selector").glob("plan-*.json"):
        cached.unlink()
    code, out, err = cli("select", "upgrade", "--from", tmp_path / "old.json", "--to", tmp_path / "new.json",
                         "-b", "snpu", "--capabilities", caps, "--out", plan_dir, "--pytorch-src", new_root)
    assert code == 0, err
    assert "added 1, removed 1, changed 1" in out
    assert "tests: 2 re-evaluated (added or changed)" in out
    assert "re-planned: 2 re-evaluated tests classified again; " in err
    assert "for the first time" not in err  # every unchanged test kept the plan's decision
    assert "test_injection_snpu" in out and "skip → **run**" in out  # the plan diff, as Markdown
    assert "test_new_thing" in out
    assert "  # keep\n  - id: TestFixtureDevicePRIVATEUSE1::test_add_plain_snpu\n    mode: skip\n" in ops_yaml.read_text()


def test_upgrade_counts_one_set_of_re_evaluated_tests(cli, tmp_path):
    """Unchanged tests the previous plan never decided are named apart, not added to "re-evaluated"."""
    import shutil

    from .conftest import UPSTREAM

    old_root, new_root = tmp_path / "old", tmp_path / "new"
    shutil.copytree(UPSTREAM, old_root)
    shutil.copytree(UPSTREAM, new_root)
    f = new_root / "test" / "test_fixture_ops.py"
    f.write_text(f.read_text().replace("x.cholesky_inverse()\n", "torch.add(x, x)\n"))
    caps = FIX / "snpu-capabilities.yaml"
    for name, root in (("old", old_root), ("new", new_root)):
        code, out, err = cli("select", "inventory", "--static", "--pytorch-src", root, "--out", tmp_path / f"{name}.json")
        assert code == 0, err
    plan_dir = tmp_path / "plan"
    code, out, err = cli("select", "plan", "-b", "snpu", "--inventory", tmp_path / "old.json", "--capabilities", caps,
                         "--out", plan_dir, "--pytorch-src", old_root)
    assert code == 0, err
    plain_yaml = plan_dir / "test_fixture_plain.yaml"
    assert plain_yaml.is_file()
    plain_yaml.unlink()  # the previous plan holds no decision for this file's (unchanged) tests
    for cached in (tmp_path / "data" / "selector").glob("plan-*.json"):
        cached.unlink()
    from crcr.contracts.inventory import load_inventory

    n_plain = sum(1 for t in load_inventory(tmp_path / "new.json").tests if t.file == "test/test_fixture_plain.py")
    code, out, err = cli("select", "upgrade", "--from", tmp_path / "old.json", "--to", tmp_path / "new.json",
                         "-b", "snpu", "--capabilities", caps, "--out", plan_dir, "--pytorch-src", new_root)
    assert code == 0, err
    assert "changed 1," in out and "tests: 1 re-evaluated (added or changed)" in out
    assert (f"re-planned: 1 re-evaluated tests classified again; {n_plain} unchanged tests classified for the first "
            "time (no bot decision for them in the previous plan)") in err
