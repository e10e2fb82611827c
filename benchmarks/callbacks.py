"""Callback throughput and latency of `crcr serve` against a bare OIDC-checking endpoint.

Both servers run the same stack (uvicorn + FastAPI on loopback) and verify the same
RS256 OIDC tokens against a cached JWKS from a local issuer. The baseline only verifies
the token and answers; crcr also checks the allowlist and rate limit, runs the job
state machine on SQLite (durable, WAL) and logs the call. Each job sends `in_progress`
then `completed`. The L4 run adds a check run per job on a local GitHub (create +
update through PyGithub). Tokens are minted before timing.

    .venv/bin/python benchmarks/callbacks.py [--jobs 300] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402

from crcr.settings import Settings  # noqa: E402
from crcr.store.deliveries import Delivery, Dispatch  # noqa: E402
from relay.app import create_app  # noqa: E402
from relay.oidc import OidcVerifier, Provider  # noqa: E402
from relay.runtime import Runtime  # noqa: E402
from tests.fakes.github import FakeGitHub  # noqa: E402
from tests.fakes.oidc import FakeIssuer  # noqa: E402

AUD = "pytorch-cross-repo-ci-relay"
ALLOWLIST = "L2:\n  - org/l2repo\nL4:\n  - org/l4repo\n"


def serve(app) -> tuple[uvicorn.Server, str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def baseline_app(verifier: OidcVerifier) -> FastAPI:
    app = FastAPI()

    @app.post("/callback")
    async def callback(request: Request) -> JSONResponse:
        await request.body()
        verifier.verify(request.headers.get("authorization"))
        return JSONResponse({"ok": True})

    return app


def body(delivery: str, status: str, job: int) -> dict:
    return {"event_type": "pull_request", "delivery_id": delivery,
            "workflow": {"schema_version": "1", "status": status, "conclusion": "success" if status == "completed" else None,
                         "name": "CI", "run_id": str(1000 + job), "run_attempt": "1", "job_name": "build",
                         "url": f"https://github.com/org/repo/actions/runs/{1000 + job}",
                         "test_results": {"passed": 10, "failed": 0, "skipped": 1} if status == "completed" else None}}


def drive(url: str, requests: list[tuple[dict, str]], concurrency: int) -> tuple[float, list[float]]:
    """Send (body, token) pairs; each job's in_progress precedes its completed (phases in order)."""
    half = len(requests) // 2
    latencies: list[float] = []
    lock = threading.Lock()
    local = threading.local()

    def one(item: tuple[dict, str]) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(timeout=30)
        start = time.perf_counter()
        r = client.post(f"{url}/callback", json=item[0], headers={"Authorization": f"Bearer {item[1]}"})
        elapsed = time.perf_counter() - start
        if r.status_code != 200:
            raise SystemExit(f"callback answered {r.status_code}: {r.text[:300]}")
        with lock:
            latencies.append(elapsed)

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, requests[:half]))
        list(pool.map(one, requests[half:]))
    return time.perf_counter() - start, latencies


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    rows = []
    with FakeIssuer() as issuer, FakeGitHub() as gh, tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "allowlist.yaml").write_text(ALLOWLIST)
        settings = Settings(data_dir=Path(tmp) / "data", allowlist=str(Path(tmp) / "allowlist.yaml"),
                            oidc_issuers=[issuer.url], webhook_secret="x", callback_rate_per_minute=10**6,
                            github_api_url=gh.url, github_app_id=gh.app_id, github_private_key=gh.private_key_pem)
        runtime = Runtime.from_settings(settings)
        crcr_server, crcr_url = serve(create_app(settings, runtime=runtime, start_worker=False, start_sweeper=False))
        base_server, base_url = serve(baseline_app(OidcVerifier([Provider(issuer.url, issuer.jwks_uri)], AUD)))
        now = dt.datetime.now(dt.UTC)
        with runtime.sessions.begin() as s:
            for repo in ("org/l2repo", "org/l4repo"):
                for j in range(args.jobs):
                    d = f"{repo}-d{j}"
                    s.add(Delivery(id=d, event="pull_request", action="opened", repo="pytorch/pytorch", pr_number=j + 1,
                                   head_sha=f"{j:040x}", labels=[], payload="{}", payload_bytes=2, received_at=now))
                    s.flush()
                    s.add(Dispatch(delivery_id=d, target=repo, kind="github", level=2, event_type="pull_request",
                                   state="sent", attempts=1, created_at=now, updated_at=now, sent_at=now,
                                   next_attempt_at=now))

        def workload(repo: str) -> list[tuple[dict, str]]:
            return [(body(f"{repo}-d{j}", status, j), issuer.mint(repository=repo, expires_in=3600))
                    for status in ("in_progress", "completed") for j in range(args.jobs)]

        warm = [(body("warm", "queued", 0), issuer.mint(repository="org/l2repo"))]
        drive(base_url, warm * 2, 1)
        base_s, base_lat = drive(base_url, workload("org/l2repo"), args.concurrency)
        l2_s, l2_lat = drive(crcr_url, workload("org/l2repo"), args.concurrency)
        l4_s, l4_lat = drive(crcr_url, workload("org/l4repo"), args.concurrency)
        n = 2 * args.jobs
        for name, secs, lat in (("baseline (verify token only)", base_s, base_lat),
                                ("crcr L2 (state machine, SQLite)", l2_s, l2_lat),
                                ("crcr L4 (+ check run on local GitHub)", l4_s, l4_lat)):
            rows.append((name, n / secs, pct(lat, 50), pct(lat, 99)))
        checks = len(gh.calls("POST", r"/check-runs$")) + len(gh.calls("PATCH", r"/check-runs/"))
        crcr_server.should_exit = base_server.should_exit = True
    print(f"{n} callbacks per run ({args.jobs} jobs x in_progress+completed), concurrency {args.concurrency}")
    print(f"{'':40} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for name, rps, p50, p99 in rows:
        print(f"{name:40} {rps:8.0f} {p50:8.1f} {p99:8.1f}")
    print(f"ratio crcr L2 / baseline throughput: {rows[1][1] / rows[0][1]:.2f}")
    print(f"ratio crcr L4 / baseline throughput: {rows[2][1] / rows[0][1]:.2f}  ({checks} check-run requests)")


if __name__ == "__main__":
    main()
