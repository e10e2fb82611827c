"""Whole flows through a real consumer: SqliteHuey (default) and RedisHuey."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from relay.app import create_app
from tests.relay.harness import make_settings, post_webhook, pr_payload, rows, wait_for

FOUR = "L1:\n  - org/a\n  - org/b\nL2:\n  - org/c\nL4:\n  - org/d\n"


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def queue_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.db'}"
    return request.getfixturevalue("redis_url")


def test_deliveries_reach_every_target_through_the_consumer(tmp_path, fake_github, queue_url):
    settings = make_settings(tmp_path, allowlist=FOUR, queue_url=queue_url, github_url=fake_github.url,
                             app_id=fake_github.app_id, key=fake_github.private_key_pem)
    fake_github.latency_s = 0.2  # long enough that parallel sends overlap at the fake
    with TestClient(create_app(settings, workers=4, start_sweeper=False)) as client:
        runtime = client.app.state.runtime
        for i in range(3):
            assert post_webhook(client, "pull_request", pr_payload(number=i), delivery=f"q{i}").status_code == 202
        wait_for(lambda: all(r.state == "sent" for r in rows(runtime)) and len(rows(runtime)) == 12,
                 what="12 dispatches sent")
        assert client.get("/readyz").json()["checks"] == {"database": "ok", "queue": "ok", "allowlist": "ok"}
        metrics = client.get("/metrics").text
    got = sorted((c.body["client_payload"]["delivery_id"], c.path) for c in fake_github.dispatches())
    assert got == sorted((f"q{i}", f"/repos/org/{t}/dispatches") for i in range(3) for t in "abcd")
    assert fake_github.max_in_flight >= 2  # targets go out in parallel, one task per row
    assert 'crcr_dispatches_total{kind="github",result="sent"} 12.0' in metrics
    assert "crcr_dispatch_latency_seconds_count 12.0" in metrics


def test_retry_is_scheduled_through_the_queue(tmp_path, fake_github, queue_url):
    settings = make_settings(tmp_path, allowlist="L1:\n  - org/a\n", queue_url=queue_url,
                             github_url=fake_github.url, app_id=fake_github.app_id,
                             key=fake_github.private_key_pem)
    fake_github.add_fault("POST", r"/dispatches$", status=500, times=2)
    with TestClient(create_app(settings, workers=2, start_sweeper=False)) as client:
        runtime = client.app.state.runtime
        post_webhook(client, "pull_request", pr_payload(), delivery="r1")
        row = wait_for(lambda: [r for r in rows(runtime) if r.state == "sent"], what="sent after retries")[0]
    assert row.attempts == 3 and len(fake_github.dispatches()) == 3


def test_local_target_runs_its_command_with_the_payload_on_stdin(tmp_path):
    script = tmp_path / "record.py"
    out = tmp_path / "got.json"
    script.write_text(f"import sys, pathlib; pathlib.Path({str(out)!r}).write_text(sys.stdin.read())\n"
                      "sys.exit(0)\n")
    fail = tmp_path / "fail.py"
    fail.write_text("import sys; sys.stderr.write('backend is broken\\n'); sys.exit(3)\n")
    import sys

    allow = (f"L1:\n  - local/ok\n  - local/bad\ncrcr:\n  targets:\n"
             f"    local/ok:\n      kind: local\n      command: [{sys.executable!r}, {str(script)!r}]\n"
             f"    local/bad:\n      kind: local\n      command: [{sys.executable!r}, {str(fail)!r}]\n")
    settings = make_settings(tmp_path, allowlist=allow, dispatch_max_attempts=2)
    with TestClient(create_app(settings, workers=2, start_sweeper=False)) as client:
        runtime = client.app.state.runtime
        post_webhook(client, "pull_request", pr_payload(), delivery="loc")
        wait_for(lambda: {r.target: r.state for r in rows(runtime)} == {"local/ok": "sent", "local/bad": "dead"},
                 what="local targets settled")
    import json

    assert json.loads(out.read_text())["delivery_id"] == "loc"
    bad = next(r for r in rows(runtime) if r.target == "local/bad")
    assert bad.last_status == 3 and "exited with 3" in bad.last_error and "backend is broken" in bad.last_error
