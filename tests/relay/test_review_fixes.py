"""What a review of the relay found, one test per finding; each failed before its fix."""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text, update

from crcr.github.dispatch import DispatchFailure
from crcr.store.deliveries import Delivery, Dispatch
from relay import checks, dispatch
from relay.app import create_app
from relay.local_target import run_local
from relay.runtime import Runtime
from tests.conftest import ROOT
from tests.fakes.github import FakeGitHub
from tests.relay.callbacks_harness import CRCR_MODE_ALLOWLIST, harness
from tests.relay.harness import make_settings, post_webhook, pr_payload, rows, wait_for


# -- an outcome written by a worker whose claim lapsed -----------------------------------------
@pytest.fixture
def one_row(tmp_path, fake_github, database_url):
    settings = make_settings(tmp_path, allowlist="L1:\n  - org/one\n", github_url=fake_github.url,
                             app_id=fake_github.app_id, key=fake_github.private_key_pem, database_url=database_url)
    runtime = Runtime.from_settings(settings)
    with TestClient(create_app(settings, runtime=runtime, start_worker=False, start_sweeper=False)) as client:
        post_webhook(client, "pull_request", pr_payload(), delivery="lapse")
        (row,) = rows(runtime, "lapse")
        yield runtime, row.id


def _stall_then_lose_the_row(runtime, row_id):
    """The send outlives its lease: another worker claims the row and records ``sent`` meanwhile;
    then this worker's own send fails (a 502) and it comes back to record ``retrying``."""

    def send(*args, **kwargs):
        now = runtime.clock()
        with runtime.sessions.begin() as s:  # the other worker: claimed after the lease ran out, sent, recorded
            s.execute(update(Dispatch).where(Dispatch.id == row_id).values(
                state="sent", attempts=1, sent_at=now, claimed_until=None, last_status=204, updated_at=now))
        raise DispatchFailure("GitHub answered 502", True, 502)

    return send


@pytest.mark.parametrize("path", ["attempt", "attempt_many"])
def test_a_lapsed_claim_never_overwrites_anothers_sent(one_row, monkeypatch, path):
    runtime, row_id = one_row
    monkeypatch.setattr(dispatch, "send_repository_dispatch", _stall_then_lose_the_row(runtime, row_id))
    if path == "attempt":
        assert dispatch.attempt(runtime, row_id) is None
    else:
        with ThreadPoolExecutor(2) as pool:
            assert dispatch.attempt_many(runtime, [row_id], pool) == {}
    with runtime.sessions() as s:
        row = s.get(Dispatch, row_id)
        assert (row.state, row.last_status, row.attempts) == ("sent", 204, 1)


# -- check-run pushes and row locks ------------------------------------------------------------
@pytest.mark.postgres
def test_no_row_lock_is_held_while_github_creates_the_check(tmp_path, postgres_url):
    """Before: push_planned held SELECT ... FOR UPDATE on the check row for the whole GitHub call."""
    with FakeGitHub() as gh, harness(tmp_path, database_url=postgres_url, github_api_url=gh.url,
                                     github_app_id=gh.app_id, github_private_key=gh.private_key_pem) as h:
        h.dispatch("d-1", "org/l4repo")
        gh.add_fault("POST", r"/check-runs$", latency_s=3.0)  # GitHub is slow to answer this one
        answered = []
        caller = threading.Thread(target=lambda: answered.append(h.callback("in_progress", "d-1", repo="org/l4repo")))
        caller.start()
        try:
            wait_for(lambda: gh.calls("POST", r"/check-runs$"), what="the check-run POST to reach GitHub")
            with h.runtime.engine.connect() as conn:  # another worker wants the row now
                conn.execute(text("SET lock_timeout = '500ms'"))
                locked = conn.execute(text("SELECT id FROM check_runs FOR UPDATE NOWAIT")).all()
                conn.rollback()
            assert len(locked) == 1
        finally:
            caller.join(30)
        assert answered and answered[0].status_code == 200
        (row,) = h.checks()
        assert row.synced and row.github_id is not None and row.push_claimed_until is None


def test_two_pushers_of_one_version_create_one_check(tmp_path):
    """The claim replaces the lock: a second pusher of the same version finds it claimed and leaves it."""
    with FakeGitHub() as gh, harness(tmp_path, github_api_url=gh.url, github_app_id=gh.app_id,
                                     github_private_key=gh.private_key_pem) as h:
        h.dispatch("d-1", "org/l4repo")
        gh.add_fault("POST", r"/check-runs$", status=502, times=1)  # the callback's own push fails
        h.callback("in_progress", "d-1", repo="org/l4repo")
        (row,) = h.checks()
        gh.add_fault("POST", r"/check-runs$", latency_s=1.0)
        results = []
        pushers = [threading.Thread(target=lambda: results.append(checks.push_planned(h.runtime, row.id)))
                   for _ in range(2)]
        for t in pushers:
            t.start()
        for t in pushers:
            t.join(30)
        assert sorted(results) == [False, True]
        assert len([c for c in gh.calls("POST", r"/check-runs$") if c.status == 201]) == 1


# -- the re-run path -------------------------------------------------------------------------------
@pytest.fixture
def crcr_mode(tmp_path):
    with FakeGitHub() as gh, harness(tmp_path, allowlist_text=CRCR_MODE_ALLOWLIST, github_api_url=gh.url,
                                     github_app_id=gh.app_id, github_private_key=gh.private_key_pem) as h:
        h.gh = gh
        yield h


def _finished_check(h, association: str | None = None) -> int:
    h.dispatch("d-1", "org/l4repo")
    if association:
        with h.runtime.sessions.begin() as s:
            d = s.get(Delivery, "d-1")
            payload = json.loads(d.payload)
            payload["pull_request"]["author_association"] = association
            d.payload, d.author_association = json.dumps(payload), association
    h.callback("in_progress", "d-1", repo="org/l4repo")
    h.callback("completed", "d-1", repo="org/l4repo", conclusion="failure")
    (row,) = h.checks()
    return row.github_id


def _rerequest(h, check_id: int, delivery_id: str = "evt"):
    with h.runtime.sessions() as s:
        event = Delivery(id=delivery_id, event="check_run", action="rerequested", repo="pytorch/pytorch",
                         sender="maintainer", payload=json.dumps({"action": "rerequested", "check_run": {"id": check_id}}))
        s.add(event)
        s.commit()
        d = checks.on_check_run(s, event, h.runtime)
        return d.delivery_id if d is not None else None


def test_rerun_ids_stay_distinct_when_a_number_is_already_taken(crcr_mode):
    """Before: the number came from a count; a taken one raised IntegrityError and the re-run was lost."""
    h = crcr_mode
    check_id = _finished_check(h)
    with h.runtime.sessions.begin() as s:  # a concurrent re-run already took /rerun/2 (count says 1 exists)
        s.add(Delivery(id="d-1/rerun/2", event="pull_request", repo="pytorch/pytorch", payload="{}"))
    assert _rerequest(h, check_id, "e1") == "d-1/rerun/3"
    assert _rerequest(h, check_id, "e2") == "d-1/rerun/4"


def test_rerun_goes_through_routing_and_trust(crcr_mode):
    """Before: the re-run built its rows itself and re-dispatched a PR whose author is held back."""
    h = crcr_mode
    check_id = _finished_check(h, association="FIRST_TIME_CONTRIBUTOR")  # org/l4repo does not opt in
    assert _rerequest(h, check_id) is None
    with h.runtime.sessions() as s:
        assert s.scalars(select(Delivery.id).where(Delivery.id.like("d-1/rerun/%"))).all() == []


def test_rerun_rows_match_what_intake_builds(crcr_mode):
    h = crcr_mode
    check_id = _finished_check(h)
    new_id = _rerequest(h, check_id)
    with h.runtime.sessions() as s:
        new, orig = s.get(Delivery, new_id), s.get(Delivery, "d-1")
        (d,) = s.scalars(select(Dispatch).where(Dispatch.delivery_id == new_id)).all()
        assert (new.event, new.action, new.pr_number, new.head_sha, new.payload, new.status) == (
            orig.event, orig.action, orig.pr_number, orig.head_sha, orig.payload, "accepted")
        assert (d.target, d.kind, d.level, d.state) == ("org/l4repo", "github", 4, "pending")


# -- a local target's environment -------------------------------------------------------------------
def test_a_local_command_gets_no_relay_secrets(tmp_path, monkeypatch):
    """Before: the command inherited os.environ whole (App key, webhook secret, database URL)."""
    secrets = {"CRCR_GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----x", "CRCR_WEBHOOK_SECRET": "hook-secret",
               "CRCR_DATABASE_URL": "postgresql://u:pw@db/crcr", "ANTHROPIC_API_KEY": "sk-ant-x",
               "AWS_SECRET_ACCESS_KEY": "aws"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "env.json"
    code = f"import json, os; open({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))"
    result = run_local([sys.executable, "-c", code], {"x": 1}, timeout_s=30, env={"CRCR_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 0, result.stderr_tail
    env = json.loads(out.read_text())
    assert not set(secrets) & set(env)
    assert not any(v in env.values() for v in secrets.values())
    assert env["CRCR_DATA_DIR"] == str(tmp_path) and "PATH" in env


def test_a_local_command_gets_what_it_needs_to_call_back(tmp_path, monkeypatch):
    """The embedded default's downstream reports over HTTP: it needs the relay's URL and its job identity."""
    passed = {"CRCR_PUBLIC_URL": "http://127.0.0.1:9", "ACTIONS_ID_TOKEN_REQUEST_URL": "http://127.0.0.1:9/token?x=1",
              "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "job-token"}
    for k, v in passed.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "env.json"
    code = f"import json, os; open({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))"
    result = run_local([sys.executable, "-c", code], {"x": 1}, timeout_s=30, env={})
    assert result.exit_code == 0, result.stderr_tail
    env = json.loads(out.read_text())
    assert {k: env.get(k) for k in passed} == passed


# -- one owner for check runs, ordinary imports ------------------------------------------------------
def test_intake_reaches_checks_by_an_ordinary_import_and_checks_own_every_push():
    import relay.intake

    source = (ROOT / "relay" / "intake.py").read_text()
    assert "importlib" not in source and relay.intake.checks is checks
    for path in (ROOT / "relay").glob("*.py"):
        if path.name != "checks.py":
            assert "create_check_run" not in path.read_text(), f"{path.name} pushes check runs itself"


# -- /callback authenticates before it reads the body ------------------------------------------------
def test_an_anonymous_callback_is_refused_before_its_body_is_read(tmp_path):
    """Before: 2 MB were buffered first (and an oversized anonymous body was answered 413, not 401)."""
    with harness(tmp_path) as h:
        sent = []

        def body():
            for _ in range(48):  # 3 MB, chunked: no Content-Length to refuse it by
                sent.append(1)
                yield b"x" * 65536

        for path in ("/callback", "/github/callback"):
            sent.clear()
            r = h.client.post(path, content=body(), headers={"Content-Type": "application/json"})
            assert r.status_code == 401
        r = h.client.post("/callback", content=body(), headers={"Authorization": "Bearer not-a-jwt"})
        assert r.status_code == 401


# -- Redis queue names ----------------------------------------------------------------------------------
@pytest.mark.redis
def test_queue_names_differing_only_in_punctuation_do_not_share_a_redis_queue(redis_url):
    """Before: huey kept only [A-Za-z0-9_] of the name, so relay-a and relay.a were one queue."""
    import uuid

    from crcr.queue import make_huey

    base = f"t{uuid.uuid4().hex[:8]}"
    a, b = make_huey(redis_url, name=f"{base}-a"), make_huey(redis_url, name=f"{base}.a")
    plain = make_huey(redis_url, name=f"{base}_plain")
    try:
        a.storage.enqueue(b"task-for-a")
        assert (a.storage.queue_size(), b.storage.queue_size()) == (1, 0)
        assert plain.storage.name == f"{base}_plain"  # plain names keep their existing keys
    finally:
        for h in (a, b, plain):
            h.storage.flush_queue()


# -- project docs stand alone ---------------------------------------------------------------------------
def test_project_files_do_not_cite_a_contracts_file_the_project_lacks():
    assert not (ROOT / "CONTRACTS.md").exists() and not (ROOT / "docs" / "CONTRACTS.md").exists()
    cited = [str(p.relative_to(ROOT)) for pattern in ("docs/*.md", "relay/*.py", "crcr/**/*.py", "*.md")
             for p in ROOT.glob(pattern) if "CONTRACTS.md" in p.read_text(errors="replace")]
    assert cited == []
