"""The crcr select command line: help everywhere, errors without tracebacks, the plan flow end to end."""

from __future__ import annotations

import pytest

from .conftest import FIX, UPSTREAM

COMMANDS = ["inventory", "plan", "upgrade", "refine", "explain", "export", "import", "check", "diff", "pick", "evaluate"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_explains_itself(cli, command):
    code, out, err = cli("select", command, "--help")
    assert code == 0
    assert len(out) > 300 and "Usage:" in out


def test_missing_inventory_is_a_clear_input_error(cli, tmp_path):
    code, out, err = cli("select", "plan", "-b", "snpu", "--inventory", tmp_path / "nope.json",
                         "--capabilities", FIX / "snpu-capabilities.yaml", "--out", tmp_path / "p")
    assert code == 2
    assert "error[bad-input]" in err and "nope.json does not exist" in err and "Traceback" not in err


def test_missing_capability_file_says_how_to_make_one(cli, tmp_path):
    code, out, err = cli("select", "plan", "-b", "nosuchbackend", "--inventory", tmp_path / "x.json", "--out", tmp_path / "p")
    assert code == 2 and "capability file configs/backends/nosuchbackend.yaml does not exist" in err


def test_inventory_plan_replan_explain_flow(cli, tmp_path):
    inv = tmp_path / "inv.json"
    code, out, err = cli("select", "inventory", "--static", "--pytorch-src", UPSTREAM, "--out", inv)
    assert code == 0, err
    assert "tests in 3 files (pytorch-src, test)" in out
    args = ["select", "plan", "-b", "snpu", "--inventory", inv, "--capabilities", FIX / "snpu-capabilities.yaml",
            "--out", tmp_path / "plan", "--pytorch-src", UPSTREAM]
    code, out, err = cli(*args)
    assert code == 0, err
    assert "3 written" in out and "by source" in out
    code, out, err = cli(*args)
    assert code == 0 and "is up to date" in out
    code, out, err = cli("select", "explain", "test/test_fixture_ops.py::TestFixtureDevicePRIVATEUSE1::test_two_devices_snpu",
                         "--plan", tmp_path / "plan")
    assert code == 0
    assert "mode:     skip" in out and "[device-restriction] @deviceCountAtLeast(2)" in out
    code, out, err = cli("select", "explain", "not-an-id", "--plan", tmp_path / "plan")
    assert code == 2 and "has no '::'" in err


@pytest.mark.slow
def test_embedded_inventory_through_the_runners_cli_on_a_slice(cli, tmp_path):
    """The selector never imports the runners: it runs `crcr run --collect-only` and reads the file."""
    inv = tmp_path / "embedded.json"
    code, out, err = cli("select", "inventory", "--file", "test/test_modules.py", "-k", "nn_Linear", "--out", inv)
    assert code == 0, err
    assert "(embedded, test)" in out
    from crcr.contracts.inventory import load_inventory

    tests = load_inventory(inv).tests
    assert tests and all(t.id.startswith("test/test_modules.py::TestModulePRIVATEUSE1::") for t in tests)
    code, out, err = cli("select", "plan", "-b", "snpu", "--inventory", inv, "--capabilities",
                         FIX / "snpu-capabilities-generated-shape.yaml", "--out", tmp_path / "plan")
    assert code == 0, err
    assert "by source: {'agent':" in out  # ModuleInfo tests are the agent's to read


@pytest.mark.slow
def test_checkout_inventory_is_collected_and_import_failures_exit_1(cli, tmp_path):
    """With torch importable, --pytorch-src is pytest's collection; a file that does not import is a record."""
    from crcr.contracts.inventory import load_inventory

    old_tree = FIX.parent / "pytorch_tree_old"
    inv = tmp_path / "inv.json"
    code, out, err = cli("select", "inventory", "--pytorch-src", old_tree, "--device", "cpu", "--out", inv)
    assert code == 1
    assert "error[import-failed]" in err and "test/test_ops.py does not import on torch" in err
    inventory = load_inventory(inv)
    assert [t.id for t in inventory.tests] == ["test/test_fine.py::TestFineCPU::test_ones_cpu_float32"]
    assert inventory.errors[0].missing == "skip"
    # planning it writes the plan for what imports, and still exits 1 naming the file
    code, out, err = cli("select", "plan", "-b", "snpu", "--inventory", inv, "--capabilities",
                         FIX / "snpu-capabilities.yaml", "--out", tmp_path / "plan")
    assert code == 1 and (tmp_path / "plan" / "test_fine.yaml").is_file()
    assert "the plan in" in err and "test/test_ops.py does not import" in err


@pytest.mark.slow
def test_agreement_prints_jaccard_of_static_against_collected_per_file(cli, tmp_path):
    tree = FIX.parent / "pytorch_tree"
    code, out, err = cli("select", "inventory", "--pytorch-src", tree, "--device", "cpu", "--agreement",
                         "--file", "test/test_torch.py", "--out", tmp_path / "inv.json")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("test/test_torch.py"))
    static, collected, both, jaccard = row.split()[1:]
    assert int(collected) > 0 and 0.0 <= float(jaccard) <= 1.0
    assert abs(float(jaccard) - int(both) / (int(static) + int(collected) - int(both))) < 1e-3
