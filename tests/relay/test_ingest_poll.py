"""``crcr ingest poll``: PRs and trunk pushes read through the API (the fake GitHub) and fed,
signed, to the relay's real intake; conditional requests, rate limits, resuming."""

from __future__ import annotations

import time

import httpx
import pytest
import requests

from relay.ingest_poll import Poller, PollState
from tests.fakes.github import FakeGitHub
from tests.relay.commands_harness import UPSTREAM, command_relay
from tests.relay.test_cli_relay import env, run  # noqa: F401 - the CLI environment fixture

OLD, NEW, NEWER = "1" * 40, "2" * 40, "3" * 40


def installation_token(gh: FakeGitHub) -> str:
    import jwt

    now = int(time.time())
    app_jwt = jwt.encode({"iat": now - 60, "exp": now + 500, "iss": gh.app_id}, gh.private_key_pem, algorithm="RS256")
    r = requests.post(f"{gh.url}/app/installations/1/access_tokens", headers={"Authorization": f"Bearer {app_jwt}"},
                      timeout=5)
    return r.json()["token"]


@pytest.fixture
def setup(tmp_path):
    with FakeGitHub() as gh, command_relay(tmp_path, gh) as h:
        gh.set_pull(UPSTREAM, 7, "a" * 40, association="MEMBER")
        gh.set_pull(UPSTREAM, 8, "b" * 40, association="NONE")
        gh.set_branch(UPSTREAM, "main", OLD)
        client = httpx.Client(base_url=gh.url, headers={"Authorization": f"token {installation_token(gh)}"})

        def poller() -> Poller:
            return Poller(UPSTREAM, github=client, relay=h.client, secret=b"s3cret",
                          state_path=tmp_path / "ingest" / "pytorch__pytorch.json")

        yield gh, h, poller
        client.close()


def test_first_round_records_then_changes_become_deliveries(setup):
    gh, h, poller = setup
    p = poller()
    first = p.poll_once()
    assert (first.recorded, first.delivered, h.sent_to()) == (3, [], [])

    gh.set_pull(UPSTREAM, 7, "c" * 40, association="MEMBER")  # a new push to PR 7
    gh.set_pull(UPSTREAM, 9, "d" * 40, association="FIRST_TIMER", author="newcomer")  # a new PR
    gh.set_branch(UPSTREAM, "main", NEW, files=["torch/csrc/api.cpp"])
    second = p.poll_once()
    assert second.delivered == [f"poll:{UPSTREAM}:pr:7:{'c' * 40}", f"poll:{UPSTREAM}:pr:9:{'d' * 40}",
                                f"poll:{UPSTREAM}:push:{NEW}"]
    # the same intake: routing, trust gating (PR 9 is held), path filters (l1 takes pushes only)
    assert sorted(h.sent_to()) == ["org/l1", "org/l2", "org/l2", "org/l3", "org/l3", "org/l4", "org/l4", "org/l4"]
    assert sorted(d.target for d in h.rows("awaiting")) == ["org/l2", "org/l3"]
    with h.runtime.sessions() as s:
        from crcr.store.deliveries import Delivery

        push = s.get(Delivery, f"poll:{UPSTREAM}:push:{NEW}")
        sync = s.get(Delivery, f"poll:{UPSTREAM}:pr:7:{'c' * 40}")
        assert (push.event, push.head_sha, push.ref) == ("push", NEW, "refs/heads/main")
        assert (sync.action, sync.pr_number, sync.head_sha) == ("synchronize", 7, "c" * 40)

    third = p.poll_once()  # nothing changed: both conditional requests answered 304
    assert (third.delivered, third.not_modified) == ([], 2)
    assert [r.headers.get("if-none-match") is not None for r in gh.calls("GET", r"/pulls$")] == [False, True, True]


def test_a_round_repeated_after_a_crash_dispatches_nothing_twice(setup):
    gh, h, poller = setup
    poller().poll_once()
    gh.set_pull(UPSTREAM, 7, "c" * 40, association="MEMBER")
    p = poller()
    assert len(p.poll_once().delivered) == 1
    sent = h.sent_to()
    # the process died after delivering but before saving: the state on disk is older
    state = PollState.load(p.state_path)
    state.prs["7"], state.etags = "a" * 40, {}
    state.save(p.state_path)
    again = poller().poll_once()  # a new process resumes from the file
    assert (again.delivered, again.duplicates) == ([], 1)
    assert h.sent_to() == sent


def test_rate_limit_low_stops_the_round_and_says_when_to_resume(setup):
    gh, h, poller = setup
    p = poller()
    p.poll_once()
    gh.rate_remaining, gh.rate_reset = 20, time.time() + 900
    gh.set_branch(UPSTREAM, "main", NEW, files=["a.py"])
    report = p.poll_once()
    assert report.wait_until == int(gh.rate_reset) and report.delivered == []  # trunk not read this round
    gh.rate_remaining = 0
    gh.add_fault("GET", r"/pulls$", status=403)
    report = p.poll_once()
    assert report.wait_until == int(gh.rate_reset) and report.error is None
    gh.rate_remaining = 4999
    assert p.poll_once().delivered == [f"poll:{UPSTREAM}:push:{NEW}"]


def test_cli_without_a_token_is_bad_input(env, capsys, monkeypatch):  # noqa: F811
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("CRCR_GITHUB_TOKEN", raising=False)
    code, _, err = run(["ingest", "poll", "--repo", "pytorch/pytorch", "--once"], capsys)
    assert code == 2 and "no GitHub token" in err
    code, _, err = run(["ingest", "poll", "--repo", "../etc", "--once"], capsys)
    assert code == 2 and "is not owner/repo" in err
