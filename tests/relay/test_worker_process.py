"""`crcr serve`'s worker is a supervised child process: it sends, is restarted when killed, exits with serve."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from relay.intake import sign
from tests.conftest import ROOT
from tests.relay.harness import pr_payload, wait_for


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(x) for x in (task / "children").read_text().split()]
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_worker_child_sends_restarts_and_stops_with_serve(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRCR_")}
    env.update(CRCR_DATA_DIR=str(tmp_path / "data"), CRCR_LOG_FORMAT="json", CRCR_WEBHOOK_SECRET="s")
    proc = subprocess.Popen([sys.executable, "-m", "crcr.cli.main", "serve", "--port", "0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    received = tmp_path / "data" / "downstream" / "received" / "snpu"
    children: list[int] = []
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            m = re.search(r"(http://127\.0\.0\.1:\d+)", proc.stdout.readline())
            url = m.group(1) if m else None
        assert url
        import threading

        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()

        def post(delivery: str) -> None:
            body = json.dumps(pr_payload()).encode()
            r = httpx.post(f"{url}/webhook", content=body, headers={
                "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": sign(b"s", body)})
            assert r.status_code == 202

        (child,) = wait_for(lambda: _children(proc.pid), timeout=30, what="the worker child")
        children.append(child)
        # it lowers its own priority once started, before it consumes anything
        wait_for(lambda: os.getpriority(os.PRIO_PROCESS, child) > os.getpriority(os.PRIO_PROCESS, proc.pid),
                 timeout=60, what="the child to be niced")
        post("before-kill")
        wait_for(lambda: list(received.glob("before-kill-*.json")), timeout=60, what="the child to send")
        os.kill(child, signal.SIGKILL)
        (new,) = wait_for(lambda: [c for c in _children(proc.pid) if c != child and _alive(c)], timeout=30,
                          what="a new worker child")
        children.append(new)
        post("after-kill")
        wait_for(lambda: list(received.glob("after-kill-*.json")), timeout=60, what="the new child to send")
    finally:
        proc.terminate()
        proc.wait(30)
    wait_for(lambda: not any(_alive(c) for c in children), timeout=30, what="the children to exit with serve")
