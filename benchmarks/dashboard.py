"""Dashboard page time on a store of 10,000 deliveries, against the same pages on 100.

Seeds two SQLite stores through the real models (migrated by crcr's own migrations):
N upstream deliveries (a PR opened then synchronized, or a trunk push), each
dispatched to 4 backends, with a completed job for 3 of them. Then `crcr serve
--no-worker` serves each store on loopback and a client fetches each page
sequentially (one request in flight: the server, not the client, is measured).
Reports the median and p95 per page and the ratio 10,000 / 100: paging should keep
it near 1 (page 10 needs ~750 deliveries, so the small store is 1,000 by default).

    .venv/bin/python benchmarks/dashboard.py [--deliveries 10000] [--small 1000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from crcr.store.base import make_engine  # noqa: E402
from crcr.store.deliveries import Delivery, Dispatch  # noqa: E402
from crcr.store.jobs import Job  # noqa: E402
from crcr.store.migrate import upgrade  # noqa: E402

BACKENDS = ["org/npu-a", "org/npu-b", "org/npu-c", "org/npu-d"]


def seed(data: Path, n: int) -> None:
    engine = make_engine(f"sqlite:///{data / 'crcr.db'}")
    upgrade(engine)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    deliveries, dispatches, jobs = [], [], []
    for i in range(n):
        at = start + dt.timedelta(seconds=30 * i)
        sha = f"{i:040x}"
        if i % 3 == 2:
            d = {"id": f"d{i}", "event": "push", "action": None, "repo": "pytorch/pytorch", "pr_number": None,
                 "head_sha": sha, "ref": "refs/heads/main"}
        else:  # a PR: opened, then synchronized (two deliveries on one row)
            d = {"id": f"d{i}", "event": "pull_request", "action": "opened" if i % 3 == 0 else "synchronize",
                 "repo": "pytorch/pytorch", "pr_number": 100000 + i // 3, "head_sha": sha, "ref": "feature"}
        deliveries.append({**d, "labels": [], "payload": json.dumps({"n": i}), "payload_bytes": 10,
                           "received_at": at, "status": "accepted"})
        for b, backend in enumerate(BACKENDS):
            dispatches.append({"delivery_id": f"d{i}", "target": backend, "kind": "github", "level": 4,
                               "event_type": d["event"], "state": "sent", "attempts": 1, "next_attempt_at": at,
                               "created_at": at, "updated_at": at, "sent_at": at})
            if b < 3:
                failed = 1 if (i + b) % 7 == 0 else 0
                jobs.append({"delivery_id": f"d{i}", "repo": backend, "run_id": str(i), "run_attempt": "1",
                             "job_name": "test", "state": "completed", "event_type": d["event"],
                             "self_scheduled": False, "conclusion": "failure" if failed else "success",
                             "head_sha": sha, "pr_number": d["pr_number"], "passed": 100, "failed": failed,
                             "skipped": 3, "updated_at": at, "failed_tests": []})
    with engine.begin() as conn:
        conn.execute(insert(Delivery), deliveries)
        conn.execute(insert(Dispatch), dispatches)
        conn.execute(insert(Job), jobs)
    engine.dispose()


def serve(data: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    allow = data / "allowlist.yaml"
    allow.write_text("L1: []\nL2: []\nL3: {}\nL4:\n" + "".join(f"  - {b}: oncall\n" for b in BACKENDS))
    env = {**os.environ, "CRCR_DATA_DIR": str(data), "CRCR_ALLOWLIST": str(allow), "CRCR_WEBHOOK_SECRET": "x",
           "CRCR_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "crcr.cli.main", "serve", "--port", str(port), "--no-worker",
                             "--no-sweeper"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("crcr serve did not start")


def measure(url: str, paths: list[str], repeat: int) -> dict[str, tuple[float, float]]:
    out = {}
    with httpx.Client(base_url=url, timeout=30) as client:
        for path in paths:
            client.get(path).raise_for_status()  # warm
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                client.get(path).raise_for_status()
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            out[path] = (statistics.median(times), times[int(0.95 * (len(times) - 1))])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deliveries", type=int, default=10_000)
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="crcr-dash-") as tmp:
        for n in (args.small, args.deliveries):
            data = Path(tmp) / str(n)
            data.mkdir()
            t0 = time.perf_counter()
            seed(data, n)
            print(f"seeded {n} deliveries ({n * len(BACKENDS)} dispatches, {n * 3} jobs) in {time.perf_counter() - t0:.1f}s")
            proc, url = serve(data)
            try:
                pr = 100000 + (n - 1) // 3
                paths = ["/dashboard", "/dashboard.json", "/dashboard?page=10", f"/dashboard/pr/{pr}",
                         f"/dashboard/jobs/{n * 3 - 1}", f"/dashboard/jobs/{n * 3 - 1}.json"]
                results[n] = measure(url, paths, args.repeat)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
    small, big = results[args.small], results[args.deliveries]
    print(f"\n| page | median ms at {args.small} | median ms at {args.deliveries} | p95 ms at {args.deliveries} | ratio |")
    print("|---|---:|---:|---:|---:|")
    for (path_s, (med_s, _)), (path_b, (med_b, p95_b)) in zip(small.items(), big.items(), strict=True):
        label = path_b.replace(str(args.deliveries * 3 - 1), "N").replace(str(100000 + (args.deliveries - 1) // 3), "N")
        print(f"| `{label}` | {med_s:.1f} | {med_b:.1f} | {p95_b:.1f} | {med_b / med_s:.2f} |")


if __name__ == "__main__":
    main()
