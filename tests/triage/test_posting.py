"""Posting through the GitHub seam (real PyGithub against the local fake GitHub): dry-run by
default, once per (backend, suspect), kill switch, per-PR opt-out label, never a revert."""

from __future__ import annotations

from pathlib import Path

import pytest

from crcr.github import GitHubApp
from crcr.store.migrate import upgrade
from crcr.store.session import engine_for, sessions_for
from tests.fakes.github import FakeGitHub
from triage.bisect import analyze
from triage.history import load_yaml
from triage.posting import PostingConfig, publish
from triage.report import markdown, verdict
from triage.rules import load_rules

HISTORIES = Path(__file__).parent / "histories"


@pytest.fixture
def gh():
    with FakeGitHub() as fake:
        fake.add_issue("pytorch/pytorch", 205, title="Make cumsum use a new accumulate type")
        yield fake


@pytest.fixture
def sessions(tmp_path):
    engine = engine_for(f"sqlite:///{tmp_path / 'crcr.db'}")
    upgrade(engine)
    yield sessions_for(engine)
    engine.dispose()


def report_of(name: str):
    a = analyze(load_yaml(HISTORIES / f"{name}.yaml"), load_rules())
    return a, markdown(a, verdict(a))


def writes(gh: FakeGitHub) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in gh.requests if r.method != "GET" and "access_tokens" not in r.path]


def test_dry_run_is_the_default_and_touches_nothing(gh, sessions):
    a, text = report_of("race_two_prs")
    lines = publish(a, text, PostingConfig(issue_repo="acme/torch-npu", comment_upstream=True), sessions=sessions)
    assert lines == ["dry-run: would open an issue in acme/torch-npu: crcr triage: upstream commit breaks "
                     "acme/torch-npu at 7c0000000004 (pytorch PR #205)",
                     "dry-run: would comment on pytorch/pytorch#205"]
    assert gh.requests == []


def test_posts_issue_and_upstream_comment_once_per_suspect(gh, sessions):
    app = GitHubApp(gh.app_id, gh.private_key_pem, gh.url)
    a, text = report_of("race_two_prs")
    config = PostingConfig(dry_run=False, issue_repo="acme/torch-npu", comment_upstream=True)
    first = publish(a, text, config, sessions=sessions, client_for_repo=app.client_for_repo)
    assert first[0].startswith("opened issue https://github.com/acme/torch-npu/issues/1")
    assert first[1].startswith("commented on https://github.com/pytorch/pytorch/issues/205#issuecomment-")
    issue = gh.state.issues[("acme/torch-npu", 1)]
    assert "Revert the upstream PR" in issue["body"] and "7c0000000004" in issue["title"]
    assert [c["number"] for c in gh.state.comments] == [205]
    second = publish(a, text, config, sessions=sessions, client_for_repo=app.client_for_repo)
    assert all(line.startswith("already posted") for line in second)
    assert len(gh.state.comments) == 1 and len([k for k in gh.state.issues if k[0] == "acme/torch-npu"]) == 1
    # crcr never reverts: only an issue and a comment were ever written
    assert {p for _, p in writes(gh)} == {"/repos/acme/torch-npu/issues", "/repos/pytorch/pytorch/issues/205/comments"}


def test_kill_switch_posts_nothing(gh, sessions, monkeypatch):
    monkeypatch.setenv("CRCR_TRIAGE_POSTING", "off")
    a, text = report_of("race_two_prs")
    config = PostingConfig.from_env(dry_run=False, issue_repo="acme/torch-npu", comment_upstream=True)
    assert publish(a, text, config, sessions=sessions) == ["posting is switched off (CRCR_TRIAGE_POSTING=off): nothing posted"]
    assert gh.requests == []


def test_opt_out_label_on_the_upstream_pr_stops_the_comment(gh, sessions):
    gh.add_issue("pytorch/pytorch", 205, labels=["crcr/no-triage"])
    app = GitHubApp(gh.app_id, gh.private_key_pem, gh.url)
    a, text = report_of("race_two_prs")
    lines = publish(a, text, PostingConfig(dry_run=False, comment_upstream=True), sessions=sessions,
                    client_for_repo=app.client_for_repo)
    assert lines == ["pytorch/pytorch#205 carries the opt-out label 'crcr/no-triage': no comment"]
    assert gh.state.comments == []


@pytest.mark.parametrize("name", ["flaky_same_commit", "recovered", "ghstack_stack_gap", "pending_is_not_green"])
def test_calls_nobody_acts_on_are_not_posted(gh, sessions, name):
    a, text = report_of(name)
    lines = publish(a, text, PostingConfig(dry_run=False, issue_repo="acme/torch-npu", comment_upstream=True),
                    sessions=sessions)
    assert lines[0].startswith("nothing to post")
    assert gh.requests == []


def test_infra_ticket_goes_to_the_backend_repo_only(gh, sessions):
    app = GitHubApp(gh.app_id, gh.private_key_pem, gh.url)
    a, text = report_of("runner_pool_outage")
    lines = publish(a, text, PostingConfig(dry_run=False, issue_repo="acme/torch-npu", comment_upstream=True),
                    sessions=sessions, client_for_repo=app.client_for_repo)
    assert len(lines) == 1 and lines[0].startswith("opened issue")
    assert gh.state.comments == []


def test_a_failed_post_is_released_for_the_next_run(gh, sessions):
    from crcr.errors import ExternalError

    app = GitHubApp(gh.app_id, gh.private_key_pem, gh.url)
    a, text = report_of("race_two_prs")
    config = PostingConfig(dry_run=False, issue_repo="acme/torch-npu")
    gh.add_fault("POST", r"/issues$", status=500, times=1)
    with pytest.raises(ExternalError):
        publish(a, text, config, sessions=sessions, client_for_repo=app.client_for_repo)
    assert publish(a, text, config, sessions=sessions, client_for_repo=app.client_for_repo)[0].startswith("opened issue")
