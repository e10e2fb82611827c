"""``/ci`` commands and trust gating end to end: signed webhooks in, the real relay,
PyGithub against the fake GitHub, dispatches / reactions / replies out."""

from __future__ import annotations

import copy
import datetime as dt
import json

import pytest

from relay import checks
from tests.conftest import WEBHOOKS
from tests.fakes.github import FakeGitHub
from tests.relay.commands_harness import (
    PLAIN_ALLOWLIST,
    SHA_A,
    SHA_B,
    UPSTREAM,
    command_relay,
    comment_event,
    pr_event,
)

CHECK_RERUN = json.loads((WEBHOOKS / "octokit-webhooks/check_run/rerequested.payload.json").read_text())
assert CHECK_RERUN["check_run"]["pull_requests"] == []  # octokit's example names no PR


@pytest.fixture
def gh():
    with FakeGitHub() as fake:
        fake.set_permission(UPSTREAM, "maint", "maintain")
        fake.set_permission(UPSTREAM, "reader", "read")
        fake.set_pull(UPSTREAM, 7, SHA_A)
        yield fake


@pytest.fixture
def h(tmp_path, gh):
    with command_relay(tmp_path, gh) as h:
        yield h


def test_untrusted_pr_is_held_visible_counted_and_released_once_by_ci_run(h, gh):
    r = h.webhook("pull_request", pr_event(association="FIRST_TIME_CONTRIBUTOR"))
    assert r.json()["held"] == 2
    assert h.sent_to() == ["org/l4"]  # the one target that opts in to untrusted code
    assert sorted(d.target for d in h.rows("awaiting")) == ["org/l2", "org/l3"]
    metrics = h.client.get("/metrics").text
    assert 'crcr_dispatch_rows{state="awaiting"} 2.0' in metrics
    assert "crcr_held_targets_total 2.0" in metrics

    c = h.comment("Looks safe to me.\n/ci run\n")
    assert sorted(h.sent_to()) == ["org/l2", "org/l3", "org/l4"]
    assert h.rows("awaiting") == []
    assert gh.state.labels[(UPSTREAM, 7)] == ["crcr/ok-to-test"]  # the approval stays visible
    assert gh.reactions_on(UPSTREAM, c["comment"]["id"]) == ["eyes", "rocket"]
    assert h.replies() == []  # a successful run says it with a reaction only
    (cmd,) = h.commands()
    assert (cmd.command, cmd.outcome, cmd.head_sha, cmd.permission) == ("run", "done", SHA_A, "maintain")

    h.webhook("issue_comment", c)  # the same comment again under a new delivery id: handled once
    h.comment("/ci run")  # a second approval: nothing left to release
    assert sorted(h.sent_to()) == ["org/l2", "org/l3", "org/l4"]
    assert len(h.commands()) == 2
    (reply,) = h.replies()
    assert "nothing is waiting for approval" in reply["body"]


def test_approval_rechecks_the_head_sha_and_supersedes_older_pushes(h, gh):
    h.webhook("pull_request", pr_event(sha=SHA_A))
    sync = h.webhook("pull_request", pr_event("synchronize", sha=SHA_B)).json()["delivery_id"]
    gh.set_pull(UPSTREAM, 7, SHA_B)  # what GitHub says the PR holds now
    h.comment("/ci run")
    released = [d for d in h.rows() if d.state == "sent" and d.target in ("org/l2", "org/l3")]
    assert {d.delivery_id for d in released} == {sync}
    assert sorted(d.target for d in h.rows("superseded")) == ["org/l2", "org/l3"]
    assert h.commands()[0].head_sha == SHA_B


def test_approval_label_from_a_maintainer_releases_and_keeps_later_pushes_approved(h, gh):
    h.webhook("pull_request", pr_event())
    h.webhook("pull_request", pr_event("labeled", label="crcr/ok-to-test", labels=["crcr/ok-to-test"],
                                       sender="maint"))
    assert sorted(h.sent_to()) == ["org/l2", "org/l3", "org/l4"]
    # while the label is on the PR, a new push from the same author goes everywhere at once
    gh.set_pull(UPSTREAM, 7, SHA_B)
    h.webhook("pull_request", pr_event("synchronize", sha=SHA_B, labels=["crcr/ok-to-test"]))
    assert sorted(h.sent_to()) == ["org/l2", "org/l2", "org/l3", "org/l3", "org/l4", "org/l4"]
    # removing it revokes: the next push is held again
    h.webhook("pull_request", pr_event("synchronize", sha="c" * 40))
    assert len(h.rows("awaiting")) == 2


def test_approval_label_from_someone_without_write_access_releases_nothing(h, gh):
    h.webhook("pull_request", pr_event())
    h.webhook("pull_request", pr_event("labeled", label="crcr/ok-to-test", labels=["crcr/ok-to-test"],
                                       sender="reader"))
    assert h.sent_to() == ["org/l4"]
    assert len(h.rows("awaiting")) == 2


def test_plain_crcr_allowlist_dispatches_untrusted_authors_like_upstream(tmp_path, gh):
    with command_relay(tmp_path, gh, allowlist=PLAIN_ALLOWLIST) as h:
        r = h.webhook("pull_request", pr_event(association="NONE"))
        assert r.status_code == 202 and "held" not in r.json()
        assert sorted(h.sent_to()) == ["org/l1", "org/l2", "org/l3", "org/l4"]
        assert h.rows("awaiting") == []


def test_comment_on_an_issue_is_ignored(h, gh):
    c = comment_event("/ci run", on_pr=False)  # octokit's example: an issue, no pull_request key
    assert "pull_request" not in c["issue"]
    h.webhook("pull_request", pr_event())
    h.webhook("issue_comment", c)
    assert h.commands() == [] and h.sent_to() == ["org/l4"]
    assert gh.reactions_on(UPSTREAM, c["comment"]["id"]) == []


@pytest.mark.parametrize("body", [
    "> /ci run\nquoting the command above",
    "```\n/ci run\n```",
    "~~~sh\n/ci run\n~~~",
    "    /ci run",
    "please /ci run",
    "/CI run",
    "/cirun",
    "<!-- /ci run -->",
])
def test_commands_in_quotes_code_blocks_or_mid_line_are_not_executed(h, gh, body):
    h.webhook("pull_request", pr_event())
    c = h.comment(body)
    assert h.commands() == [] and h.sent_to() == ["org/l4"]
    assert gh.reactions_on(UPSTREAM, c["comment"]["id"]) == []


def test_edited_comment_and_bot_comment_are_not_executed(h, gh):
    h.webhook("pull_request", pr_event())
    h.comment("/ci run", action="edited")
    h.comment("/ci run", login="crcr-test[bot]", bot=True)
    assert h.commands() == [] and h.sent_to() == ["org/l4"]


def test_redelivery_of_the_same_delivery_executes_once(h, gh):
    h.webhook("pull_request", pr_event())
    payload = comment_event("/ci run")
    first = h.webhook("issue_comment", payload, delivery="fixed-delivery-1")
    again = h.webhook("issue_comment", payload, delivery="fixed-delivery-1")
    assert first.json()["status"] == "ignored" and again.json()["status"] == "duplicate"
    assert sorted(h.sent_to()) == ["org/l2", "org/l3", "org/l4"]
    assert gh.reactions_on(UPSTREAM, payload["comment"]["id"]) == ["eyes", "rocket"]
    assert len(h.commands()) == 1


def test_unknown_command_and_bad_backend_are_answered_with_what_is_valid(h, gh):
    h.webhook("pull_request", pr_event())
    c = h.comment("/ci frobnicate")
    assert gh.reactions_on(UPSTREAM, c["comment"]["id"]) == ["eyes", "confused"]
    (reply,) = h.replies()
    assert "unknown command `frobnicate`" in reply["body"] and "`/ci retry [backend ...]`" in reply["body"]
    h.comment("/ci run nosuch")
    (reply,) = h.replies()  # the same reply comment, edited in place
    assert "unknown backend `nosuch`" in reply["body"] and "`org/l2`" in reply["body"] and "`npu`" in reply["body"]
    assert reply.get("edits") == 1
    assert h.sent_to() == ["org/l4"]


def test_backends_are_named_by_device_or_repo(h, gh):
    h.webhook("pull_request", pr_event())
    h.comment("/ci run npu")
    assert sorted(h.sent_to()) == ["org/l3", "org/l4"]
    assert [d.target for d in h.rows("awaiting")] == ["org/l2"]
    h.comment("/ci run l2")
    assert sorted(h.sent_to()) == ["org/l2", "org/l3", "org/l4"]


def test_status_and_help_reply_in_one_comment_edited_in_place(h, gh):
    h.webhook("pull_request", pr_event())
    h.comment("/ci status")
    h.comment("/ci help")
    h.comment("/ci status")
    (reply,) = h.replies()
    assert reply["edits"] == 2
    body = reply["body"]
    assert body.startswith("<!-- crcr:reply -->")
    assert "| org/l2 | L2 |  | awaiting approval |  |" in body
    assert "| org/l4 | L4 |  | dispatch sent |  |" in body
    assert len(h.pr_comments()) == 1


def test_select_says_when_no_plan_is_configured(h, gh):
    h.webhook("pull_request", pr_event())
    h.comment("/ci select npu")
    (reply,) = h.replies()
    assert "no test selection plan is configured for org/l3" in reply["body"]
    assert h.commands()[0].outcome == "done"


def test_retry_reruns_failed_jobs_through_the_check_run_rerun_path(h, gh):
    r = h.webhook("pull_request", pr_event(association="MEMBER"))
    delivery = r.json()["delivery_id"]
    for repo, run in (("org/l4", "501"), ("org/l2", "502")):
        assert h.callback("in_progress", delivery, repo=repo, run_id=run).status_code == 200
        assert h.callback("completed", delivery, repo=repo, run_id=run, conclusion="failure").status_code == 200
    assert checks.wait_for_background()
    before = len(h.sent_to())
    # the re-run path stamps its row with the wall clock: let the relay's clock catch up to it
    h.clock.now = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    h.comment("/ci retry")
    assert h.sent_to()[before:] == ["org/l4"]
    assert any(d.delivery_id == f"{delivery}/rerun/1" and d.target == "org/l4" for d in h.rows("sent"))
    (reply,) = h.replies()
    assert "no check run to re-run for org/l2" in reply["body"]
    # the check's own re-run button (octokit's check_run rerequested, given the PR it lacks)
    # takes the same path and counts on from the comment's re-run
    press = copy.deepcopy(CHECK_RERUN)
    press["check_run"]["id"] = next(c.github_id for c in h.checks() if c.name.startswith("crcr/org/l4/"))
    press["check_run"]["head_sha"] = SHA_A
    press["check_run"]["pull_requests"] = [{"number": 7, "head": {"sha": SHA_A}}]
    press["repository"]["full_name"] = UPSTREAM
    h.webhook("check_run", press)
    assert h.sent_to()[before:] == ["org/l4", "org/l4"]
    assert any(d.delivery_id == f"{delivery}/rerun/2" for d in h.rows("sent"))


def test_cancel_marks_open_jobs_cancels_runs_and_held_rows(h, gh):
    r = h.webhook("pull_request", pr_event())
    delivery = r.json()["delivery_id"]
    gh.set_run("org/l4", 601)
    assert h.callback("in_progress", delivery, repo="org/l4", run_id="601").status_code == 200
    c = h.comment("/ci cancel")
    assert gh.state.cancelled_runs == [("org/l4", 601)]
    (job,) = h.jobs()
    assert (job.state, job.conclusion) == ("completed", "cancelled")
    assert sorted(d.target for d in h.rows("cancelled")) == ["org/l2", "org/l3"]
    assert gh.reactions_on(UPSTREAM, c["comment"]["id"]) == ["eyes", "rocket"]
    assert checks.wait_for_background()
    (check,) = gh.state.check_runs.values()
    assert check["conclusion"] == "cancelled"
    h.comment("/ci run")  # nothing is held any more: cancelled rows are never released
    assert h.sent_to() == ["org/l4"]


def test_failed_l4_check_pings_oncalls_in_one_comment_updated_in_place(h, gh):
    r = h.webhook("pull_request", pr_event(association="MEMBER"))
    delivery = r.json()["delivery_id"]
    for job in ("build", "test"):
        h.callback("in_progress", delivery, repo="org/l4", run_id="700", job=job)
        h.callback("completed", delivery, repo="org/l4", run_id="700", job=job, conclusion="failure")
        assert checks.wait_for_background()
    (ping,) = h.replies(kind="oncall")
    assert ping["body"].startswith("<!-- crcr:oncall -->")
    assert "@oncall1 @oncall2" in ping["body"]
    assert "crcr/org/l4/CI/build" in ping["body"] and "crcr/org/l4/CI/test" in ping["body"]
    assert ping["edits"] == 1
    # an L2 failure has no check: no ping for it
    h.callback("in_progress", delivery, repo="org/l2", run_id="701")
    h.callback("completed", delivery, repo="org/l2", run_id="701", conclusion="failure")
    assert "org/l2" not in h.replies(kind="oncall")[0]["body"]


def test_without_a_github_app_commands_are_stored_as_failed(tmp_path, gh):
    from fastapi.testclient import TestClient

    from crcr.queue import make_huey
    from relay.app import create_app
    from relay.runtime import Runtime
    from tests.fakes.oidc import FakeIssuer
    from tests.relay.callbacks_harness import Clock, Harness, make_settings
    from tests.relay.commands_harness import ALLOWLIST, CommandHarness

    with FakeIssuer() as issuer:
        settings = make_settings(tmp_path, issuer)  # no CRCR_GITHUB_APP_ID
        (tmp_path / "allowlist.yaml").write_text(ALLOWLIST)
        runtime = Runtime.from_settings(settings, clock=Clock(), huey=make_huey(settings.resolved_queue_url,
                                                                                 immediate=True))
        with TestClient(create_app(settings, runtime=runtime, start_worker=False, start_sweeper=False)) as client:
            h = CommandHarness(client, runtime, issuer, Clock())
            h.gh = gh
            assert isinstance(h, Harness)
            h.comment("/ci status")
            (cmd,) = h.commands()
            assert cmd.outcome == "failed" and "cannot talk to GitHub" in cmd.detail


def test_approval_prefers_the_push_over_a_later_closed_event(h, gh):
    opened = h.webhook("pull_request", pr_event()).json()["delivery_id"]
    h.webhook("pull_request", pr_event("closed"))  # held too, same head SHA
    h.comment("/ci run")
    released = {d.target: d.delivery_id for d in h.rows("sent") if d.target in ("org/l2", "org/l3")}
    assert released == {"org/l2": opened, "org/l3": opened}
    assert sorted(d.target for d in h.rows("superseded")) == ["org/l2", "org/l3"]  # the closed delivery's rows
    assert sorted(h.sent_to()) == ["org/l2", "org/l3", "org/l4", "org/l4"]  # l4 (opts in) got both events


def test_a_command_whose_task_died_is_resumed_once_by_the_sweep(h, gh, monkeypatch):
    from relay import command_actions

    h.webhook("pull_request", pr_event())
    real = command_actions._execute_comment
    monkeypatch.setattr(command_actions, "_execute_comment", lambda *a, **k: [])  # killed right after storing
    c = h.comment("/ci run")
    monkeypatch.setattr(command_actions, "_execute_comment", real)
    assert [x.outcome for x in h.commands()] == ["received"] and h.sent_to() == ["org/l4"]
    assert command_actions.sweep(h.runtime) == 0  # not stale yet: it may still be running
    h.clock.advance(11 * 60)
    assert command_actions.sweep(h.runtime) == 1
    assert command_actions.sweep(h.runtime) == 0
    assert [x.outcome for x in h.commands()] == ["done"]
    assert sorted(h.sent_to()) == ["org/l2", "org/l3", "org/l4"]
    assert gh.reactions_on(UPSTREAM, c["comment"]["id"]) == ["eyes", "rocket"]
