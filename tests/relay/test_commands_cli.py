"""``crcr held list`` and ``crcr commands list`` show what a relay held and what commands did."""

from __future__ import annotations

import json

from crcr.settings import get_settings
from tests.fakes.github import FakeGitHub
from tests.relay.commands_harness import SHA_A, UPSTREAM, command_relay, pr_event
from tests.relay.test_cli_relay import env, run  # noqa: F401 - the CLI environment fixture


def test_held_and_commands_lists(env, capsys):  # noqa: F811
    tmp_path = env
    with FakeGitHub() as gh, command_relay(tmp_path, gh) as h:
        gh.set_permission(UPSTREAM, "maint", "maintain")
        gh.set_pull(UPSTREAM, 7, SHA_A)
        gh.set_pull(UPSTREAM, 8, SHA_A)
        h.webhook("pull_request", pr_event(number=7))
        h.webhook("pull_request", pr_event(number=8))
        h.comment("/ci run", number=8)
        h.comment("/ci nope", number=7, login="reader")
    get_settings.cache_clear()
    code, out, _ = run(["held", "list", "--json"], capsys)
    assert code == 0, (out, _)
    held = json.loads(out)
    assert code == 0 and sorted((r["pr"], r["target"]) for r in held) == [(7, "org/l2"), (7, "org/l3")]
    assert {r["head_sha"] for r in held} == {SHA_A}
    code, out, _ = run(["held", "list", "--pr", "8", "--json"], capsys)
    assert json.loads(out) == []
    code, out, _ = run(["dispatches", "list", "--state", "awaiting", "--json"], capsys)
    assert code == 0 and sorted(r["target"] for r in json.loads(out)) == ["org/l2", "org/l3"]
    code, out, _ = run(["commands", "list", "--json"], capsys)
    cmds = json.loads(out)
    assert [(c["pr"], c["command"], c["outcome"], c["commenter"]) for c in cmds] == [
        (7, "invalid", "invalid", "reader"), (8, "run", "done", "maint")]
    code, out, _ = run(["commands", "list"], capsys)
    assert code == 0 and "/ci run" in out and "2 command(s)" in out
