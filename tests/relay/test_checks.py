"""Check runs on the upstream PR through the real PyGithub client against the local GitHub."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import uuid

import pytest
from sqlalchemy import select

from crcr.store.deliveries import Delivery, Dispatch
from relay import checks
from tests.conftest import WEBHOOKS
from tests.fakes.github import FakeGitHub
from tests.relay.callbacks_harness import CRCR_MODE_ALLOWLIST, HEAD_SHA, UPSTREAM, harness

PR_OPENED = json.loads((WEBHOOKS / "octokit-webhooks/pull_request/opened.payload.json").read_text())
CHECK_RERUN = json.loads((WEBHOOKS / "octokit-webhooks/check_run/rerequested.payload.json").read_text())


@pytest.fixture
def gh():
    with FakeGitHub() as fake:
        yield fake


@pytest.fixture
def h(tmp_path, gh):
    """crcr mode (a crcr: allowlist section): one check per job updated in place, re-run by dispatch.

    CRCR's own pattern (a new check run per callback, Actions API re-runs) is tested in
    test_parity.py."""
    with harness(tmp_path, allowlist_text=CRCR_MODE_ALLOWLIST, github_api_url=gh.url, github_app_id=gh.app_id,
                 github_private_key=gh.private_key_pem) as h:
        yield h


def check_posts(gh):
    return [r for r in gh.calls("POST", r"/check-runs$") if r.status == 201]


def check_patches(gh):
    return gh.calls("PATCH", r"/check-runs/\d+$")


def send_webhook(h, event: str, payload: dict) -> None:
    body = json.dumps(payload).encode()
    sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    r = h.client.post("/webhook", content=body, headers={
        "X-GitHub-Event": event, "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": sig,
        "Content-Type": "application/json"})
    assert r.status_code in (200, 202), r.text


def test_l4_check_created_in_progress_then_completed_with_summary(h, gh):
    h.dispatch("d-1", "org/l4repo")
    assert h.callback("in_progress", "d-1", repo="org/l4repo").status_code == 200
    (post,) = check_posts(gh)
    assert post.path == f"/repos/{UPSTREAM}/check-runs"
    assert post.body["name"] == "crcr/org/l4repo/CI/build"
    assert post.body["head_sha"] == HEAD_SHA
    assert post.body["status"] == "in_progress"
    assert post.body["external_id"] == "100:7"  # run_id:pr, as CRCR
    assert post.body["details_url"] == "https://github.com/org/repo/actions/runs/100"
    r = h.callback("completed", "d-1", repo="org/l4repo", conclusion="failure",
                   test_results={"passed": 40, "failed": 2, "skipped": 3},
                   failed_tests=["test/test_ops.py::TestOps::test_add", "test/test_nn.py::test_conv"])
    assert r.status_code == 200
    (patch,) = check_patches(gh)
    assert patch.body["status"] == "completed" and patch.body["conclusion"] == "failure"
    summary = patch.body["output"]["summary"]
    assert "| 40 | 2 | 3 |" in summary
    assert "test/test_ops.py::TestOps::test_add" in summary
    assert "https://github.com/org/repo/actions/runs/100" in summary
    assert patch.body["output"]["title"].startswith("failure: 40 passed, 2 failed")
    (row,) = h.checks()
    assert row.synced and row.status == "completed" and row.github_id == post_id(gh)


def post_id(gh) -> int:
    return next(iter(gh.state.check_runs))


def test_l3_without_label_gets_no_check(h, gh):
    h.dispatch("d-1", "org/l3repo", labels=["module: nn"])
    assert h.callback("in_progress", "d-1", repo="org/l3repo").status_code == 200
    assert h.callback("completed", "d-1", repo="org/l3repo", conclusion="success").status_code == 200
    assert check_posts(gh) == [] and h.checks() == []


def test_l3_with_its_device_label_gets_a_check(h, gh):
    h.dispatch("d-1", "org/l3repo", labels=["ciflow/crcr/npu"])
    h.callback("in_progress", "d-1", repo="org/l3repo")
    assert [p.body["name"] for p in check_posts(gh)] == ["crcr/org/l3repo/CI/build"]


def test_l3_with_another_devices_label_gets_no_check(h, gh):
    h.dispatch("d-1", "org/l3repo", labels=["ciflow/crcr/gpu"])
    h.callback("in_progress", "d-1", repo="org/l3repo")
    assert check_posts(gh) == []


def test_l2_never_gets_a_check(h, gh):
    h.dispatch("d-1", "org/l2repo", labels=["ciflow/crcr/npu"])
    h.callback("in_progress", "d-1", repo="org/l2repo")
    assert check_posts(gh) == []


def test_label_added_after_dispatch_creates_the_check_from_current_state(h, gh):
    h.dispatch("d-1", "org/l3repo")
    h.callback("in_progress", "d-1", repo="org/l3repo")
    h.callback("in_progress", "d-1", repo="org/l3repo", job="test")
    h.callback("completed", "d-1", repo="org/l3repo", job="test", conclusion="success",
               test_results={"passed": 5, "failed": 0, "skipped": 0})
    assert check_posts(gh) == []
    payload = copy.deepcopy(PR_OPENED)
    payload.update(action="labeled", number=7, label={"name": "ciflow/crcr/npu", "id": 1, "color": "fff"})
    payload["repository"]["full_name"] = UPSTREAM
    payload["pull_request"]["number"] = 7
    payload["pull_request"]["head"]["sha"] = HEAD_SHA
    send_webhook(h, "pull_request", payload)
    assert checks.wait_for_background()
    posts = sorted(check_posts(gh), key=lambda p: p.body["name"])
    assert [(p.body["name"], p.body["status"]) for p in posts] == [
        ("crcr/org/l3repo/CI/build", "in_progress"), ("crcr/org/l3repo/CI/test", "completed")]
    assert posts[1].body["conclusion"] == "success"
    # later callbacks of the labelled job update its check
    h.callback("completed", "d-1", repo="org/l3repo", conclusion="failure")
    assert [p.body["conclusion"] for p in check_patches(gh)] == ["failure"]


def test_summary_is_bounded_and_untrusted_text_is_inert(h, gh):
    h.dispatch("d-1", "org/l4repo")
    h.callback("in_progress", "d-1", repo="org/l4repo", job="<script>alert(1)</script> @everyone")
    failed = [f"test_{i}.py::" + "x" * 2000 + "```\n@maintainers" for i in range(1000)]
    verdict = {"schema_version": 1, "category": "backend", "confidence": "low",
               "summary": "<img src=x onerror=alert(1)> ping @pytorch/core", "analyzed_at": "2026-11-30T06:00:00Z"}
    h.callback("completed", "d-1", repo="org/l4repo", job="<script>alert(1)</script> @everyone",
               conclusion="failure", failed_tests=failed, triage_verdict=verdict)
    (post,) = check_posts(gh)
    assert "<" not in post.body["name"] and "@" not in post.body["name"]
    (patch,) = check_patches(gh)
    summary = patch.body["output"]["summary"]
    assert len(summary) <= 65535
    assert "... and 900 more" in summary
    assert "<img" not in summary and "<script" not in summary
    assert "@pytorch" not in summary and "@maintainers" not in summary and "@everyone" not in summary
    assert summary.count("```") == 2  # one fenced block; test names cannot close it
    assert "Triage verdict" in summary


def test_github_failure_never_fails_the_callback_and_is_retried(h, gh):
    h.dispatch("d-1", "org/l4repo")
    gh.add_fault("POST", r"/check-runs$", status=502, times=1)
    r = h.callback("in_progress", "d-1", repo="org/l4repo")
    assert r.status_code == 200
    (row,) = h.checks()
    assert not row.synced and "502" in row.last_error
    assert checks.sweep(h.runtime) == 0  # planned moments ago: its own push may still be due
    assert checks.sweep(h.runtime, min_age_s=0) == 1
    (row,) = h.checks()
    assert row.synced and row.github_id is not None
    assert len(check_posts(gh)) == 1


def test_a_refused_check_heals_with_the_next_successful_push(h, gh):
    h.dispatch("d-1", "org/l4repo")
    h.dispatch("d-2", "org/l4repo")
    gh.add_fault("POST", r"/check-runs$", status=503, times=1)
    h.callback("in_progress", "d-1", repo="org/l4repo")
    assert [c.synced for c in h.checks()] == [False]
    h.callback("in_progress", "d-2", repo="org/l4repo")  # GitHub is back: both go through
    assert [c.synced for c in h.checks()] == [True, True]
    assert len(check_posts(gh)) == 2


def test_rerequested_check_run_redispatches_that_backend(h, gh):
    h.dispatch("d-1", "org/l4repo")
    h.callback("in_progress", "d-1", repo="org/l4repo")
    h.callback("completed", "d-1", repo="org/l4repo", conclusion="failure")
    (row,) = h.checks()
    event = copy.deepcopy(CHECK_RERUN)
    event["check_run"]["id"] = row.github_id
    event["check_run"]["head_sha"] = HEAD_SHA
    event["repository"]["full_name"] = UPSTREAM
    send_webhook(h, "check_run", event)
    send_webhook(h, "check_run", event)  # a second click: a second re-run, numbered on
    with h.runtime.sessions() as s:
        reruns = s.scalars(select(Dispatch).where(Dispatch.delivery_id.like("d-1/rerun/%")).order_by(Dispatch.id)).all()
        assert [(d.delivery_id, d.target, d.state) for d in reruns] == [
            ("d-1/rerun/1", "org/l4repo", "pending"), ("d-1/rerun/2", "org/l4repo", "pending")]
        original = s.get(Delivery, "d-1")
        assert s.get(Delivery, "d-1/rerun/1").payload == original.payload


def test_failed_check_offers_a_rerun_button_that_redispatches(h, gh):
    h.dispatch("d-1", "org/l4repo")
    h.callback("in_progress", "d-1", repo="org/l4repo")
    assert "actions" not in check_posts(gh)[0].body  # no button while running
    h.callback("completed", "d-1", repo="org/l4repo", conclusion="failure")
    (patch,) = check_patches(gh)
    assert [a["identifier"] for a in patch.body["actions"]] == ["rerun"]
    (row,) = h.checks()
    event = copy.deepcopy(CHECK_RERUN)
    event.update(action="requested_action", requested_action={"identifier": "something-else"})
    event["check_run"]["id"] = row.github_id
    event["repository"]["full_name"] = UPSTREAM
    send_webhook(h, "check_run", event)  # not our button: nothing happens
    event["requested_action"] = {"identifier": "rerun"}
    send_webhook(h, "check_run", event)
    with h.runtime.sessions() as s:
        reruns = s.scalars(select(Dispatch.delivery_id).where(Dispatch.delivery_id.like("d-1/rerun/%"))).all()
    assert reruns == ["d-1/rerun/1"]


def test_check_run_event_for_a_foreign_check_does_nothing(h, gh):
    event = copy.deepcopy(CHECK_RERUN)
    event["repository"]["full_name"] = UPSTREAM
    send_webhook(h, "check_run", event)
    with h.runtime.sessions() as s:
        assert s.scalars(select(Delivery).where(Delivery.id.like("%/rerun/%"))).all() == []


# -- self-scheduled runs: keyed by the upstream commit SHA ------------------------------------
NIGHTLY_SHA = "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c"


def commit_gets(gh):
    return gh.calls("GET", r"/commits/")


def test_nightly_for_an_existing_commit_is_accepted_and_the_answer_cached(h, gh):
    gh.add_commit(UPSTREAM, NIGHTLY_SHA)
    r = h.callback("in_progress", NIGHTLY_SHA, event_type="nightly", repo="org/l4repo")
    assert r.status_code == 200, r.text
    assert r.json()["job"]["queue_time_s"] is None  # nothing was dispatched
    h.callback("in_progress", NIGHTLY_SHA, event_type="periodic", repo="org/l2repo", job="other")
    assert h.callback("completed", NIGHTLY_SHA, event_type="nightly", repo="org/l4repo").status_code == 200
    assert len(commit_gets(gh)) == 1
    assert all(j.self_scheduled for j in h.jobs())
    assert check_posts(gh) == []  # no PR, no check


def test_nightly_for_an_unknown_commit_is_refused_and_cached(h, gh):
    for job in ("a", "b"):
        r = h.callback("in_progress", NIGHTLY_SHA, event_type="nightly", job=job)
        assert r.status_code == 409
        assert "does not exist" in r.json()["error"]
    assert len(commit_gets(gh)) == 1
    assert h.jobs() == []


def test_nightly_with_a_non_sha_delivery_is_400_without_asking_github(h, gh):
    r = h.callback("in_progress", "../../etc/passwd", event_type="nightly")
    assert r.status_code == 400
    assert commit_gets(gh) == []


def test_nightly_when_github_is_down_is_503_and_not_cached(h, gh):
    gh.add_commit(UPSTREAM, NIGHTLY_SHA)
    gh.add_fault("GET", r"/commits/", status=502, times=1)
    assert h.callback("in_progress", NIGHTLY_SHA, event_type="nightly").status_code == 503
    assert h.callback("in_progress", NIGHTLY_SHA, event_type="nightly").status_code == 200


# -- every request crcr sends validates against GitHub's REST description ----------------------
def _schema(op: str) -> dict:
    from tests.conftest import FIXTURES

    spec = json.loads((FIXTURES / "github-openapi/subset.json").read_text())
    return {**spec["operations"][op]["request"], "components": spec["components"]}


def test_check_run_requests_match_githubs_openapi(h, gh):
    import jsonschema

    h.dispatch("d-1", "org/l4repo")
    h.callback("in_progress", "d-1", repo="org/l4repo")
    h.callback("completed", "d-1", repo="org/l4repo", conclusion="weird-conclusion",
               failed_tests=["a::b"], test_results={"passed": 0, "failed": 1, "skipped": 0})
    posts, patches = check_posts(gh), check_patches(gh)
    assert posts and patches
    for rec in posts:
        jsonschema.validate(rec.body, _schema("POST /repos/{owner}/{repo}/check-runs"))
    for rec in patches:
        jsonschema.validate(rec.body, _schema("PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}"))
    assert patches[-1].body["conclusion"] == "failure"  # an unknown conclusion maps to a valid one
    # and what the fake answered (the check run as GitHub would return it) matches the spec too
    from tests.relay.test_fake_github import validate

    for run in gh.state.check_runs.values():
        validate("PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}", 200, run)


def test_a_late_push_of_an_older_state_never_hides_a_newer_one(h, gh, monkeypatch):
    """in_progress's push is still at GitHub when completed arrives: completed must reach GitHub."""
    from crcr.contracts.callback import CallbackBody
    from relay import jobs as jobs_mod

    h.dispatch("d-1", "org/l4repo")
    real_create = checks.create_check_run

    def create_while_the_job_completes(*args, **kwargs):
        gid = real_create(*args, **kwargs)
        with h.runtime.sessions() as s:  # another request commits the newer state meanwhile
            body = CallbackBody.model_validate(h.body("completed", "d-1", conclusion="failure"))
            applied = jobs_mod.apply_callback(s, "org/l4repo", body, now=h.clock(), upstream_repo=UPSTREAM,
                                              commit_lookup=lambda sha: True)
            checks.plan_check(s, applied.job, h.runtime)
            s.commit()
        return gid

    monkeypatch.setattr(checks, "create_check_run", create_while_the_job_completes)
    h.callback("in_progress", "d-1", repo="org/l4repo")
    # the late in_progress push kept the check's id but not "synced"; the newer state followed
    (row,) = h.checks()
    assert row.synced and row.status == "completed"
    (run,) = gh.state.check_runs.values()
    assert (run["status"], run["conclusion"]) == ("completed", "failure")
    assert len(check_posts(gh)) == 1 and len(check_patches(gh)) == 1
