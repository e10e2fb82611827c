"""Held dispatches and commands on SQLite and PostgreSQL: concurrent approvals release once."""

from __future__ import annotations

import threading

from relay import approval
from tests.fakes.github import FakeGitHub
from tests.relay.commands_harness import SHA_A, UPSTREAM, command_relay, pr_event


def test_concurrent_approvals_dispatch_each_held_target_once(tmp_path, database_url):
    with FakeGitHub() as gh, command_relay(tmp_path, gh, database_url=database_url) as h:
        gh.set_permission(UPSTREAM, "maint", "maintain")
        gh.set_pull(UPSTREAM, 7, SHA_A)
        h.webhook("pull_request", pr_event())
        results: list[approval.Released] = []
        start = threading.Barrier(4)

        def approve():
            start.wait()
            results.append(approval.release(h.runtime, 7, SHA_A))

        threads = [threading.Thread(target=approve) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(t for r in results for t in r.released) == ["org/l2", "org/l3"]
        assert sorted(h.sent_to()) == ["org/l2", "org/l3", "org/l4"]
        # and a comment redelivered under a new delivery id is still handled once
        payload = h.comment("/ci status")
        h.webhook("issue_comment", payload)
        assert [c.command for c in h.commands()] == ["status"]
        assert h.commands()[0].comment_id == payload["comment"]["id"] > 2**31  # a 64-bit comment id
