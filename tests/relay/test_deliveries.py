"""Every delivery is visible: `crcr deliveries list/show` over accepted, ignored and rejected webhooks.

Webhooks go through the real app (signed, over ASGI) into a SQLite database in the
test's data dir; the commands then read that database as a user would.
"""

from __future__ import annotations

import json
import logging

import pytest
from fastapi.testclient import TestClient

from crcr.settings import get_settings
from relay.app import create_app
from tests.relay.harness import SECRET, make_settings, post_webhook, pr_payload
from tests.relay.test_cli_relay import run


@pytest.fixture
def relay(tmp_path, monkeypatch):
    settings = make_settings(tmp_path)
    monkeypatch.setenv("CRCR_DATA_DIR", str(settings.data_dir))
    monkeypatch.delenv("CRCR_DATABASE_URL", raising=False)
    monkeypatch.delenv("CRCR_CONFIG", raising=False)
    get_settings.cache_clear()
    with TestClient(create_app(settings, start_worker=False, start_sweeper=False)) as client:
        yield client
    get_settings.cache_clear()


def _stop(client: TestClient) -> None:
    """Let the intake writer flush queued rejected-request records (they are not awaited)."""
    client.app.state.intake_writer.stop()


def test_list_shows_accepted_ignored_and_rejected_with_reasons(relay, capsys, caplog, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: the table is not truncated
    client = relay
    assert post_webhook(client, "pull_request", pr_payload(), delivery="acc").status_code == 202
    assert post_webhook(client, "pull_request", pr_payload("edited"), delivery="ign").status_code == 200
    assert post_webhook(client, "ping", {"zen": "z", "hook_id": 1}, delivery="png").status_code == 200
    with caplog.at_level(logging.WARNING, logger="crcr.relay.intake"):
        r = post_webhook(client, "pull_request", pr_payload(), delivery="forged", secret="wrong secret")
    assert r.status_code == 401
    # the reason is logged; neither the secret nor the body is
    warning = [rec.getMessage() for rec in caplog.records if "rejected" in rec.getMessage()]
    assert warning and "401" in warning[0] and "signature does not match" in warning[0] and "forged" in warning[0]
    assert SECRET not in caplog.text and "wrong secret" not in caplog.text and '"action"' not in caplog.text
    r = post_webhook(client, "pull_request", None, body=b"{not json", delivery="badjson")
    assert r.status_code == 400
    _stop(client)

    code, out, _ = run(["deliveries", "list", "--json"], capsys)
    listed = {r["delivery_id"]: r for r in json.loads(out)}
    assert code == 0 and set(listed) == {"acc", "ign", "png", "forged", "badjson"}
    assert listed["acc"]["status"] == "accepted" and listed["acc"]["dispatches"] == 3
    assert listed["ign"]["status"] == "ignored" and "action 'edited' is not forwarded" in listed["ign"]["reason"]
    assert listed["png"]["status"] == "ignored" and listed["png"]["reason"] == "ping"
    assert listed["forged"]["status"] == "rejected" and listed["forged"]["reason"] == "401: signature does not match"
    assert listed["badjson"]["reason"] == "400: body is not JSON"

    code, out, _ = run(["deliveries", "list", "--status", "rejected", "--json"], capsys)
    assert {r["delivery_id"] for r in json.loads(out)} == {"forged", "badjson"}
    code, out, _ = run(["deliveries", "list", "--event", "ping", "--json"], capsys)
    assert [r["delivery_id"] for r in json.loads(out)] == ["png"]
    code, out, _ = run(["deliveries", "list", "--event", "push", "--status", "accepted", "--json"], capsys)
    assert code == 0 and json.loads(out) == []
    code, out, _ = run(["deliveries", "list"], capsys)  # the table names every one
    assert code == 0 and "5 deliveries" in out and "rejected" in out and "ignored" in out


def test_show_gives_the_dispatches_or_the_rejection(relay, capsys):
    client = relay
    post_webhook(client, "pull_request", pr_payload(), delivery="acc")
    post_webhook(client, "pull_request", pr_payload(), delivery="forged", secret="nope")
    _stop(client)
    code, out, _ = run(["deliveries", "show", "acc"], capsys)
    shown = json.loads(out)
    assert code == 0 and shown["status"] == "accepted"
    assert [d["target"] for d in shown["dispatch_rows"]] == ["org/l2", "org/l3", "org/l4"]
    code, out, _ = run(["deliveries", "show", "forged"], capsys)
    assert code == 0 and json.loads(out)["status"] == "rejected" and json.loads(out)["status_code"] == 401
    code, _, err = run(["deliveries", "show", "nothing-like-it"], capsys)
    assert code == 2 and "no delivery 'nothing-like-it'" in err and "hint:" in err


def test_bad_status_filter_is_bad_input(relay, capsys):
    code, _, err = run(["deliveries", "list", "--status", "lost"], capsys)
    assert code == 2 and "unknown status 'lost'" in err


def test_a_flood_of_rejections_is_folded_and_capped(relay, capsys, monkeypatch):
    from relay import group_commit

    client = relay
    monkeypatch.setattr(group_commit, "REJECTED_KEEP", 5)
    n = 60
    for i in range(n):
        assert post_webhook(client, "push", {}, delivery=f"f{i}", secret="attacker").status_code == 401
    _stop(client)
    code, out, _ = run(["deliveries", "list", "--status", "rejected", "--limit", "1000", "--json"], capsys)
    rows = json.loads(out)
    # at most the cap is kept, and far fewer rows than requests were written (rate limit)
    assert code == 0 and 1 <= len(rows) <= 5
    assert all(r["status_code"] == 401 for r in rows)
    assert client.app.state.runtime.metrics.deliveries.labels("push", "rejected_401")._value.get() == n


def test_event_names_with_digits_are_accepted_and_recorded(relay, capsys):
    client = relay
    for event in ("projects_v2_item", "projects_v2", "projects_v2_status_update"):
        r = post_webhook(client, event, {"action": "edited", "repository": {"full_name": "pytorch/pytorch"}},
                         delivery=f"e-{event}")
        assert r.status_code == 200 and r.json()["status"] == "ignored"
    assert post_webhook(client, "Projects-V2", {}, delivery="upper").status_code == 400
    _stop(client)
    code, out, _ = run(["deliveries", "list", "--event", "projects_v2_item", "--json"], capsys)
    (row,) = json.loads(out)
    assert row["status"] == "ignored" and "is not dispatched" in row["reason"]
