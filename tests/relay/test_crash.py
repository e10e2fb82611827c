"""Crash: 500 signed deliveries to 3 targets while a `crcr worker` is SIGKILLed and restarted.

Afterwards every (delivery, target) pair reached the fake GitHub at least once.
Duplicates are allowed only where a response was lost: injected lost responses, or
the rows the killed worker held in flight (sent, but killed before recording it).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from crcr.store.deliveries import Dispatch
from relay.app import create_app
from relay.runtime import utc_clock
from tests.conftest import ROOT
from tests.relay.harness import SECRET, UPSTREAM, make_settings, post_webhook, pr_payload, wait_for

N = 500
TARGETS = ("org/a", "org/b", "org/c")
ALLOW = "L1:\n" + "".join(f"  - {t}\n" for t in TARGETS)


def _worker(settings, env_extra, log) -> subprocess.Popen:
    env = {**os.environ, **env_extra}
    return subprocess.Popen([sys.executable, "-m", "crcr.cli.main", "worker", "--workers", "4", "--no-migrate"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_sigkilled_worker_loses_nothing(tmp_path, fake_github):
    gh = fake_github
    settings = make_settings(tmp_path, allowlist=ALLOW, github_url=gh.url, app_id=gh.app_id,
                             key=gh.private_key_pem, dispatch_timeout_s=1, sweeper_interval_s=0.5,
                             sweeper_stale_after_s=2, dispatch_backoff_base_s=0.1, dispatch_backoff_max_s=0.5,
                             dispatch_max_attempts=50)
    env = {
        "CRCR_DATA_DIR": str(settings.data_dir), "CRCR_DATABASE_URL": settings.resolved_database_url,
        "CRCR_QUEUE_URL": settings.resolved_queue_url, "CRCR_QUEUE_NAME": settings.queue_name,
        "CRCR_ALLOWLIST": settings.allowlist, "CRCR_WEBHOOK_SECRET": SECRET, "CRCR_UPSTREAM_REPO": UPSTREAM,
        "CRCR_GITHUB_API_URL": gh.url, "CRCR_GITHUB_APP_ID": gh.app_id, "CRCR_GITHUB_PRIVATE_KEY": gh.private_key_pem,
        "CRCR_DISPATCH_TIMEOUT_S": "1", "CRCR_DISPATCH_BACKOFF_BASE_S": "0.1", "CRCR_DISPATCH_BACKOFF_MAX_S": "0.5",
        "CRCR_DISPATCH_MAX_ATTEMPTS": "50", "CRCR_LOG_FORMAT": "json", "CRCR_CONFIG": "",
    }
    gh.add_fault("POST", r"/dispatches$", lose_response=True, times=8)
    gh.add_fault("POST", r"/dispatches$", status=502, times=8)
    # each send takes a while, so the worker always has rows claimed and unrecorded when it dies
    gh.latency_s = 0.05
    workers: list[subprocess.Popen] = []
    log = (tmp_path / "worker.log").open("w")
    # the API process: intake plus the sweeper (no consumer: the worker subprocess sends)
    with TestClient(create_app(settings, start_worker=False, start_sweeper=True)) as client:
        runtime = client.app.state.runtime
        try:
            workers.append(_worker(settings, env, log))
            for i in range(N // 2):
                assert post_webhook(client, "pull_request", pr_payload(number=i), delivery=f"c{i}").status_code == 202
            wait_for(lambda: len(gh.dispatches()) >= 300, timeout=60, what="the worker to be busy")
            workers[0].send_signal(signal.SIGKILL)
            workers[0].wait()
            now = utc_clock()
            with runtime.sessions() as s:  # what the dead worker held: sent maybe, never recorded
                in_flight = set(s.execute(select(Dispatch.delivery_id, Dispatch.target)
                                          .where(Dispatch.claimed_until > now, Dispatch.state != "sent")).all())
            killed_at = len(gh.dispatches())
            for i in range(N // 2, N):
                assert post_webhook(client, "pull_request", pr_payload(number=i), delivery=f"c{i}").status_code == 202
            workers.append(_worker(settings, env, log))

            def settled() -> bool:
                with runtime.sessions() as s:
                    return s.scalar(select(func.count()).where(Dispatch.state != "sent")) == 0

            try:
                wait_for(settled, timeout=80, what="every dispatch sent")
            except AssertionError:
                with runtime.sessions() as s:
                    states = s.execute(select(Dispatch.state, func.count()).group_by(Dispatch.state)).all()
                tail = (tmp_path / "worker.log").read_text()[-3000:]
                raise AssertionError(f"not settled: {states}; worker log tail:\n{tail}") from None
        finally:
            for w in workers:
                if w.poll() is None:
                    w.send_signal(signal.SIGKILL)
                    w.wait()
    # the kill landed mid-run: after the worker was busy, before it had sent the first half
    # (only N // 2 deliveries existed when it died), with rows claimed and not yet recorded
    assert 300 <= killed_at < (N // 2) * len(TARGETS), killed_at
    assert in_flight, "the kill found no row in flight: it did not interrupt a send"
    assert len(in_flight) <= 4 * len(TARGETS)  # at most one delivery (its rows sent together) per worker thread
    ok = collections.Counter()
    lost = set()
    for call in gh.dispatches():
        if not isinstance(call.body, dict):  # cut short by the SIGKILL: never a valid request
            assert call.status != 204
            continue
        pair = (call.body["client_payload"]["delivery_id"], call.path.split("/")[2] + "/" + call.path.split("/")[3])
        if call.status == 204:
            ok[pair] += 1
        if call.fault == "lose_response":
            lost.add(pair)
    expected = {(f"c{i}", t) for i in range(N) for t in TARGETS}
    assert set(ok) == expected  # every pair arrived
    duplicates = {p for p, n in ok.items() if n > 1}
    assert duplicates <= lost | in_flight, f"unexplained duplicates: {sorted(duplicates - lost - in_flight)}"
    assert len(lost) == 8
    print(f"crash: {len(expected)} pairs, {len(duplicates)} duplicates ({len(lost)} lost responses, "
          f"{len(in_flight)} in flight at the kill), {len(gh.dispatches())} requests")
