"""A ``check_run`` re-run answers what it did (not ``ignored``), and the delivery says so too."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import uuid

import pytest

from crcr.store.deliveries import Delivery
from relay import checks
from tests.fakes.github import FakeGitHub
from tests.relay.callbacks_harness import CRCR_MODE_ALLOWLIST, HEAD_SHA, UPSTREAM, harness
from tests.relay.test_checks import CHECK_RERUN


@pytest.fixture
def gh():
    with FakeGitHub() as fake:
        yield fake


@pytest.fixture
def h(tmp_path, gh):
    """crcr mode (`crcr:` section): a re-run is a new dispatch."""
    with harness(tmp_path, allowlist_text=CRCR_MODE_ALLOWLIST, github_api_url=gh.url, github_app_id=gh.app_id,
                 github_private_key=gh.private_key_pem) as h:
        yield h


@pytest.fixture
def plain(tmp_path, gh):
    """A plain CRCR allowlist: a re-run goes through the Actions API, as CRCR does."""
    with harness(tmp_path, github_api_url=gh.url, github_app_id=gh.app_id,
                 github_private_key=gh.private_key_pem) as h:
        yield h


def _post(h, event: str, payload: dict, delivery: str):
    body = json.dumps(payload).encode()
    sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    return h.client.post("/webhook", content=body, headers={
        "X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sig})


def test_rerun_answer_names_the_new_delivery_and_target(h, gh):
    h.dispatch("d-1", "org/l4repo")
    h.callback("in_progress", "d-1", repo="org/l4repo")
    h.callback("completed", "d-1", repo="org/l4repo", conclusion="failure")
    (row,) = h.checks()
    event = copy.deepcopy(CHECK_RERUN)
    event["check_run"]["id"] = row.github_id
    event["check_run"]["head_sha"] = HEAD_SHA
    event["repository"]["full_name"] = UPSTREAM
    r = _post(h, "check_run", event, "click-1")
    assert r.status_code == 202
    body = r.json()
    assert body["status"] == "rerun" and body["rerun_delivery_id"] == "d-1/rerun/1"
    assert body["target"] == "org/l4repo" and isinstance(body["dispatch_id"], int)
    with h.runtime.sessions() as s:
        stored = s.get(Delivery, "click-1")
        assert stored.status == "accepted" and "d-1/rerun/1" in stored.ignored_reason


def test_a_check_run_that_is_not_crcrs_is_still_ignored_with_a_reason(h, gh):
    event = copy.deepcopy(CHECK_RERUN)
    event["repository"]["full_name"] = UPSTREAM
    event["check_run"]["id"] = 987654321 + uuid.uuid4().int % 1000
    r = _post(h, "check_run", event, "foreign")
    assert r.status_code == 200 and r.json()["status"] == "ignored" and r.json()["reason"]


def test_upstream_style_rerun_answers_what_it_started(plain, gh):
    run = gh._new_check_run(UPSTREAM, {"name": "crcr/org/l3repo/CI/build", "head_sha": HEAD_SHA,
                                       "external_id": "888:42", "status": "completed", "conclusion": "failure"})
    payload = {"action": "rerequested", "check_run": run, "repository": {"full_name": UPSTREAM},
               "sender": {"login": "maintainer"}}
    r = _post(plain, "check_run", payload, "click-up")
    assert r.status_code == 200  # as CRCR answers
    assert r.json()["status"] == "rerun" and "failed jobs" in r.json()["how"]
    assert checks.wait_for_background()
    with plain.runtime.sessions() as s:
        stored = s.get(Delivery, "click-up")
        assert stored.status == "accepted" and "Actions API" in stored.ignored_reason
