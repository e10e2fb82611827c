"""Intake benchmark: signed deliveries/s and p50/p99 ack latency of `crcr serve` vs a bare baseline.

Both servers run the same stack (uvicorn, one process, loopback). The baseline is a
FastAPI endpoint that only checks the HMAC and answers 202; `crcr serve` runs as
users run it: SQLite (WAL) default, in-process worker and sweeper, dispatching each
delivery to one GitHub target on a local fake GitHub (so the worker competes for
the same CPU as the intake).

    .venv/bin/python benchmarks/relay_intake.py [--requests 2000] [--concurrency 16] [--rate 20]

Throughput is saturated (closed loop); ack latency is measured open loop at a steady
rate, as GitHub sends webhooks, so it is not inflated by the client's own queueing.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from fastapi import FastAPI, Request, Response
from relay_common import ROOT, percentile, start_server, stop

SECRET = "bench-secret"


def bare_app() -> FastAPI:  # the baseline, run with --serve-bare
    app = FastAPI()

    @app.post("/webhook")
    async def webhook(request: Request) -> Response:
        body = await request.body()
        sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(sig, request.headers.get("x-hub-signature-256", "")):
            return Response(status_code=401)
        return Response(b'{"status":"accepted"}', status_code=202, media_type="application/json")

    return app


def payload(i: int) -> bytes:
    fixture = ROOT / "tests/fixtures/webhooks/octokit-webhooks/pull_request/opened.payload.json"
    p = json.loads(fixture.read_text())
    p["repository"]["full_name"] = "pytorch/pytorch"
    p["pull_request"]["author_association"] = "MEMBER"
    p["number"] = p["pull_request"]["number"] = i
    return json.dumps(p).encode()


async def load(url: str, n: int, concurrency: int) -> tuple[float, list[float]]:
    import httpx

    bodies = [payload(i) for i in range(n)]
    latencies: list[float] = []
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for b in bodies:
        queue.put_nowait(b)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            body = queue.get_nowait()
            headers = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": str(uuid.uuid4()),
                       "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest(),
                       "Content-Type": "application/json"}
            t0 = time.perf_counter()
            r = await client.post(url + "/webhook", content=body, headers=headers)
            latencies.append(time.perf_counter() - t0)
            if r.status_code not in (200, 202):
                raise RuntimeError(f"unexpected {r.status_code}: {r.text}")

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        start = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return elapsed, latencies


async def paced(url: str, n: int, rate: float) -> list[float]:
    """Open-loop load: one delivery every 1/rate seconds (as GitHub sends them), latencies."""
    import httpx

    latencies: list[float] = []

    async def one(client: httpx.AsyncClient, i: int, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        body = payload(i)
        headers = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": str(uuid.uuid4()),
                   "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()}
        t0 = time.perf_counter()
        r = await client.post(url + "/webhook", content=body, headers=headers)
        latencies.append(time.perf_counter() - t0)
        assert r.status_code in (200, 202), r.text

    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=64)) as client:
        start = time.perf_counter() + 0.2
        await asyncio.gather(*(one(client, i, start + i / rate) for i in range(n)))
    return latencies


def measure(name: str, url: str, n: int, concurrency: int, rate: float | None = None,
            drained=None) -> dict[str, float]:
    """Saturated throughput with `concurrency` clients, then ack latency at a steady `rate`/s."""
    asyncio.run(load(url, min(200, n), concurrency))  # warm up connections and caches
    elapsed, _ = asyncio.run(load(url, n, concurrency))
    rps = n / elapsed
    if drained is not None:  # let the worker finish the saturated phase's backlog first
        deadline = time.monotonic() + 300
        while not drained() and time.monotonic() < deadline:
            time.sleep(0.2)
    time.sleep(1)
    lat = asyncio.run(paced(url, max(200, n // 4), rate or rps / 2))
    return {"name": name, "rps": rps, "rate": rate or rps / 2,
            "p50_ms": percentile(lat, 50) * 1000, "p99_ms": percentile(lat, 99) * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rate", type=float, default=20.0,
                    help="deliveries/s of the steady phase that measures ack latency (both servers)")
    ap.add_argument("--serve-bare", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_bare:
        import uvicorn

        uvicorn.run(bare_app(), host="127.0.0.1", port=0, log_level="info", access_log=False)
        return

    from tests.fakes.github import FakeGitHub

    results = []
    with tempfile.TemporaryDirectory() as tmp, FakeGitHub() as gh:
        proc, url = start_server([sys.executable, str(Path(__file__).resolve()), "--serve-bare"], {})
        try:
            results.append(measure("bare FastAPI + HMAC (baseline)", url, args.requests, args.concurrency,
                                   rate=args.rate))
        finally:
            stop(proc)
        allow = Path(tmp) / "allowlist.yaml"
        allow.write_text("L1:\n  - org/target\n")
        env = {"CRCR_DATA_DIR": str(Path(tmp) / "data"), "CRCR_WEBHOOK_SECRET": SECRET,
               "CRCR_ALLOWLIST": str(allow), "CRCR_GITHUB_API_URL": gh.url, "CRCR_GITHUB_APP_ID": gh.app_id,
               "CRCR_GITHUB_PRIVATE_KEY": gh.private_key_pem, "CRCR_LOG_LEVEL": "WARNING"}
        proc, url = start_server([sys.executable, "-m", "crcr.cli.main", "serve", "--port", "0"],
                                 {**env, "CRCR_LOG_LEVEL": "INFO"})
        try:
            posted = min(200, args.requests) + args.requests
            results.append(measure("crcr serve (SQLite, durable, worker on)", url, args.requests, args.concurrency,
                                   rate=args.rate, drained=lambda: len(gh.dispatches()) >= posted))
        finally:
            stop(proc)
        sent = len(gh.dispatches())
    base, crcr = results
    print(f"throughput: {args.requests} deliveries from {args.concurrency} concurrent clients; "
          f"ack latency: a steady {args.rate:g} deliveries/s (the worker dispatching meanwhile)")
    print(f"{'server':45} {'deliveries/s':>13} {'p50 ms':>8} {'p99 ms':>8}")
    for r in results:
        print(f"{r['name']:45} {r['rps']:13.0f} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f}")
    print(f"throughput ratio crcr/baseline: {crcr['rps'] / base['rps']:.2f} "
          f"(aim >= 0.5); crcr p99 {crcr['p99_ms']:.1f} ms (aim < 50); "
          f"{sent} dispatches reached the fake GitHub during the run")


if __name__ == "__main__":
    main()
