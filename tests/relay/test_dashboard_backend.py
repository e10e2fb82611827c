"""The dashboard's backend page: the plan's recent changes (plan versions the backend's
results uploads ran with, and what changed between them) and refinement proposals (what
``crcr select refine`` would propose from those uploads), in HTML and its JSON twin, over
SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from crcr.cli.serve import install_dashboard_hooks
from crcr.store.jobs import COMPLETED, Job, ResultsUpload
from relay.app import create_app
from relay.runtime import Runtime
from tests.relay.harness import make_settings

BACKEND = "acme/torch-npu"
T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
OPS = "test/test_ops.py::TestCommonPRIVATEUSE1::"
EVIL = "<script>alert(1)</script>"


@pytest.fixture
def relay(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, Runtime]]:
    settings = make_settings(tmp_path, database_url=database_url)
    runtime = Runtime.from_settings(settings)
    app = create_app(settings, runtime=runtime, start_worker=False, start_sweeper=False)
    install_dashboard_hooks(runtime)  # what crcr serve does
    with TestClient(app) as client:
        yield client, runtime


def result(tid: str, outcome: str, mode: str, reason: str, source: str = "rules", error: str | None = None) -> dict:
    return {"id": OPS + tid, "outcome": outcome, "duration_s": 0.5, "plan_mode": mode, "plan_reason": reason,
            "plan_source": source, "error_class": error, "message": f"{error}: boom" if error else None}




def upload(s: Any, n: int, digest: str, tests: list[dict], sha: str) -> int:
    job = Job(delivery_id=f"push-{n}", repo=BACKEND, run_id=f"r{n}", run_attempt="1", job_name="trunk / test",
              state=COMPLETED, conclusion="success", event_type="push", head_sha=sha, passed=1, failed=0, skipped=0)
    s.add(job)
    s.flush()
    body = {"schema_version": 1, "run": {"run_id": f"r{n}", "device": "npu", "upstream_sha": sha,
                                         "plan_digest": digest}, "tests": tests}
    raw = json.dumps(body).encode()
    row = ResultsUpload(job_id=job.id, repo=BACKEND, received_at=T0 + dt.timedelta(minutes=n), device="npu",
                        upstream_sha=sha, counts={}, size_bytes=len(raw), body_gz=gzip.compress(raw))
    s.add(row)
    s.flush()
    return row.id


def seed(runtime: Runtime) -> dict[str, int]:
    """Two uploads with plan digest1, then one with digest2 where a reviewer made add's
    float16 an xfail; in the newest, mul fails with NotImplementedError (refine: skip),
    div's xfail passes (a promotion proposal), and a reviewer's run entry for sub fails."""
    with runtime.sessions.begin() as s:
        first = upload(s, 1, "digest1", [result("test_add_npu_float16", "passed", "run", "add is a core kernel"),
                                         result("test_mul_npu_float32", "passed", "run", "mul is a core kernel")], "a" * 40)
        upload(s, 2, "digest1", [result("test_add_npu_float16", "passed", "run", "add is a core kernel")], "b" * 40)
        last = upload(s, 3, "digest2", [
            result("test_add_npu_float16", "xfailed", "xfail", f"fp16 rounding {EVIL}", "reviewer"),
            result("test_mul_npu_float32", "failed", "run", "mul is a core kernel", error="NotImplementedError"),
            result("test_div_npu_float32", "xpassed", "xfail", "div was broken", "logs"),
            result("test_sub_npu_float32", "failed", "run", "kept by a person", "reviewer", error="AssertionError"),
        ], "c" * 40)
    return {"first": first, "last": last}


def test_backend_page_lists_plan_versions_and_what_changed_between_them(relay) -> None:
    client, runtime = relay
    ids = seed(runtime)
    data = client.get(f"/dashboard/backends/{BACKEND}.json").json()
    pc = data["plan_changes"]
    assert [(v["plan_digest"], v["uploads"]) for v in pc["versions"]] == [("digest2", 1), ("digest1", 2)]
    assert pc["versions"][1]["first_seen"]["results_upload"] == ids["first"]
    [change] = pc["changes"]
    assert (change["from_digest"], change["to_digest"], change["at"]["results_upload"]) == ("digest1", "digest2", ids["last"])
    # add ran in both uploads and its entry changed; mul was not in upload 2, so it is not compared
    assert change["tests_compared"] == 1 and change["tests_changed"] == 1
    [t] = change["changed"]
    assert t["test"] == OPS + "test_add_npu_float16"
    assert (t["before"]["mode"], t["after"]["mode"], t["after"]["source"]) == ("run", "xfail", "reviewer")
    html = client.get(f"/dashboard/backends/{BACKEND}").text
    assert "the plan&#x27;s recent changes" in html or "the plan's recent changes" in html
    assert "digest1" in html and "digest2" in html and "1 of 1 tests changed" in html


def test_backend_page_shows_what_refine_would_propose_from_the_stored_results(relay) -> None:
    client, runtime = relay
    seed(runtime)
    rf = client.get(f"/dashboard/backends/{BACKEND}.json").json()["refinement"]
    assert rf["available"] and rf["runs"] == 3
    by_test = {p["test"]: p for p in rf["proposals"]}
    mul = by_test[OPS + "test_mul_npu_float32"]
    assert (mul["mode"], mul["proposed_mode"], mul["kind"]) == ("run", "skip", "mode")  # the op is missing
    assert "NotImplementedError" in mul["reason"]
    div = by_test[OPS + "test_div_npu_float32"]
    assert (div["mode"], div["proposed_mode"], div["kind"]) == ("xfail", "run", "promotion")
    assert OPS + "test_sub_npu_float32" not in by_test  # a reviewer's entry is never changed ...
    assert any("test_sub_npu_float32" in c for c in rf["reviewer_conflicts"])  # ... the conflict is reported
    assert OPS + "test_add_npu_float16" not in by_test  # an xfail that xfails is what the plan says
    html = client.get(f"/dashboard/backends/{BACKEND}").text
    assert html.count("data-testid='proposal'") == 2
    assert "test_mul_npu_float32" in html and "nothing is applied here" in html


def test_text_from_uploads_is_escaped_on_the_backend_page(relay) -> None:
    client, runtime = relay
    seed(runtime)
    html = client.get(f"/dashboard/backends/{BACKEND}").text
    assert EVIL not in html and "&lt;script&gt;" in html


def test_backend_without_uploads_and_a_relay_without_the_selector_say_so(relay) -> None:
    client, runtime = relay
    data = client.get(f"/dashboard/backends/{BACKEND}.json").json()
    assert data["plan_changes"]["versions"] == [] and data["refinement"]["proposals"] == []
    assert "no results uploaded yet" in client.get(f"/dashboard/backends/{BACKEND}").text
    seed(runtime)
    runtime.refine_proposals = None  # e.g. an app built without crcr serve's hooks
    rf = client.get(f"/dashboard/backends/{BACKEND}.json").json()["refinement"]
    assert rf["available"] is False and "without the selector" in rf["note"]


def test_an_upload_the_results_contract_refuses_keeps_the_page(relay) -> None:
    client, runtime = relay
    seed(runtime)
    with runtime.sessions.begin() as s:
        upload(s, 4, "digest2", [{"id": OPS + "test_x", "outcome": "failed", "duration_s": "slow"}], "d" * 40)
    resp = client.get(f"/dashboard/backends/{BACKEND}.json")
    assert resp.status_code == 200
    assert "could not be read" in resp.json()["refinement"]["note"]
    assert client.get(f"/dashboard/backends/{BACKEND}").status_code == 200


def test_a_new_upload_is_seen_at_once_though_the_page_keeps_what_it_derived(relay) -> None:
    client, runtime = relay
    seed(runtime)
    first = client.get(f"/dashboard/backends/{BACKEND}.json").json()
    assert client.get(f"/dashboard/backends/{BACKEND}.json").json() == first  # from the cache, same answer
    with runtime.sessions.begin() as s:
        newest = upload(s, 4, "digest3", [result("test_add_npu_float16", "passed", "run", "fixed", "reviewer")], "d" * 40)
    data = client.get(f"/dashboard/backends/{BACKEND}.json").json()
    assert data["plan_changes"]["versions"][0]["plan_digest"] == "digest3"
    assert data["plan_from_results"]["results_upload"] == newest
