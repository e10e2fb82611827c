"""POST /webhook through the real ASGI app, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import sessionmaker

from crcr.store.base import make_engine
from relay.app import create_app
from relay.intake import sign
from tests.relay.harness import (
    SECRET,
    delivery,
    make_settings,
    post_webhook,
    pr_payload,
    push_payload,
    rows,
)


@pytest.fixture
def relay(tmp_path, database_url):
    """The app without workers: rows stay as intake wrote them."""
    settings = make_settings(tmp_path, database_url=database_url)
    app = create_app(settings, start_worker=False, start_sweeper=False)
    with TestClient(app) as client:
        yield client, app.state.runtime


def test_github_documented_signature_vector():
    assert sign(b"It's a Secret to Everybody", b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")


def test_pull_request_opened_stores_delivery_and_one_row_per_target(relay):
    client, runtime = relay
    r = post_webhook(client, "pull_request", pr_payload(labels=["Merged"]), delivery="d-1")
    assert r.status_code == 202
    assert r.json() == {"status": "accepted", "delivery_id": "d-1", "dispatches": 3}
    d = delivery(runtime, "d-1")
    assert (d.event, d.action, d.repo, d.pr_number, d.head_sha, d.sender) == (
        "pull_request", "opened", "pytorch/pytorch", 7, "a" * 40, "author")
    assert d.labels == ["Merged"] and json.loads(d.payload)["number"] == 7
    # org/l1 only takes push; the others take a PR (no file list, so path filters pass it)
    got = [(x.target, x.level, x.state, x.attempts) for x in rows(runtime, "d-1")]
    assert got == [("org/l2", 2, "pending", 0), ("org/l3", 3, "pending", 0), ("org/l4", 4, "pending", 0)]


def test_repeated_delivery_answers_200_and_creates_nothing(relay):
    client, runtime = relay
    assert post_webhook(client, "pull_request", pr_payload(), delivery="dup").status_code == 202
    r = post_webhook(client, "pull_request", pr_payload(action="synchronize"), delivery="dup")
    assert r.status_code == 200 and r.json()["status"] == "duplicate"
    assert len(rows(runtime, "dup")) == 3
    assert delivery(runtime, "dup").action == "opened"


@pytest.mark.parametrize(
    ("headers", "status"),
    [({"X-Hub-Signature-256": ""}, 400), ({"X-Hub-Signature-256": "sha1=abc"}, 400),
     ({"X-Hub-Signature-256": "sha256=" + "0" * 64}, 401)],
)
def test_bad_signatures_store_nothing(relay, headers, status):
    client, runtime = relay
    r = post_webhook(client, "pull_request", pr_payload(), delivery="bad", headers=headers)
    assert r.status_code == status
    assert delivery(runtime, "bad") is None and rows(runtime) == []


def test_wrong_secret_is_401(relay):
    client, runtime = relay
    r = post_webhook(client, "pull_request", pr_payload(), delivery="w", secret="not the secret")
    assert r.status_code == 401 and delivery(runtime, "w") is None


def test_malformed_json_and_non_object_are_400(relay):
    client, _ = relay
    assert post_webhook(client, "push", None, body=b"{not json").status_code == 400
    assert post_webhook(client, "push", None, body=b"[1, 2]").status_code == 400


def test_missing_event_or_delivery_header_is_400(relay):
    client, runtime = relay
    assert post_webhook(client, "", pr_payload(), delivery="x1").status_code == 400
    assert post_webhook(client, "push", pr_payload(), delivery="../../etc").status_code == 400
    assert rows(runtime) == []


def test_ping_answers_200(relay):
    client, runtime = relay
    r = post_webhook(client, "ping", {"zen": "Keep it logically awesome.", "hook_id": 1}, delivery="p")
    assert r.status_code == 200 and r.json()["status"] == "pong"
    assert rows(runtime) == []


@pytest.mark.parametrize(
    ("event", "payload", "reason"),
    [
        ("pull_request", pr_payload("edited"), "action 'edited' is not forwarded"),
        ("pull_request", pr_payload("labeled", label="bug"), "not a ciflow/crcr/<device> label"),
        ("pull_request", pr_payload(repo="someone/fork"), "not from the upstream repository"),
        ("issues", {"action": "opened", "repository": {"full_name": "pytorch/pytorch"}}, "is not dispatched"),
        ("push", push_payload(["docs/index.md"]) | {"repository": {"full_name": "x/y"}}, "not from the upstream"),
    ],
)
def test_events_not_acted_on_are_recorded_as_ignored(relay, event, payload, reason):
    client, runtime = relay
    r = post_webhook(client, event, payload, delivery="ign")
    assert r.status_code == 200 and r.json()["status"] == "ignored"
    d = delivery(runtime, "ign")
    assert d.status == "ignored" and reason in d.ignored_reason
    assert rows(runtime) == []


def test_device_label_creates_checks_only_and_never_dispatches(relay):
    """As CRCR: ciflow/crcr/<device> creates or backfills check runs; no second downstream run."""
    client, runtime = relay
    r = post_webhook(client, "pull_request", pr_payload("labeled", label="ciflow/crcr/npu"), delivery="lab")
    assert r.status_code == 200 and r.json()["status"] == "ignored"
    assert rows(runtime, "lab") == []
    assert "check runs only" in delivery(runtime, "lab").ignored_reason
    r = post_webhook(client, "pull_request", pr_payload("labeled", label="ciflow/crcr/tpu"), delivery="lab2")
    assert r.json()["status"] == "ignored" and "no L3 repository" in delivery(runtime, "lab2").ignored_reason


def test_push_path_filters_use_the_commits_file_lists(relay):
    client, runtime = relay
    post_webhook(client, "push", push_payload(["docs/index.md"]), delivery="p1")
    assert [x.target for x in rows(runtime, "p1")] == ["org/l1", "org/l3", "org/l4"]
    post_webhook(client, "push", push_payload(["torch/csrc/api.cpp"]), delivery="p2")
    assert [x.target for x in rows(runtime, "p2")] == ["org/l1", "org/l2", "org/l3", "org/l4"]


def test_untrusted_author_reaches_only_targets_that_opt_in(relay):
    client, runtime = relay
    r = post_webhook(client, "pull_request", pr_payload(association="FIRST_TIME_CONTRIBUTOR"), delivery="u")
    assert r.status_code == 202
    assert [x.target for x in rows(runtime, "u") if x.state != "awaiting"] == ["org/l4"]
    # the others are held for approval, never dropped (relay/approval.py)
    assert [x.target for x in rows(runtime, "u") if x.state == "awaiting"] == ["org/l2", "org/l3"]
    assert r.json()["held"] == 2
    assert "untrusted author" in delivery(runtime, "u").ignored_reason


def test_content_length_over_the_cap_is_413_before_reading(tmp_path):
    settings = make_settings(tmp_path, max_webhook_bytes=1000)
    with TestClient(create_app(settings, start_worker=False, start_sweeper=False)) as client:
        big = json.dumps(pr_payload() | {"pad": "x" * 2000}).encode()
        assert post_webhook(client, "pull_request", None, body=big).status_code == 413

        def chunks():  # no Content-Length: the cap is enforced while streaming
            for i in range(0, len(big), 256):
                yield big[i:i + 256]

        r = client.post("/webhook", content=chunks(), headers={
            "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "s", "X-Hub-Signature-256": sign(SECRET.encode(), big)})
        assert r.status_code == 413
        assert rows(client.app.state.runtime) == []


def test_storage_down_is_503_and_readyz_fails(relay):
    client, runtime = relay
    assert client.get("/readyz").status_code == 200
    dead = make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none", connect_args={"connect_timeout": 1})
    runtime.sessions = sessionmaker(bind=dead)
    runtime.engine = dead
    r = post_webhook(client, "pull_request", pr_payload(), delivery="down")
    assert r.status_code == 503 and r.headers["retry-after"]
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["database"].startswith("unreachable")
    assert client.get("/livez").status_code == 200


def test_unreadable_allowlist_is_503_not_a_lost_delivery_and_readyz_fails(tmp_path):
    settings = make_settings(tmp_path, allowlist="L1: [oops\n")  # never parses: no last good copy
    with TestClient(create_app(settings, start_worker=False, start_sweeper=False)) as client:
        r = post_webhook(client, "pull_request", pr_payload(), delivery="no-allowlist")
        assert r.status_code == 503 and "allowlist" in r.json()["error"]
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["allowlist"].startswith("unreadable")
        # nothing was recorded as ignored: GitHub's redelivery will be processed once it is fixed
        (tmp_path / "allowlist.yaml").write_text("L4:\n  - org/l4: oncall\n")
        r = post_webhook(client, "pull_request", pr_payload(), delivery="no-allowlist")
        assert r.status_code == 202
        assert [x.target for x in rows(client.app.state.runtime, "no-allowlist")] == ["org/l4"]
        assert client.get("/readyz").status_code == 200


@pytest.mark.parametrize("oddity", [b'"big": 123456789012345678901234567890', b'"nan": NaN', b'"s": "\\ud800"'])
def test_json_the_fast_parser_refuses_is_read_as_the_stdlib_reads_it(relay, oddity):
    """orjson is stricter than json (integers over 64 bits, NaN, lone surrogates): same answers as before."""
    client, runtime = relay
    body = json.dumps(pr_payload()).encode()[:-1] + b", " + oddity + b"}"
    r = post_webhook(client, "pull_request", None, body=body, delivery="odd")
    assert r.status_code == 202 and r.json() == {"status": "accepted", "delivery_id": "odd", "dispatches": 3}
    assert delivery(runtime, "odd").payload == body.decode()


def test_accepted_answer_is_what_json_response_renders():
    from fastapi.responses import JSONResponse

    from relay.intake import _Accepted

    for held in (0, 2):
        extra = {"held": held} if held else {}
        want = JSONResponse({"status": "accepted", "delivery_id": "a.b:c/d-1", "dispatches": 3, **extra},
                            status_code=202)
        got = _Accepted("a.b:c/d-1", 3, held)
        assert (got.status_code, got.body, sorted(got.raw_headers)) == (202, want.body, sorted(want.raw_headers))


def test_accepted_deliveries_are_logged_once_per_interval_not_per_delivery(relay, caplog):
    import logging

    client, runtime = relay
    with caplog.at_level(logging.INFO, logger="crcr.relay.intake"):
        for i in range(3):
            assert post_webhook(client, "pull_request", pr_payload(), delivery=f"acc-{i}").status_code == 202
        lines = [rec.getMessage() for rec in caplog.records if rec.getMessage().startswith("accepted ")]
        # the first after a quiet spell at once, with its id; the next two wait for the interval's line
        assert lines == ["accepted 1 delivery, 3 dispatch row(s): acc-0 (pull_request.opened)"]
        client.app.state.intake_writer.accepted_log.flush()  # the interval ends (or the app stops)
    lines = [rec.getMessage() for rec in caplog.records if rec.getMessage().startswith("accepted ")]
    assert lines[1:] == ["accepted 2 deliveries, 6 dispatch row(s): acc-1 (pull_request.opened), "
                         "acc-2 (pull_request.opened)"]


def test_unexpected_error_in_the_webhook_is_a_500_and_is_raised_for_the_server_to_log(tmp_path, monkeypatch):
    """The hot route skips the framework's layers (relay.app.RelayApp): a bug still answers 500, never hangs."""
    from relay import intake

    def broken(body):
        raise RuntimeError("a bug")

    monkeypatch.setattr(intake, "routing_view", broken)
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings, start_worker=False, start_sweeper=False)) as client:
        with pytest.raises(RuntimeError, match="a bug"):  # what the server logs
            post_webhook(client, "pull_request", pr_payload(), delivery="bug-1")
    with TestClient(create_app(settings, start_worker=False, start_sweeper=False),
                    raise_server_exceptions=False) as client:
        r = post_webhook(client, "pull_request", pr_payload(), delivery="bug-2")
        assert (r.status_code, r.text) == (500, "Internal Server Error")
        assert client.get("/livez").status_code == 200
