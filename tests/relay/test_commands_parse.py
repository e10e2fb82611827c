"""Parsing ``/ci`` comments and reading the allowlist's ``crcr.trust`` / ``crcr.commands``."""

from __future__ import annotations

import pytest

from crcr.errors import ConfigError
from relay.allowlist import parse_allowlist_text
from relay.commands import MAX_COMMANDS, parse_comment
from relay.trust import PermissionCache, TrustConfig, parse_trust, role_from_api

PLAIN = "L1: [org/a]\nL4:\n  - org/b: oncall1\n"


def names(body):
    return [(p.name, p.args) for p in parse_comment(body)]


def test_whole_line_commands_with_arguments():
    body = "Thanks!\n/ci run npu org/b\r\n  /ci status\n/ci select b\n/ci help\n/ci retry\n"
    assert names(body) == [("run", ("npu", "org/b")), ("status", ()), ("select", ("b",)), ("help", ()),
                           ("retry", ())]


def test_quotes_fences_indented_code_and_mid_line_mentions_are_not_commands():
    body = "> /ci run\n```\n/ci cancel\n```\n~~~\n/ci cancel\n~~~\n    /ci cancel\n\t/ci cancel\nsee /ci run\n/ci status"
    assert names(body) == [("status", ())]
    # an unclosed fence swallows the rest, as Markdown renders it
    assert names("```\n/ci run") == []


def test_invalid_commands_say_why():
    (p,) = parse_comment("/ci")
    assert p.error == "no command given"
    (p,) = parse_comment("/ci status now")
    assert p.error == "`/ci status` takes no arguments"
    (p,) = parse_comment("/ci select a b")
    assert p.error == "`/ci select` takes at most 1 backend(s)"
    (p,) = parse_comment("/ci run ok $(x)")
    assert not p.valid and "$" not in p.error


def test_duplicates_dropped_and_count_capped():
    assert names("/ci run\n/ci run\n/ci run") == [("run", ())]
    assert len(parse_comment("\n".join(f"/ci run b{i}" for i in range(100)))) == MAX_COMMANDS
    assert parse_comment(None) == [] and parse_comment(12) == []


def test_plain_allowlist_has_gating_off_and_a_crcr_section_turns_it_on():
    assert parse_allowlist_text(PLAIN).trust.gating is False
    on = parse_allowlist_text(PLAIN + "crcr:\n  targets:\n    org/b: {untrusted: true}\n")
    assert on.trust.gating is True
    off = parse_allowlist_text(PLAIN + "crcr:\n  trust: {gating: false}\n")
    assert off.trust.gating is False


def test_trust_keys_are_read_and_checked():
    allow = parse_allowlist_text(PLAIN + "crcr:\n  trust:\n    trusted_users: [Alice]\n"
                                 "    approval_label: ok-to-test\n    untrusted_associations: [none]\n"
                                 "    permission_cache_s: 5\n")
    t = allow.trust
    assert t.trusted_user("alice") and t.approval_label == "ok-to-test" and t.permission_cache_s == 5
    assert t.author_untrusted("NONE", []) and not t.author_untrusted("NONE", ["ok-to-test"])
    assert not t.author_untrusted("FIRST_TIMER", [])
    for bad in ("gating: yes-please", "trusted_users: ['bad name']", "approval_label: ciflow/crcr/npu",
                "permission_cache_s: -1", "unknown: 1"):
        with pytest.raises(ConfigError, match="crcr.trust"):
            parse_allowlist_text(PLAIN + f"crcr:\n  trust:\n    {bad}\n")


def test_select_config_names_allowlisted_repos_only():
    ok = parse_allowlist_text(PLAIN + "crcr:\n  commands:\n    select:\n      org/b: {backend: snpu, plan: p, "
                              "inventory: i.json, budget_s: 60}\n")
    assert ok.commands.select["org/b"].budget_s == 60
    with pytest.raises(ConfigError, match="not in L1..L4"):
        parse_allowlist_text(PLAIN + "crcr:\n  commands:\n    select:\n      org/z: {backend: s, plan: p, inventory: i}\n")


def test_permission_cache_asks_github_once_per_ttl_and_never_for_bots_or_the_list():
    calls = []
    now = [0.0]

    def fetch(repo, login):
        calls.append(login)
        return "maintain"

    cache = PermissionCache(fetch, clock=lambda: now[0])
    trust = parse_trust({"trusted_users": ["friend"], "permission_cache_s": 10}, has_crcr_section=True)
    assert cache.check("o/r", "Maint", trust).allowed and cache.check("o/r", "maint", trust).allowed
    now[0] = 11
    assert cache.check("o/r", "maint", trust).allowed
    assert calls == ["Maint", "maint"]
    assert cache.check("o/r", "friend", trust).role == "trusted-list"
    assert not cache.check("o/r", "renovate[bot]", trust).allowed
    assert calls == ["Maint", "maint"]


def test_role_from_the_api_answer():
    assert role_from_api({"permission": "write", "role_name": "maintain"}) == "maintain"
    assert role_from_api({"permission": "read", "role_name": "triage"}) == "triage"
    assert role_from_api({"permission": "admin"}) == "admin"
    assert role_from_api("junk") == "none"
    assert TrustConfig().gating is False
