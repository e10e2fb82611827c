"""Commenter permission x PR author trust x command: exactly the right dispatches,
reactions, labels and replies; and hostile comments change nothing."""

from __future__ import annotations

import pytest

from tests.fakes.github import FakeGitHub
from tests.relay.commands_harness import SHA_A, UPSTREAM, command_relay, comment_event, pr_event

ROLES = ["admin", "maintain", "write", "triage", "read", "none", "trusted-list"]
ALLOWED = {"admin", "maintain", "write", "trusted-list"}


def dispatched_for(gh: FakeGitHub, pr: int) -> list[str]:
    out = []
    for r in gh.dispatches():
        payload = r.body["client_payload"]["payload"]
        if r.status == 204 and payload.get("number") == pr:
            out.append(r.path.split("/")[2] + "/" + r.path.split("/")[3])
    return sorted(out)


@pytest.mark.parametrize("author", ["MEMBER", "NONE"])
@pytest.mark.parametrize("role", ROLES)
def test_permission_by_trust_by_command(tmp_path, role, author):
    login = "friend" if role == "trusted-list" else f"user-{role}"
    with FakeGitHub() as gh, command_relay(tmp_path, gh) as h:
        if role != "trusted-list":
            gh.set_permission(UPSTREAM, login, role)
        for pr in (11, 12, 13, 14):
            gh.set_pull(UPSTREAM, pr, SHA_A)
            h.webhook("pull_request", pr_event(number=pr, association=author))
        at_open = {pr: dispatched_for(gh, pr) for pr in (11, 12, 13, 14)}
        untrusted, allowed = author == "NONE", role in ALLOWED
        assert at_open[11] == (["org/l4"] if untrusted else ["org/l2", "org/l3", "org/l4"])

        comments = {pr: h.comment(body, login=login, number=pr)["comment"]["id"]
                    for pr, body in ((11, "/ci run"), (12, "/ci status"), (13, "/ci help"), (14, "/ci bogus"))}

        def reactions(pr):
            return gh.reactions_on(UPSTREAM, comments[pr])

        def reply(pr):
            bodies = [c["body"] for c in h.replies(pr)]
            assert len(bodies) <= 1
            return bodies[0] if bodies else None

        # /ci run: releases the held targets only for an allowed commenter on an untrusted PR
        released = sorted(set(dispatched_for(gh, 11)) - set(at_open[11]))
        assert released == (["org/l2", "org/l3"] if allowed and untrusted else [])
        assert len(dispatched_for(gh, 11)) == len(at_open[11]) + len(released)  # each target once
        assert gh.state.labels.get((UPSTREAM, 11), []) == (["crcr/ok-to-test"] if allowed and untrusted else [])
        assert reactions(11) == ["eyes", "rocket" if allowed else "confused"]
        if not allowed:
            assert reply(11).count("Sorry, `/ci run` needs write, maintain or admin permission") == 1
        elif untrusted:
            assert reply(11) is None
        else:
            assert "nothing is waiting for approval" in reply(11)

        # /ci status: a table for the allowed, a polite refusal for the others
        assert reactions(12) == ["eyes", "rocket" if allowed else "confused"]
        assert ("| org/l4 | L4 |" in reply(12)) == allowed
        assert ("Sorry, `/ci status`" in reply(12)) == (not allowed)

        # /ci help: anyone
        assert reactions(13) == ["eyes", "rocket"] and "`/ci cancel [backend ...]`" in reply(13)
        # unknown command: what is valid
        assert reactions(14) == ["eyes", "confused"] and "unknown command `bogus`" in reply(14)

        # nothing but /ci run dispatched anything
        for pr in (12, 13, 14):
            assert dispatched_for(gh, pr) == at_open[pr]
        # the permission was asked of GitHub once for all four comments (cached), never for the trusted list
        lookups = gh.calls("GET", r"/collaborators/.+/permission$")
        assert len(lookups) == (0 if role == "trusted-list" else 1)
        outcomes = [(c.pr_number, c.command, c.outcome) for c in h.commands()]
        run_outcome = "done" if allowed else "refused"
        assert outcomes == [(11, "run", run_outcome), (12, "status", run_outcome), (13, "help", "done"),
                            (14, "invalid", "invalid")]


@pytest.fixture
def h(tmp_path):
    with FakeGitHub() as gh, command_relay(tmp_path, gh) as h:
        gh.set_permission(UPSTREAM, "maint", "maintain")
        gh.set_pull(UPSTREAM, 7, SHA_A)
        h.webhook("pull_request", pr_event())
        yield h


def test_one_megabyte_comment_no_crash_and_commands_past_githubs_limit_are_ignored(h):
    late = comment_event("x" * 1_000_000 + "\n/ci run\n")
    assert h.webhook("issue_comment", late).status_code == 200
    assert h.commands() == [] and dispatched_for(h.gh, 7) == ["org/l4"]
    early = comment_event("/ci run\n" + ("y" * 100 + "\n") * 10_000)
    h.webhook("issue_comment", early)
    assert dispatched_for(h.gh, 7) == ["org/l2", "org/l3", "org/l4"]


def test_thousands_of_ci_run_lines_release_once(h):
    c = h.comment("/ci run\n" * 5000)
    assert [x.command for x in h.commands()] == ["run"]
    assert dispatched_for(h.gh, 7) == ["org/l2", "org/l3", "org/l4"]
    assert h.gh.reactions_on(UPSTREAM, c["comment"]["id"]) == ["eyes", "rocket"]


def test_many_different_commands_are_capped(h):
    h.comment("\n".join(f"/ci run l{i}" for i in range(3000)))
    assert len(h.commands()) == 5  # relay/commands.MAX_COMMANDS
    assert dispatched_for(h.gh, 7) == ["org/l2", "org/l3", "org/l4"]  # l2 and l3 were among the first five


@pytest.mark.parametrize("body", [
    "\uff0fci run",  # fullwidth solidus
    "/\u0441i run",  # Cyrillic es
    "/c\u0456 run",  # Cyrillic i
    "/ci\u200b run",  # zero-width space
    "\u202e/ci run",  # right-to-left override
    "\uff0f\uff43\uff49 run",  # fullwidth /ci
])
def test_unicode_look_alikes_are_not_commands(h, body):
    h.comment(body)
    assert h.commands() == [] and dispatched_for(h.gh, 7) == ["org/l4"]


@pytest.mark.parametrize("args", [
    "../../etc/passwd", "$(reboot)", "`id`", "org/l2;rm -rf /", "a|b", "l2 && curl x", "-rf", "--plan=/etc",
    "org/l2/../../x", "~root", "npu\x00", "%2e%2e",
])
def test_backend_names_with_path_or_shell_characters_change_nothing(h, args):
    for command in ("run", "select", "cancel", "retry"):
        h.comment(f"/ci {command} {args}")
    assert dispatched_for(h.gh, 7) == ["org/l4"]
    assert len(h.rows("awaiting")) == 2
    assert {c.outcome for c in h.commands()} == {"invalid"}
    (reply,) = h.replies()
    for hostile in ("$(", "`id`", ";rm", "|b", "&&", "../", "\x00", "~root", "%2e"):
        assert hostile not in reply["body"].split("\n", 1)[1]
