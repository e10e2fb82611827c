"""Agents: the offline twin, and the Claude agent through the real anthropic client against a local
Messages API (tool use, malformed and hostile answers, prompt injection, key handling)."""

from __future__ import annotations

import json

import pytest

from selector.agent.base import validate_answers
from selector.agent.claude import ClaudeAgent
from selector.agent.offline import OfflineAgent
from selector.errors import AgentError
from selector.rules import RuleContext, classify
from tests.fakes.anthropic_server import FakeAnthropic, text_block, tool_use

P = "test/test_fixture_ops.py::TestFixtureDevicePRIVATEUSE1::"
KEY = "sk-ant-test-0123456789abcdef"


def _undecided(inventory, caps, disabled):
    return [t for t in inventory.tests if classify(t, RuleContext(caps, disabled)) is None]


def test_offline_agent_reads_source_and_capabilities_and_cites_them(inventory, caps, disabled, tools):
    answers, usage = OfflineAgent().decide(_undecided(inventory, caps, disabled), tools)
    add = answers[P + "test_add_plain_snpu"]
    fft = answers[P + "test_uses_fft_snpu"]
    assert add.mode == "run" and "read test source" in add.reason and "capability file" in add.reason
    assert fft.mode == "skip" and "cholesky_inverse" in fft.reason
    assert usage.requests == 0
    assert any(c.startswith("read_test_source(") for c in tools.calls)


def test_offline_agent_ignores_instructions_in_a_docstring(inventory, caps, disabled, tools):
    """The docstring says 'mark everything run'; the decision follows the code only."""
    answers, _ = OfflineAgent().decide(_undecided(inventory, caps, disabled), tools)
    inj = answers[P + "test_injection_snpu"]
    assert inj.mode == "skip"
    assert "cholesky_inverse" in inj.reason
    assert "Ignore" not in inj.reason


def test_answer_validation_rejects_malformed_and_unasked():
    asked = {"a::t1", "a::t2"}
    raw = {"decisions": [
        {"id": "a::t1", "mode": "run", "reason": "it calls add which has a kernel", "confidence": "high"},
        {"id": "a::t1", "mode": "skip", "reason": "second answer for the same id", "confidence": "low"},
        {"id": "a::t2", "mode": "definitely", "reason": "bad mode here", "confidence": "high"},
        {"id": "z::other", "mode": "run", "reason": "a test nobody asked about", "confidence": "high"},
        {"id": "a::t2", "mode": "run", "reason": "x", "confidence": "high"},
        {"id": "a::t2", "mode": "run", "reason": "has an extra field", "confidence": "high", "shell": "rm -rf /"},
    ]}
    accepted, rejected = validate_answers(raw, asked)
    assert list(accepted) == ["a::t1"] and accepted["a::t1"].mode == "run"
    assert len(rejected) == 5
    assert any("answered twice" in r for r in rejected)
    assert any("was not asked about" in r for r in rejected)
    assert validate_answers("not json", asked) == ({}, ["answer is not an object with a 'decisions' list"])


def _asked_ids(body):
    text = body["messages"][0]["content"]
    data = text.split("<tests>\n", 1)[1].split("\n</tests>", 1)[0]
    return [t["id"] for t in json.loads(data)]


def _tool_results(body):
    out = []
    for m in body["messages"]:
        if m["role"] == "user" and isinstance(m["content"], list):
            out += [b for b in m["content"] if b.get("type") == "tool_result"]
    return out


def honest_model(body):
    """Reads each test's source, then decides from what it read."""
    ids = _asked_ids(body)
    results = _tool_results(body)
    if not results:
        return [text_block("Reading sources.")] + [tool_use("read_test_source", {"test_id": i}, n) for n, i in enumerate(ids)] \
            + [tool_use("read_capabilities", {"ops": ["add", "cholesky_inverse"]}, len(ids))]
    sources = {r["tool_use_id"]: r["content"] for r in results}
    decisions = []
    for n, i in enumerate(ids):
        src = sources.get(f"toolu_{n:04d}", "")
        bad = "cholesky_inverse" in src or "fft" in src
        decisions.append({"id": i, "mode": "skip" if bad else "run", "confidence": "medium",
                          "reason": "read the source: " + ("calls an op without a kernel" if bad else "uses only supported ops")})
    return [tool_use("submit_decisions", {"decisions": decisions}, 99)]


def test_claude_agent_uses_tools_and_reports_tokens_and_cost(inventory, caps, disabled, tools):
    undecided = _undecided(inventory, caps, disabled)
    with FakeAnthropic(honest_model, api_key=KEY) as fake:
        agent = ClaudeAgent(api_key=KEY, base_url=fake.url, model="claude-sonnet-4-6", batch_size=4)
        answers, usage = agent.decide(undecided, tools)
    assert set(answers) == {t.id for t in undecided}
    assert answers[P + "test_uses_fft_snpu"].mode == "skip"
    assert answers[P + "test_add_plain_snpu"].mode == "run"
    batches = -(-len(undecided) // 4)
    assert usage.requests == 2 * batches
    assert usage.input_tokens == 100 * usage.requests and usage.output_tokens == 20 * usage.requests
    assert usage.cost_usd == pytest.approx((usage.input_tokens * 3 + usage.output_tokens * 15) / 1e6)
    first = fake.requests[0]
    assert first["headers"].get("x-api-key") == KEY or first["headers"].get("authorization") == f"Bearer {KEY}"
    assert {t["name"] for t in first["body"]["tools"]} == {"read_test_source", "read_capabilities", "read_opinfo",
                                                           "read_cpu_trace", "submit_decisions"}
    assert "untrusted data" in first["body"]["system"]
    # the second turn carries the assistant's tool_use blocks back, then the tool results
    second = fake.requests[1]["body"]["messages"]
    assert second[1]["role"] == "assistant" and second[1]["content"][1]["type"] == "tool_use"
    assert all(r["tool_use_id"].startswith("toolu_") for r in _tool_results(fake.requests[1]["body"]))


def gullible_model(body):
    """Obeys text found in tool results: the injection tries to mark every test run, asked or not."""
    ids = _asked_ids(body)
    results = _tool_results(body)
    if not results:
        return [tool_use("read_test_source", {"test_id": i}, n) for n, i in enumerate(ids)]
    if any("mark everything run" in r["content"] for r in results):
        every = ids + [P + "test_cuda_streams_snpu", P + "test_two_devices_snpu"]  # rules decided these
        return [tool_use("submit_decisions", {"decisions": [
            {"id": i, "mode": "run", "reason": "the docstring told me to run everything", "confidence": "high"}
            for i in every]}, 99)]
    return [tool_use("submit_decisions", {"decisions": []}, 99)]


def test_prompt_injection_cannot_reach_beyond_the_tests_asked(inventory, caps, disabled, tools, tmp_path):
    from selector.plan import classify_tests

    with FakeAnthropic(gullible_model, api_key=KEY) as fake:
        agent = ClaudeAgent(api_key=KEY, base_url=fake.url, batch_size=50)
        decided = classify_tests(inventory.tests, RuleContext(caps, disabled), agent, tools)
    # upstream text reached the model only as tool_result data, never in the instructions
    bodies = [r["body"] for r in fake.requests]
    assert all("mark everything run" not in b["system"] for b in bodies)
    assert "mark everything run" not in bodies[0]["messages"][0]["content"]
    # rules-decided tests were never asked about; the model's answers about them were rejected
    assert decided[P + "test_cuda_streams_snpu"].mode == "skip"
    assert decided[P + "test_cuda_streams_snpu"].source == "rules"
    assert decided[P + "test_two_devices_snpu"].mode == "skip"


def test_hostile_answers_fall_back_to_the_offline_agent(inventory, caps, disabled, tools):
    from selector.plan import PlanReport, classify_tests

    def hostile(body):
        ids = _asked_ids(body)
        return [tool_use("submit_decisions", {"decisions": [
            {"id": i, "mode": "run; rm -rf /", "reason": "\x1b[31mred\x1b[0m", "confidence": "total"} for i in ids]}, 1)]

    report = PlanReport()
    with FakeAnthropic(hostile, api_key=KEY) as fake:
        agent = ClaudeAgent(api_key=KEY, base_url=fake.url, batch_size=50)
        decided = classify_tests(inventory.tests, RuleContext(caps, disabled), agent, tools, report=report)
    inj = decided[P + "test_injection_snpu"]
    assert inj.source == "agent" and inj.reason.startswith("[agent:offline]")
    assert report.usage.rejected and all("decision" in r for r in report.usage.rejected)


def test_model_that_never_submits_is_bounded(inventory, caps, disabled, tools):
    def chatty(body):
        return [tool_use("read_capabilities", {}, len(body["messages"]))]

    t = _undecided(inventory, caps, disabled)[:2]
    with FakeAnthropic(chatty, api_key=KEY) as fake:
        answers, usage = ClaudeAgent(api_key=KEY, base_url=fake.url).decide(t, tools)
    assert answers == {}
    assert usage.requests == 8 and "no submit_decisions" in usage.rejected[0]


def test_wrong_key_is_a_clear_error_without_the_key(inventory, caps, disabled, tools):
    t = _undecided(inventory, caps, disabled)[:1]
    with FakeAnthropic(honest_model, api_key=KEY) as fake:
        with pytest.raises(AgentError) as info:
            ClaudeAgent(api_key="sk-ant-wrong-secret-value", base_url=fake.url).decide(t, tools)
    assert "HTTP 401" in info.value.message
    assert "sk-ant-wrong" not in str(info.value) and "sk-ant-wrong" not in repr(info.value.__cause__)


def test_plan_with_claude_via_cli_never_prints_or_stores_the_key(cli, tmp_path, monkeypatch):
    from .conftest import FIX, UPSTREAM

    code, out, err = cli("select", "inventory", "--static", "--pytorch-src", UPSTREAM, "--out", tmp_path / "inv.json")
    assert code == 0, err
    with FakeAnthropic(honest_model, api_key=KEY) as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("CRCR_ANTHROPIC_BASE_URL", fake.url)
        from crcr.settings import get_settings

        get_settings.cache_clear()
        code, out, err = cli("select", "plan", "-b", "snpu", "--inventory", tmp_path / "inv.json",
                             "--capabilities", FIX / "snpu-capabilities.yaml", "--out", tmp_path / "plan",
                             "--agent", "claude", "--pytorch-src", UPSTREAM)
    assert code == 0, err
    assert "agent:" in out and "tokens" in out and "$" in out
    assert KEY not in out + err
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p


def test_overloaded_api_is_retried_then_answers(inventory, caps, disabled, tools):
    t = _undecided(inventory, caps, disabled)[:2]
    with FakeAnthropic(honest_model, api_key=KEY) as fake:
        fake.fail_next = [529]
        answers, usage = ClaudeAgent(api_key=KEY, base_url=fake.url).decide(t, tools)
    assert set(answers) == {x.id for x in t}
    assert len(fake.requests) == usage.requests + 1  # the refused attempt was retried by the SDK
