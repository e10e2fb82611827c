"""The relay's commands: db upgrade/prune, dispatches list/show/redeliver, downstream, serve."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import time

import httpx
import pytest
from sqlalchemy import update

from crcr.cli.main import main
from crcr.settings import get_settings
from crcr.store.deliveries import Delivery, Dispatch
from crcr.store.session import engine_for, sessions_for
from relay.intake import sign
from tests.conftest import ROOT
from tests.relay.harness import pr_payload


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("CRCR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("CRCR_DATABASE_URL", raising=False)
    monkeypatch.delenv("CRCR_CONFIG", raising=False)
    monkeypatch.setenv("CRCR_QUEUE_NAME", f"cli{os.getpid()}{id(tmp_path)}")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def run(argv, capsys, stdin: str | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def _plant(states):
    """Deliveries with one dispatch each, in the given states, received 10 days ago."""
    sessions = sessions_for(engine_for(get_settings().resolved_database_url))
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=10)
    with sessions.begin() as s:
        for i, state in enumerate(states):
            s.add(Delivery(id=f"d{i}", event="pull_request", action="opened", repo="pytorch/pytorch",
                           payload=json.dumps(pr_payload()), payload_bytes=10, received_at=old, labels=[]))
            s.flush()
            s.add(Dispatch(delivery_id=f"d{i}", target="org/a", kind="github", level=1, event_type="pull_request",
                           state=state, attempts=8 if state == "dead" else 1, last_error="GitHub answered 502",
                           next_attempt_at=old, created_at=old, updated_at=old))
    return sessions


def test_db_upgrade_is_idempotent(env, capsys):
    code, out, _ = run(["db", "upgrade"], capsys)
    assert code == 0 and re.search(r"database at revision \w+", out)
    code, out2, _ = run(["db", "upgrade"], capsys)
    assert code == 0 and out2 == out


def test_dispatches_list_show_and_redeliver(env, capsys):
    run(["db", "upgrade"], capsys)
    _plant(["dead", "sent", "dead", "pending"])
    code, out, _ = run(["dispatches", "list", "--state", "dead", "--json"], capsys)
    listed = json.loads(out)  # one JSON array
    assert code == 0 and [r["delivery_id"] for r in listed] == ["d2", "d0"]
    assert listed[0]["last_error"] == "GitHub answered 502"
    code, out, _ = run(["dispatches", "show", str(listed[0]["id"])], capsys)
    shown = json.loads(out)
    assert shown["delivery"]["delivery_id"] == "d2" and shown["state"] == "dead"
    code, out, _ = run(["dispatches", "redeliver", str(listed[0]["id"])], capsys)
    assert code == 0 and "1 dispatch(es) back to pending" in out
    code, out, _ = run(["dispatches", "redeliver", "--all-dead"], capsys)
    assert code == 0 and "1 dispatch(es) back to pending" in out
    code, out, _ = run(["dispatches", "list", "--state", "dead", "--json"], capsys)
    assert code == 0 and json.loads(out) == []  # nothing matched: still one JSON document
    code, out, _ = run(["dispatches", "list"], capsys)
    assert code == 0 and "4 dispatch(es)" in out


def test_redeliver_says_so_when_the_queue_is_unreachable(env, capsys, monkeypatch):
    from relay import worker

    run(["db", "upgrade"], capsys)
    _plant(["dead"])
    monkeypatch.setattr(worker.Tasks, "enqueue", lambda self, ids: 0)
    code, out, err = run(["dispatches", "redeliver", "--all-dead"], capsys)
    assert code == 1 and "enqueued" not in out
    assert "1 dispatch(es) back to pending, but the queue could not be reached" in err


def test_dispatches_bad_input_exits_2_with_a_hint(env, capsys):
    code, _, err = run(["dispatches", "list", "--state", "lost"], capsys)
    assert code == 2 and "unknown state 'lost'" in err and "hint:" in err
    code, _, err = run(["dispatches", "redeliver"], capsys)
    assert code == 2 and "nothing to redeliver" in err
    code, _, err = run(["dispatches", "show", "999"], capsys)
    assert code == 2 and "no dispatch 999" in err


def test_prune_drops_old_payloads_but_keeps_open_ones(env, capsys):
    run(["db", "upgrade"], capsys)
    sessions = _plant(["sent", "dead", "pending"])
    code, out, _ = run(["db", "prune", "--older-than", "7", "--dry-run"], capsys)
    assert code == 0 and out.startswith("2 payload(s)")
    code, out, _ = run(["db", "prune", "--older-than", "30"], capsys)
    assert out.startswith("dropped 0")
    code, out, _ = run(["db", "prune", "--older-than", "7"], capsys)
    assert code == 0 and out.startswith("dropped 2")
    with sessions() as s:
        kept = {d.id: d.payload is not None for d in s.query(Delivery)}
    assert kept == {"d0": False, "d1": False, "d2": True}
    with sessions.begin() as s:
        s.execute(update(Dispatch).values(state="sent"))


def test_downstream_records_what_arrived(env, capsys, monkeypatch):
    cp = {"event_type": "pull_request", "delivery_id": "abc/rerun/1", "payload": {"number": 3}}
    code, out, _ = run(["downstream", "--backend", "snpu"], capsys, stdin=json.dumps(cp), monkeypatch=monkeypatch)
    assert code == 0
    (path,) = list((env / "data" / "downstream" / "received" / "snpu").glob("*.json"))
    assert path.name.startswith("abc_rerun_1-") and str(path) in out
    assert json.loads(path.read_text())["client_payload"] == cp
    code, _, err = run(["downstream"], capsys, stdin='{"event_type": "push"}', monkeypatch=monkeypatch)
    assert code == 2 and "delivery_id" in err


@pytest.mark.parametrize("cmd", ["serve", "worker", "db", "dispatches", "downstream"])
def test_every_command_explains_itself(cmd, capsys):
    code, out, _ = run([cmd, "--help"], capsys)
    assert code == 0 and len(out) > 200


@pytest.mark.slow
def test_crcr_serve_works_out_of_the_box(tmp_path):
    """No secret, no GitHub: the generated secret signs a webhook, the local target records it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRCR_")}
    env.update(CRCR_DATA_DIR=str(tmp_path / "data"), CRCR_LOG_FORMAT="json")
    proc = subprocess.Popen([sys.executable, "-m", "crcr.cli.main", "serve", "--port", "0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            m = re.search(r"(http://127\.0\.0\.1:\d+)", line)
            url = m.group(1) if m else None
        assert url, "".join(lines)
        text = "".join(lines)
        secret_file = tmp_path / "data" / "webhook-secret"
        assert f"webhook secret: generated in {secret_file}" in text
        assert oct(secret_file.stat().st_mode)[-3:] == "600"
        secret = secret_file.read_text().strip()
        assert secret not in text
        body = json.dumps(pr_payload()).encode()
        r = httpx.post(f"{url}/webhook", content=body, headers={
            "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "first-1",
            "X-Hub-Signature-256": sign(secret.encode(), body)})
        assert r.status_code == 202 and r.json()["dispatches"] == 1
        received = tmp_path / "data" / "downstream" / "received" / "snpu"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list(received.glob("first-1-*.json")):
            time.sleep(0.2)
        (rec,) = list(received.glob("first-1-*.json"))
        assert json.loads(rec.read_text())["client_payload"]["delivery_id"] == "first-1"
        assert httpx.get(f"{url}/readyz").status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)
