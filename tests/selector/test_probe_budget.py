"""The template probes' time budget: ``crcr select plan --probe-budget S`` probes in a fixed order until S seconds
are spent, plans the tests of the probes left from the capability file and says so (reasons, summary, --json), and a
re-plan continues from the probe cache until every probe has run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from crcr.contracts.inventory import Inventory, InventoryTest
from selector.probebudget import probe_budget_note, probe_order

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "selector"
CLS = "TestCommonPRIVATEUSE1"


def _out_test(op: str, dtype: str) -> InventoryTest:
    method = f"test_out_{op}_snpu_{dtype}"
    return InventoryTest(id=f"test/test_ops.py::{CLS}::{method}", file="test/test_ops.py", cls=CLS, method=method,
                         template="test_out", device="snpu", dtype=dtype, op=op, fingerprint="f" + method)


# the out= probes these tests need, in the budget's order: one per op first (float32), then the other dtypes
TESTS = [_out_test("add", "int32"), _out_test("mul", "float32"), _out_test("add", "float32")]
ORDER = ["test_out_add_snpu_float32", "test_out_mul_snpu_float32", "test_out_add_snpu_int32"]


def test_the_order_takes_one_probe_per_op_first_and_attrs_before_all():
    made = [("samples", "sub", "int32"), ("out", "add", "int32"), ("samples", "sub", None), ("out", "add", "float32"),
            ("dtypes", "add", None), ("attrs", "sub", "domain"), ("out", "mul", "bfloat16"), ("out", "add", "int32")]
    orders = set()
    for seed in range(5):  # the same requests in any order give the same order, each once
        shuffled = list(made)
        random.Random(seed).shuffle(shuffled)
        orders.add(tuple(probe_order(shuffled)))
    assert orders == {(("attrs", "sub", "domain"), ("dtypes", "add", None), ("out", "add", "float32"),
                       ("out", "mul", "bfloat16"), ("samples", "sub", None), ("out", "add", "int32"),
                       ("samples", "sub", "int32"))}


class _Clock:
    """The budget's clock, moved by probe children instead of seconds: the budget is spent once ``allowed``
    children (one probe each) have finished, whatever the machine's load (the probes themselves are real)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import crcr.cli.select as select

        self.done = 0
        self.allowed = 0
        real = select._probe_chunk

        def counted(*args, **kwargs):
            got = real(*args, **kwargs)
            self.done += 1
            return got

        monkeypatch.setattr(select, "PROBE_CHUNK", 1)
        monkeypatch.setattr(select, "_probe_chunk", counted)
        monkeypatch.setattr(select, "_clock", lambda: 1e6 if self.done >= self.allowed else 0.0)


def _plan(cli, inv: Path, out: Path, *flags: str) -> tuple[int, str, str]:
    return cli("select", "plan", "-b", "snpu", "--inventory", inv, "--capabilities", FIX / "snpu-capabilities.yaml",
               "--disabled", FIX / "disabled-tests.json", "--out", out, *flags)


def test_a_spent_probe_budget_leaves_the_rest_to_the_capability_file_and_a_replan_continues(cli, tmp_path,
                                                                                           monkeypatch):
    from crcr.contracts.plan import load_plan

    inv = tmp_path / "inv.json"
    Inventory(source="pytorch-src", device="snpu", tests=TESTS).write(inv)
    clock = _Clock(monkeypatch)
    note = probe_budget_note(100)
    for round_ in range(3):
        clock.allowed = clock.done + 1
        code, stdout, err = _plan(cli, inv, tmp_path / "plan", "--json", "--probe-budget", "100")
        assert code == 0, err
        counts = json.loads(stdout)["template_probes"]
        probed = round_ + 1
        assert {k: counts[k] for k in ("wanted", "probed", "cached", "run", "unprobed", "lost")} == {
            "wanted": 3, "probed": probed, "cached": round_, "run": 1, "unprobed": 3 - probed, "lost": 0}
        assert f"template probes: probed {probed} of 3 needed ({round_} from cache, 1 run" in err
        plan = load_plan(tmp_path / "plan")
        by_method = {t.method: plan.resolve(t.id) for t in TESTS}
        for i, method in enumerate(ORDER):
            d = by_method[method]
            if i < probed:  # its probe ran (this plan or an earlier one, from the cache): the probe decides
                assert "the out probe" in d.reason and note not in d.reason, (round_, method, d.reason)
            else:  # its turn did not come: the capability file decides, and the reason says why
                assert "has a kernel for op" in d.reason and d.reason.endswith(f"({note})"), (round_, method,
                                                                                             d.reason)
    # fully probed: recorded as up to date, so the next plan has nothing to do
    code, stdout, err = _plan(cli, inv, tmp_path / "plan")
    assert code == 0 and "is up to date" in stdout and clock.done == 3


def test_a_budget_spent_before_the_first_probe_warns_and_plans_every_test_from_the_capability_file(cli, tmp_path):
    """A real clock: the child is stopped after half a second (torch alone takes longer to import), and the plan
    says loudly that nothing was probed."""
    from crcr.contracts.plan import load_plan

    inv = tmp_path / "inv.json"
    Inventory(source="pytorch-src", device="snpu", tests=TESTS).write(inv)
    code, stdout, err = _plan(cli, inv, tmp_path / "plan", "--json", "--probe-budget", "0.5")
    assert code == 0, err
    counts = json.loads(stdout)["template_probes"]
    assert (counts["probed"], counts["unprobed"], counts["run"], counts["lost"]) == (0, 3, 0, 0), err
    assert "warning: template probes: the budget of 0.5 s was spent before any probe ran" in err
    plan = load_plan(tmp_path / "plan")
    assert all(plan.resolve(t.id).reason.endswith(f"({probe_budget_note(0.5)})") for t in TESTS)


def test_the_budget_comes_from_the_environment_and_zero_is_no_budget(cli, tmp_path, monkeypatch):
    from crcr.settings import get_settings

    inv = tmp_path / "inv.json"
    Inventory(source="pytorch-src", device="snpu", tests=TESTS).write(inv)
    clock = _Clock(monkeypatch)
    clock.allowed = 1  # the clock says a long time has passed after the first child
    monkeypatch.setenv("CRCR_SELECT_PROBE_BUDGET_S", "100")
    get_settings.cache_clear()
    code, stdout, err = _plan(cli, inv, tmp_path / "plan", "--json")
    assert code == 0, err
    assert json.loads(stdout)["template_probes"]["unprobed"] == 2
    code, stdout, err = _plan(cli, inv, tmp_path / "plan", "--json", "--probe-budget", "0")
    counts = json.loads(stdout)["template_probes"]
    assert (counts["probed"], counts["cached"], counts["run"], counts["unprobed"]) == (3, 1, 2, 0), err
    assert "budget" not in err, err
