"""Fan-out benchmark: webhook -> all 32 targets dispatched, as a multiple of one round trip.

The fake GitHub adds 50 ms to every request. One round trip is measured in the same
run (one warm-token `repository_dispatch` through PyGithub). `crcr serve` (SQLite
default, CRCR_WORKERS=32) gets a pull_request webhook; the clock stops when the fake
has answered all 32 dispatches. Cold: the first webhook after start (installation
lookups and token mints on the way); warm: later webhooks (tokens cached).

    .venv/bin/python benchmarks/relay_fanout.py [--targets 32] [--latency 0.05] [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from relay_common import ROOT, start_server, stop

from tests.fakes.github import FakeGitHub

SECRET = "bench-secret"
DEBUG = "--debug" in sys.argv


def post(client: httpx.Client, url: str, delivery: str, number: int) -> float:
    p = json.loads((ROOT / "tests/fixtures/webhooks/octokit-webhooks/pull_request/opened.payload.json").read_text())
    p["repository"]["full_name"] = "pytorch/pytorch"
    p["pull_request"]["author_association"] = "MEMBER"
    p["number"] = number
    body = json.dumps(p).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    # one client for the run, like GitHub's sender: building an httpx.Client (its TLS
    # context) takes 20-100+ ms of the sender's CPU, which is no part of the relay's time
    t0 = time.perf_counter()
    r = client.post(url + "/webhook", content=body, headers={
        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sig})
    assert r.status_code == 202, r.text
    if DEBUG:
        print(f"  {delivery}: webhook answered in {(time.perf_counter() - t0) * 1000:.0f} ms")
    return t0


def wait_all(gh: FakeGitHub, delivery: str, n: int, t0: float) -> float:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = [c for c in gh.dispatches() if c.responded and c.status == 204
                and c.body["client_payload"]["delivery_id"] == delivery]
        if len(done) >= n:
            # convert the fake's wall-clock stamps to the perf_counter timeline
            last = max(c.done_at for c in done)
            if DEBUG:
                off = time.time() - time.perf_counter()
                arr = sorted((c.at - off - t0) * 1000 for c in done)
                print(f"  {delivery}: arrivals {arr[0]:.0f}..{arr[-1]:.0f} ms, p50 {arr[len(arr) // 2]:.0f}")
            return last - (time.time() - time.perf_counter()) - t0
        time.sleep(0.05)  # the fake's own timestamps give the end time; polling less leaves it the CPU
    raise RuntimeError(f"{delivery}: not all {n} dispatches arrived")


def round_trip(gh: FakeGitHub) -> float:
    from crcr.github import GitHubApp
    from crcr.github.dispatch import send_repository_dispatch

    app = GitHubApp(gh.app_id, gh.private_key_pem, gh.url)
    cp = {"event_type": "pull_request", "delivery_id": "rt", "payload": {}}
    send_repository_dispatch(app, "org/rt", "pull_request", cp)  # warm token and connection
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        send_repository_dispatch(app, "org/rt", "pull_request", cp)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--debug", action="store_true", help="print when the dispatches arrived")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeGitHub() as gh:
        gh.latency_s = args.latency
        # one installation per target org: a cold start mints one token per target
        for i in range(args.targets):
            gh.set_installation(f"org{i}/backend", 100 + i)
        rt = round_trip(gh)
        allow = Path(tmp) / "allowlist.yaml"
        allow.write_text("L1:\n" + "".join(f"  - org{i}/backend\n" for i in range(args.targets)))
        env = {"CRCR_DATA_DIR": str(Path(tmp) / "data"), "CRCR_WEBHOOK_SECRET": SECRET, "CRCR_ALLOWLIST": str(allow),
               "CRCR_GITHUB_API_URL": gh.url, "CRCR_GITHUB_APP_ID": gh.app_id,
               "CRCR_GITHUB_PRIVATE_KEY": gh.private_key_pem, "CRCR_WORKERS": str(args.targets),
               "CRCR_LOG_LEVEL": "INFO"}
        proc, url = start_server([sys.executable, "-m", "crcr.cli.main", "serve", "--port", "0"], env)
        client = httpx.Client(timeout=30)
        try:
            time.sleep(1.0)  # let the consumer's workers reach their idle wait
            cold = wait_all(gh, "cold", args.targets, post(client, url, "cold", 1))
            warm = []
            for r in range(args.rounds):
                time.sleep(0.5)
                warm.append(wait_all(gh, f"warm{r}", args.targets, post(client, url, f"warm{r}", 2 + r)))
        finally:
            client.close()
            stop(proc)
    w = statistics.median(warm)
    print(f"fan-out to {args.targets} targets, fake GitHub latency {args.latency * 1000:.0f} ms per request")
    print(f"one round trip (warm token, PyGithub): {rt * 1000:.1f} ms")
    print(f"warm tokens: median {w * 1000:.0f} ms over {args.rounds} webhooks = {w / rt:.1f}x one round trip "
          f"(aim <= 3x); runs: {', '.join(f'{x * 1000:.0f}' for x in warm)} ms")
    print(f"cold tokens (first webhook: {args.targets} installation lookups + token mints): {cold * 1000:.0f} ms "
          f"= {cold / rt:.1f}x one round trip")


if __name__ == "__main__":
    main()
