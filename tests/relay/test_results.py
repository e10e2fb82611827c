"""POST /results: a job's full per-test results, same identity rules, gzip, size cap."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from relay.results import load_upload
from tests.relay.callbacks_harness import harness

QUERY = {"delivery_id": "d-1", "run_id": "100", "run_attempt": "1", "job_name": "build"}


def results_doc(n: int = 3) -> dict:
    tests = [{"id": f"test/test_ops.py::TestOps::test_{i}", "outcome": "passed", "duration_s": 0.1} for i in range(n)]
    tests.append({"id": "test/test_ops.py::TestOps::test_bad", "outcome": "failed", "error_class": "AssertionError",
                  "message": "token=ghp_abcdefghijklmnopqrstuvwxyz0123 leaked"})
    return {"schema_version": 1, "run": {"run_id": "r-1", "device": "snpu", "upstream_sha": "0e797b5a6acf",
                                         "shard": "1/2"}, "tests": tests}


@pytest.fixture
def h(tmp_path):
    with harness(tmp_path, max_results_bytes=64 * 1024) as h:
        h.dispatch("d-1", "org/l2repo")
        assert h.callback("in_progress", "d-1").status_code == 200
        yield h


def upload(h, content: bytes, *, repo="org/l2repo", gzipped=False, params=QUERY, token=None):
    headers = {"Authorization": f"Bearer {token or h.issuer.mint(repository=repo)}",
               "Content-Type": "application/json"}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    return h.client.post("/results", params=params, content=content, headers=headers)


def test_plain_upload_is_stored_linked_to_the_job(h):
    r = upload(h, json.dumps(results_doc()).encode())
    assert r.status_code == 200, r.text
    assert r.json()["counts"]["passed"] == 3 and r.json()["counts"]["failed"] == 1
    (row,) = h.uploads()
    (job,) = h.jobs()
    assert row.job_id == job.id and row.device == "snpu" and row.shard == "1/2"
    stored = load_upload(row)
    assert len(stored["tests"]) == 4
    assert "ghp_" not in json.dumps(stored)  # the results contract scrubs secrets from messages


def test_gzip_upload_is_accepted(h):
    r = upload(h, gzip.compress(json.dumps(results_doc(50)).encode()), gzipped=True)
    assert r.status_code == 200, r.text
    assert r.json()["counts"]["passed"] == 50


def test_too_large_is_413(h):
    big = json.dumps(results_doc(2000)).encode()
    assert len(big) > 64 * 1024
    r = upload(h, big)
    assert r.status_code == 413
    assert h.uploads() == []


def test_gzip_bomb_is_413_after_at_most_the_cap(h):
    bomb = gzip.compress(b"[" + b" " * (50 * 1024 * 1024) + b"]", compresslevel=9)
    assert len(bomb) < 64 * 1024
    r = upload(h, bomb, gzipped=True)
    assert r.status_code == 413
    assert "decompression" in r.json()["error"]


def test_413_without_reading_a_declared_oversized_body(h):
    def endless():
        yield b"{" + b" " * 1024
        raise AssertionError("the relay read past the declared length")

    r = h.client.post("/results", params=QUERY, content=endless(), headers={
        "Authorization": f"Bearer {h.issuer.mint(repository='org/l2repo')}", "Content-Length": str(10**9)})
    assert r.status_code == 413


def test_bad_gzip_and_bad_json_are_400(h):
    assert upload(h, b"not gzip at all", gzipped=True).status_code == 400
    truncated = gzip.compress(json.dumps(results_doc()).encode())[:-10]
    assert upload(h, truncated, gzipped=True).status_code == 400
    r = upload(h, b'{"schema_version": 1, "tests": []}')
    assert r.status_code == 400 and "run" in r.json()["error"]
    assert h.uploads() == []


def test_other_encodings_are_415(h):
    r = h.client.post("/results", params=QUERY, content=zlib.compress(b"{}"), headers={
        "Authorization": f"Bearer {h.issuer.mint(repository='org/l2repo')}", "Content-Encoding": "br"})
    assert r.status_code == 415


def test_unknown_job_is_409_and_missing_delivery_is_400(h):
    r = upload(h, json.dumps(results_doc()).encode(), params={**QUERY, "job_name": "nope"})
    assert r.status_code == 409 and "in_progress callback first" in r.json()["error"]
    r = upload(h, json.dumps(results_doc()).encode(), params={})
    assert r.status_code == 400


def test_same_identity_rules_as_callbacks(h):
    doc = json.dumps(results_doc()).encode()
    assert upload(h, doc, token="garbage").status_code == 401
    r = upload(h, doc, repo="org/l1repo")
    assert r.status_code == 200 and r.json()["status"] == "ignored"
    # another L2+ repo cannot attach results to org/l2repo's job: its identity names its own jobs
    assert upload(h, doc, repo="org/l4repo").status_code == 409
    assert h.uploads() == []


def test_retention_prunes_old_uploads_and_log_rows(h):
    import datetime as dt

    from crcr.store.jobs import prune_callback_data

    assert upload(h, json.dumps(results_doc()).encode()).status_code == 200
    h.clock.advance(10 * 86400)
    assert upload(h, json.dumps(results_doc()).encode()).status_code == 200
    before = len(h.log())
    cutoff = h.clock() - dt.timedelta(days=5)
    removed = prune_callback_data(h.runtime.sessions, cutoff)
    assert removed == {"callback_log": before - 1, "results_uploads": 1}
    assert len(h.uploads()) == 1 and len(h.log()) == 1 and len(h.jobs()) == 1
