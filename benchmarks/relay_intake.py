"""Intake benchmark with a real load generator: `wrk` against `crcr serve` and a bare baseline.

Every request carries a real 27 KB ``pull_request`` payload (pytorch/test-infra's
``pull_request.opened.json`` fixture, from ``/work/shared/data/webhooks`` or
``tests/fixtures``), a valid ``X-Hub-Signature-256`` (the body is constant, so the
signature is computed once) and its own ``X-GitHub-Delivery`` (the Lua script numbers
them per wrk thread; the delivery id is not signed). In the same run, for each
repetition, it measures:

- the baseline: a bare FastAPI endpoint on the same uvicorn that only checks the HMAC;
- ``crcr serve`` on SQLite, ``--no-worker`` and with its worker (the README default);
- ``crcr serve`` on PostgreSQL + Redis, without and with its worker (skipped with
  ``--no-postgres`` or when PostgreSQL/Redis are not reachable).

A worker sends each delivery to one target on a local fake GitHub (in this driver's
process). After each run the stored deliveries are counted: every acknowledged (2xx)
delivery must be in the database ("lost" must be 0). The client's own CPU (wrk's
user+system seconds per second of run) is printed so a reader can see it was not the
bottleneck.

Needs ``wrk`` (Debian: ``apt-get install -y wrk``; not installed by CI)::

    .venv/bin/python benchmarks/relay_intake.py [--duration 10] [--connections 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request, Response
from relay_common import ROOT, start_server, stop

SECRET = "bench-secret"
FIXTURE_NAME = "pull_request.opened.json"
PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"

LUA = r"""
-- one delivery id per request; constant body and precomputed signature
wrk.method = "POST"
local f = assert(io.open("@BODY@", "rb"))
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-GitHub-Event"] = "pull_request"
wrk.headers["X-Hub-Signature-256"] = "@SIG@"
local threads = 0
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
local n = 0
function request()
  n = n + 1
  wrk.headers["X-GitHub-Delivery"] = "@RUN@-" .. tid .. "-" .. n
  return wrk.format()
end
"""


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


def fixture_body() -> tuple[bytes, str]:
    """The webhook body (the fixture's ``payload``) and its repository's full name."""
    candidates = [Path("/work/shared/data/webhooks/pytorch-test-infra") / FIXTURE_NAME,
                  ROOT / "tests/fixtures/webhooks/pytorch-test-infra" / FIXTURE_NAME]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        sys.exit(f"error[bench-data]: {FIXTURE_NAME} not found in {', '.join(map(str, candidates))}")
    payload = json.loads(path.read_text())["payload"]
    # the fixture's author is a first-time contributor; a member's PR is what gets dispatched
    payload["pull_request"]["author_association"] = "MEMBER"
    return json.dumps(payload).encode(), payload["repository"]["full_name"]


@dataclass
class WrkResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    errors: int
    client_cpu: float  # wrk's CPU seconds per second of wall time
    server_ms: float  # the API process's CPU milliseconds per request (its worker child not included)


def _ms(value: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value)
    if not m:
        raise ValueError(value)
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[m.group(2)]


def cpu_seconds(pid: int) -> float:
    """User+system CPU of process ``pid`` and its threads (Linux ``/proc``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(url: str, lua: Path, *, threads: int, connections: int, duration: int,
            server_pid: int | None = None) -> WrkResult:
    server0 = cpu_seconds(server_pid) if server_pid else 0.0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(lua),
                          url + "/webhook"], capture_output=True, text=True, check=True).stdout
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    server_cpu = (cpu_seconds(server_pid) - server0) if server_pid else 0.0
    dist = dict(re.findall(r"^\s+(\d+)%\s+(\S+)$", out, re.M))
    if "99" not in dist:  # no request completed (the server hung or died): show what wrk saw
        raise RuntimeError(f"wrk measured no latency against {url}:\n{out}")
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return WrkResult(rps=float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), p50_ms=_ms(dist["50"]),
                     p99_ms=_ms(dist["99"]), requests=requests, non_2xx=int(non2xx.group(1)) if non2xx else 0,
                     errors=sum(map(int, errors.groups())) if errors else 0, client_cpu=cpu / wall,
                     server_ms=1000 * server_cpu / max(1, requests))


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    import sqlalchemy as sa

    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    name = f"crcr_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def services_up() -> bool:
    try:
        import redis
        import sqlalchemy as sa

        with sa.create_engine(PG_ADMIN, connect_args={"connect_timeout": 2}).connect():
            pass
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
        return True
    except Exception:
        return False


def stored(database_url: str) -> tuple[int, dict[str, int]]:
    """Deliveries stored, and the dispatch rows by state."""
    import sqlalchemy as sa

    from crcr.store.base import make_engine

    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            states = dict(conn.execute(sa.text("SELECT state, count(*) FROM dispatches GROUP BY state")).all())
            return conn.execute(sa.text("SELECT count(*) FROM deliveries")).scalar_one(), states
    finally:
        engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions; medians are reported")
    ap.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL + Redis runs")
    ap.add_argument("--only", choices=("sqlite", "postgres"), help="run only this storage's configs (and the baseline)")
    ap.add_argument("--serve-bare", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_bare:
        import uvicorn

        uvicorn.run(bare_app(), host="127.0.0.1", port=0, log_level="info", access_log=False)
        return
    if shutil.which("wrk") is None:
        sys.exit("error[bench-tool]: wrk is not installed\nhint: apt-get install -y wrk")

    from tests.fakes.github import FakeGitHub

    body, repo = fixture_body()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    configs = [("sqlite, --no-worker", "sqlite", False), ("sqlite, worker on (default)", "sqlite", True)]
    if not args.no_postgres:
        if services_up():
            configs += [("postgres+redis, --no-worker", "postgres", False),
                        ("postgres+redis, worker on", "postgres", True)]
        else:
            print("PostgreSQL or Redis not reachable: their runs are skipped", file=sys.stderr)
    if args.only:
        configs = [c for c in configs if c[1] == args.only]
    results: dict[str, list[WrkResult]] = {"bare FastAPI + HMAC": []}
    for name, _, _ in configs:
        results[name] = []
    lost_total = 0
    self_cpu0 = time.process_time()
    with tempfile.TemporaryDirectory() as tmp, FakeGitHub() as gh:
        tmpdir = Path(tmp)
        (tmpdir / "body.json").write_bytes(body)
        allow = tmpdir / "allowlist.yaml"
        allow.write_text("L1:\n  - org/target\n")

        def lua(run: str) -> Path:
            path = tmpdir / f"{run}.lua"
            path.write_text(LUA.replace("@BODY@", str(tmpdir / "body.json")).replace("@SIG@", sig)
                            .replace("@RUN@", run))
            return path

        wrk_args = {"threads": args.threads, "connections": args.connections, "duration": args.duration}
        for rep in range(args.repeat):
            proc, url = start_server([sys.executable, str(Path(__file__).resolve()), "--serve-bare"], {})
            try:
                results["bare FastAPI + HMAC"].append(run_wrk(url, lua(f"bare{rep}"), server_pid=proc.pid, **wrk_args))
            finally:
                stop(proc)
            for name, store, worker in configs:
                with contextlib.ExitStack() as stack:
                    data = tmpdir / f"data-{rep}-{store}-{int(worker)}"
                    env = {"CRCR_DATA_DIR": str(data), "CRCR_WEBHOOK_SECRET": SECRET, "CRCR_ALLOWLIST": str(allow),
                           "CRCR_UPSTREAM_REPO": repo, "CRCR_GITHUB_API_URL": gh.url,
                           "CRCR_GITHUB_APP_ID": gh.app_id, "CRCR_GITHUB_PRIVATE_KEY": gh.private_key_pem,
                           "CRCR_LOG_LEVEL": "INFO", "CRCR_CONFIG": ""}  # the default level
                    if store == "postgres":
                        env["CRCR_DATABASE_URL"] = stack.enter_context(postgres_database())
                        env["CRCR_QUEUE_URL"] = REDIS_URL
                        env["CRCR_QUEUE_NAME"] = f"bench{uuid.uuid4().hex[:8]}"
                    argv = [sys.executable, "-m", "crcr.cli.main", "serve", "--port", "0"]
                    proc, url = start_server(argv + ([] if worker else ["--no-worker"]), env)
                    try:
                        r = run_wrk(url, lua(f"r{rep}{store}{int(worker)}"), server_pid=proc.pid, **wrk_args)
                    finally:
                        stop(proc)
                    db_url = env.get("CRCR_DATABASE_URL") or f"sqlite:///{data / 'crcr.db'}"
                    n_stored, states = stored(db_url)
                    acked = r.requests - r.non_2xx
                    lost = max(0, acked - n_stored)
                    lost_total += lost
                    results[name].append(r)
                    print(f"  run {rep + 1} {name}: {r.rps:.0f}/s p99 {r.p99_ms:.1f} ms, {r.server_ms:.2f} ms CPU/request, "
                          f"{acked} acknowledged, "
                          f"{n_stored} stored (dispatch rows {states}), {r.non_2xx} non-2xx, {r.errors} socket errors", file=sys.stderr)
            base = results["bare FastAPI + HMAC"][-1]
            print(f"  run {rep + 1} bare: {base.rps:.0f}/s p99 {base.p99_ms:.1f} ms, {base.server_ms:.2f} ms CPU/request",
                  file=sys.stderr)
        dispatched = len(gh.dispatches())
    self_cpu = time.process_time() - self_cpu0

    print(f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s, {len(body)} B signed pull_request, "
          f"a new delivery id per request; medians of {args.repeat} run(s), ratios within each run")
    print(f"{'server':32} {'deliveries/s':>12} {'ratio':>6} {'p50 ms':>7} {'p99 ms':>7} {'cpu ms/req':>10} "
          f"{'wrk cpu':>8}")
    bare_runs = results["bare FastAPI + HMAC"]
    for name, runs in results.items():
        ratios = [r.rps / b.rps for r, b in zip(runs, bare_runs, strict=True)]
        med = statistics.median
        print(f"{name:32} {med(r.rps for r in runs):12.0f} {med(ratios):6.2f} {med(r.p50_ms for r in runs):7.1f} "
              f"{med(r.p99_ms for r in runs):7.1f} {med(r.server_ms for r in runs):10.2f} "
              f"{med(r.client_cpu for r in runs):7.2f}c")
        if len(runs) > 1 and name != "bare FastAPI + HMAC":
            print(f"{'':32} ratios {', '.join(f'{x:.2f}' for x in ratios)}; "
                  f"p99 {', '.join(f'{r.p99_ms:.0f}' for r in runs)} ms")
    print(f"acknowledged but not stored: {lost_total} (must be 0); {dispatched} dispatches reached the fake GitHub; "
          f"'wrk cpu' is the load generator's CPU seconds per second (of 2 shared cores); this driver "
          f"(fake GitHub included) used {self_cpu:.1f} CPU s")
    if lost_total:
        sys.exit(1)


if __name__ == "__main__":
    main()
