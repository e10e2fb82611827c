"""The backend page's cost with full-suite uploads: it reads the newest 10 results uploads
of the backend (plan versions and changes) and runs ``crcr select refine --dry-run`` over
them. Seeds a SQLite store through crcr's models with N uploads of T tests each (ids from
an inventory; 1% failing, a plan change half-way) and times ``queries.backend_page``
in-process, with the refinement (what ``crcr serve`` installs) and without it (the
baseline in the same run: the page as it was, plus reading the uploads), and a later
view of the same uploads (served from the page's cache).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/dashboard_backend.py --inventory INVENTORY.json [--uploads 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path

from crcr.store.base import make_engine, make_sessionmaker
from crcr.store.jobs import Job, ResultsUpload
from crcr.store.migrate import upgrade
from relay.dashboard.queries import DerivedCache, backend_page
from selector.refine import proposals_from_bodies

REPO = "acme/torch-npu"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inventory", type=Path, required=True)
    ap.add_argument("--uploads", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    ids = [t["id"] for t in json.loads(args.inventory.read_text())["tests"]]
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{tmp}/crcr.db")
        upgrade(engine)
        sessions = make_sessionmaker(engine)
        t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        with sessions.begin() as s:
            for n in range(args.uploads):
                job = Job(delivery_id=f"d{n}", repo=REPO, run_id=str(n), run_attempt="1", job_name="test",
                          state="completed", conclusion="success", event_type="push", head_sha=f"{n:040x}")
                s.add(job)
                s.flush()
                digest = "v1" if n < args.uploads // 2 else "v2"
                tests = [{"id": t, "outcome": "failed" if (i + n) % 100 == 0 else "passed", "duration_s": 0.1,
                          "plan_mode": "run", "plan_reason": f"rule {i % 7}" if digest == "v1" else f"rule {i % 5}",
                          "plan_source": "rules"} for i, t in enumerate(ids)]
                raw = json.dumps({"schema_version": 1, "run": {"run_id": str(n), "device": "npu",
                                                               "plan_digest": digest}, "tests": tests}).encode()
                s.add(ResultsUpload(job_id=job.id, repo=REPO, received_at=t0 + dt.timedelta(minutes=n), device="npu",
                                    upstream_sha=f"{n:040x}", counts={}, size_bytes=len(raw),
                                    body_gz=gzip.compress(raw)))
        cache = DerivedCache()
        with sessions() as s:
            backend_page(s, REPO, refine=proposals_from_bodies, cache=cache)  # the first view fills it
        for label, refine, kept in (("without refinement (baseline)", None, None),
                                    ("with refinement, first view", proposals_from_bodies, None),
                                    ("with refinement, later views (nothing new uploaded)", proposals_from_bodies, cache)):
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                with sessions() as s:
                    page = backend_page(s, REPO, refine=refine, cache=kept)
                times.append(time.perf_counter() - started)
            print(f"{label}: median {statistics.median(times):.2f}s over {args.repeat}; "
                  f"{len(page['plan_changes']['versions'])} plan versions, "
                  f"{len(page['refinement']['proposals'])} proposals")
        engine.dispose()
    print(f"{args.uploads} uploads of {len(ids)} tests each")


if __name__ == "__main__":
    main()
