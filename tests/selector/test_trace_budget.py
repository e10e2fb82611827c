"""The CPU trace's time budget: ``crcr select plan --trace-budget S`` traces in a fixed order until S seconds are
spent, plans the rest without a trace and says so (reasons, summary, --json), and a re-plan continues from the
cache until the plan is fully traced."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from crcr.contracts.inventory import Inventory
from selector.tracebudget import budget_note, trace_order
from tests.selector.reading_fixtures import device_test

CLS = "TestBudgetPRIVATEUSE1"
FILE = "test/test_budget.py"

SRC = '''
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestBudget(TestCase):
    @dtypes(torch.float32, torch.int64)
    def test_add(self, device, dtype):
        x = torch.ones(3, device=device, dtype=dtype)
        self.assertEqual((x + x).sum().item(), 6)

    @dtypes(torch.float32, torch.int64)
    def test_mul(self, device, dtype):
        x = torch.ones(3, device=device, dtype=dtype)
        self.assertEqual((x * x).sum().item(), 3)

    def _double(self, device):
        return torch.arange(4, device=device, dtype=torch.float64)

    def test_helper_double(self, device):
        self.assertEqual(self._double(device).sum().item(), 6)


instantiate_device_type_tests(TestBudget, globals())

if __name__ == "__main__":
    run_tests()
'''

TESTS = [device_test(FILE, CLS, "test_add", "float32"), device_test(FILE, CLS, "test_add", "int64"),
         device_test(FILE, CLS, "test_mul", "int64"), device_test(FILE, CLS, "test_mul", "float32"),
         device_test(FILE, CLS, "test_helper_double", None)]
# one test per body first (float32 where there is one), then the other dtype variants; by id within each round
ORDER = ["test_add_snpu_float32", "test_helper_double_snpu", "test_mul_snpu_float32", "test_add_snpu_int64",
         "test_mul_snpu_int64"]


def test_the_order_takes_one_test_per_body_first_and_plain_tests_before_opinfo():
    from crcr.contracts.inventory import InventoryTest

    def opinfo(template: str, op: str, dtype: str) -> InventoryTest:
        name = f"{template}_{op}_snpu_{dtype}"
        return InventoryTest(id=f"{FILE}::{CLS}::{name}", file=FILE, cls=CLS, method=name, template=template,
                             device="snpu", dtype=dtype, op=op, fingerprint="f" + name)

    made = [*TESTS, opinfo("test_quick", "abs", "float64"), opinfo("test_quick", "abs", "float32"),
            opinfo("test_quick", "neg", "int32")]
    orders = set()
    for seed in range(5):  # the same tests in any order give the same order
        shuffled = list(made)
        random.Random(seed).shuffle(shuffled)
        orders.add(tuple(t.method for t in trace_order(shuffled)))
    assert orders == {(*ORDER[:3], "test_quick_abs_snpu_float32", "test_quick_neg_snpu_int32", *ORDER[3:],
                       "test_quick_abs_snpu_float64")}


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "src"
    (src / "test").mkdir(parents=True)
    (src / FILE).write_text(SRC, encoding="utf-8")
    inv = tmp_path / "inv.json"
    Inventory(source="pytorch-src", device="snpu", tests=TESTS).write(inv)
    return src, inv


class _Clock:
    """The budget's clock, moved by chunks instead of seconds: the budget is spent once ``allowed`` trace
    children have finished, whatever the machine's load (the children themselves are real)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, chunk: int = 1) -> None:
        import crcr.cli.select as select

        self.done = 0
        self.allowed = 0
        real = select._trace_chunk

        def counted(*args, **kwargs):
            got = real(*args, **kwargs)
            self.done += 1
            return got

        monkeypatch.setattr(select, "TRACE_CHUNK", chunk)
        monkeypatch.setattr(select, "_trace_chunk", counted)
        monkeypatch.setattr(select, "_clock", lambda: 1e6 if self.done >= self.allowed else 0.0)


def _plan(cli, src: Path, inv: Path, out: Path, *flags: str) -> tuple[dict, dict[str, tuple[str, str]], str]:
    from crcr.contracts.plan import load_plan

    code, stdout, err = cli("select", "plan", "-b", "snpu", "--inventory", inv, "--pytorch-src", src, "--out", out,
                            "--json", *flags)
    assert code == 0, err
    plan = load_plan(out)
    return json.loads(stdout)["cpu_trace"], {t.method: (plan.resolve(t.id).mode, plan.resolve(t.id).reason)
                                             for t in TESTS}, err


def test_a_spent_budget_leaves_the_rest_to_the_static_reading_and_a_replan_continues(cli, checkout, tmp_path,
                                                                                      monkeypatch):
    src, inv = checkout
    clock = _Clock(monkeypatch)
    note = budget_note(100)
    seen = []
    for round_ in range(3):
        clock.allowed = clock.done + 2
        counts, plan, err = _plan(cli, src, inv, tmp_path / "plan", "--trace-budget", "100")
        seen.append(plan)
        traced = min(5, 2 * (round_ + 1))
        assert counts == {"wanted": 5, "traced": traced, "from_cache": 2 * round_, "run": traced - 2 * round_,
                          "untraced_budget": 5 - traced, "budget_s": 100.0, "jobs": 1, "seconds": counts["seconds"],
                          "outcomes": {"passed": traced}, "kind": "device-shadow"}, err
        assert f"cpu trace: traced {traced} of 5 tests" in err
        assert (f"{5 - traced} decided without a trace: budget 100 s spent" in err) is (traced < 5), err
        # progress per child: tests traced of those to trace, and the budget left
        assert f"cpu trace: 1/{5 - 2 * round_} device-shadow runs traced ({FILE}), 100 s of the 100 s budget left" in err
        for method, (mode, reason) in plan.items():
            assert (note in reason) is (method not in ORDER[:traced]), (method, reason)
        assert "warning" not in err
    # the first plan traced the first two of the order: the helper's float64 tensor is found (the static
    # reading of the body cannot see it), test_mul's float32 variant is read statically
    assert seen[0]["test_helper_double_snpu"][0] == "skip" and "float64" in seen[0]["test_helper_double_snpu"][1]
    assert "no CPU trace (" + note + "); static reading" in seen[0]["test_mul_snpu_float32"][1]
    # the third plan is the fully traced plan: the same as one traced without a budget, two children at once
    clock.allowed = 10**6
    counts, unlimited, err = _plan(cli, src, inv, tmp_path / "unlimited", "--trace-budget", "0", "--trace-jobs", "2",
                                   "--no-cache")
    assert counts["traced"] == 5 and counts["jobs"] == 2
    assert seen[2] == unlimited


def test_budget_zero_is_no_budget(cli, checkout, tmp_path, monkeypatch):
    src, inv = checkout
    _Clock(monkeypatch, chunk=2).allowed = 1  # the clock says a long time has passed after the first child
    counts, plan, err = _plan(cli, src, inv, tmp_path / "plan", "--trace-budget", "0")
    assert counts["traced"] == 5 and counts["untraced_budget"] == 0, err
    assert "s budget" not in err and "without a trace" not in err, err
    assert not any("not traced" in reason for _, reason in plan.values())


def test_a_budget_spent_before_any_trace_warns_and_still_plans(cli, checkout, tmp_path):
    """A real clock: the first child is stopped after half a second (torch alone takes longer to import), its
    unfinished test is no crash, and the plan says loudly that nothing was traced."""
    src, inv = checkout
    counts, plan, err = _plan(cli, src, inv, tmp_path / "plan", "--trace-budget", "0.5")
    assert counts["traced"] == 0 and counts["untraced_budget"] == 5, err
    assert "warning: cpu trace: the budget of 0.5 s was spent before any test was traced: all 5 are planned " \
           "from the static reading" in err
    assert all(budget_note(0.5) in reason for _, reason in plan.values()), plan
    assert plan["test_helper_double_snpu"][0] == "run"  # the static reading cannot see the helper's float64
    cached = [json.loads(p.read_text()) for p in (tmp_path / "data" / "selector").glob("cpu-trace-*.json")]
    assert all(rec["outcome"] != "crashed" for c in cached for rec in c.values()), cached


def test_a_rule_decision_of_an_untraced_generic_opinfo_test_says_so():
    """OpInfo tests of a generic template left untraced are decided by their template probe; the reason says
    their trace was wanted and the budget ran out."""
    from selector.agent.offline import OfflineAgent
    from selector.agent.tools import Tools
    from selector.capabilities import load_capabilities
    from selector.plan import classify_tests
    from selector.rules import RuleContext
    from tests.selector.test_cpu_trace_opinfo import PROBE_ERROR, ROOT, opinfo_test

    test = opinfo_test("test_transform")
    caps = load_capabilities(ROOT / "configs" / "backends" / "snpu.yaml")
    caps.attach_probes({"samples|fft.fft|float32": PROBE_ERROR})
    tools = Tools(caps, {test.id: test}, None)
    digests = []
    for untraced in ({}, {test.id: budget_note(60)}):
        caps.attach_cpu_traces({}, untraced)
        digests.append(caps.digest)
        decided = classify_tests([test], RuleContext(caps, dtype_reaches=tools.dtype_reaches), OfflineAgent(), tools)
        reason = decided[test.id].reason
        assert decided[test.id].mode == "skip" and "[template-probe]" in reason, reason
        assert (budget_note(60) in reason) is bool(untraced), reason
    assert digests[0] != digests[1]  # a plan cached before the budget ran out is not reused


def test_an_agent_reason_that_does_not_say_it_gets_the_note():
    """The Claude agent writes its own reasons: a test its trace budget left untraced still says so."""
    from selector.agent.base import AgentAnswer, Usage
    from selector.agent.tools import Tools
    from selector.capabilities import load_capabilities
    from selector.plan import classify_tests
    from selector.rules import RuleContext
    from tests.selector.test_cpu_trace_opinfo import ROOT

    class Answers:
        name = "claude"

        def decide(self, tests, tools):
            return {t.id: AgentAnswer(id=t.id, mode="run", confidence="medium",
                                      reason="[agent:claude] adds and sums: snpu has both kernels") for t in tests}, Usage()

    test = TESTS[0]
    caps = load_capabilities(ROOT / "configs" / "backends" / "snpu.yaml")
    caps.attach_cpu_traces({}, {test.id: budget_note(60)})
    tools = Tools(caps, {test.id: test}, None)
    decided = classify_tests([test], RuleContext(caps, dtype_reaches=tools.dtype_reaches), Answers(), tools)
    assert decided[test.id].reason == f"[agent:claude] adds and sums: snpu has both kernels ({budget_note(60)})"
