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
    code, out, err = cli("select", "inventory", "--pytorch-src", UPSTREAM, "--out", inv)
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
