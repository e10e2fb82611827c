"""The storage-heavy callback paths on PostgreSQL (the production database)."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.relay.callbacks_harness import CRCR_MODE_ALLOWLIST, harness

pytestmark = pytest.mark.postgres


@pytest.fixture
def h(tmp_path, postgres_url):
    with harness(tmp_path, database_url=postgres_url, callback_rate_per_minute=4,
                 allowlist_text=CRCR_MODE_ALLOWLIST) as h:
        yield h


def test_state_machine_times_rate_limit_and_results_on_postgres(h):
    h.dispatch("d-1", "org/l2repo")
    h.clock.advance(30)
    r = h.callback("in_progress", "d-1")
    assert r.status_code == 200 and r.json()["job"]["queue_time_s"] == 30.0
    assert h.callback("in_progress", "d-1").status_code == 409  # duplicate
    h.clock.advance(90)
    r = h.callback("completed", "d-1", conclusion="success", test_results={"passed": 3, "failed": 0, "skipped": 0})
    assert r.json()["job"]["execution_time_s"] == 90.0
    assert h.callback("completed", "d-1", conclusion="failure").status_code == 409  # replay
    # two calls in this minute so far; two more fit, the fifth is 429
    assert [h.callback("in_progress", "d-1", job=j).status_code for j in ("j1", "j2", "j3")] == [200, 200, 429]
    h.clock.advance(61)
    doc = {"schema_version": 1, "run": {"run_id": "r", "device": "cpu"},
           "tests": [{"id": "t::a", "outcome": "passed"}]}
    r = h.client.post("/results", params={"delivery_id": "d-1", "run_id": "100", "job_name": "build"},
                      content=gzip.compress(json.dumps(doc).encode()),
                      headers={"Authorization": f"Bearer {h.issuer.mint(repository='org/l2repo')}",
                               "Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    job = next(j for j in h.jobs() if j.job_name == "build")
    assert (job.state, job.conclusion, job.passed) == ("completed", "success", 3)
    assert [u.job_id for u in h.uploads()] == [job.id]


def test_nightly_cache_on_postgres(h):
    h.runtime.commit_lookup = lambda sha: sha.startswith("aaaa")
    sha = "aaaa" + "0" * 36
    assert h.callback("in_progress", sha, event_type="nightly").status_code == 200
    assert h.callback("in_progress", "bbbb" + "0" * 36, event_type="nightly").status_code == 409
    (job,) = h.jobs()
    assert job.self_scheduled and job.head_sha == sha


def test_check_runs_and_rerun_on_postgres(tmp_path, postgres_url):
    from sqlalchemy import select

    from crcr.store.deliveries import Dispatch
    from relay import checks
    from tests.fakes.github import FakeGitHub

    with FakeGitHub() as gh, harness(tmp_path, database_url=postgres_url, github_api_url=gh.url,
                                     github_app_id=gh.app_id, github_private_key=gh.private_key_pem,
                                     allowlist_text=CRCR_MODE_ALLOWLIST) as h:
        h.dispatch("d-1", "org/l4repo")
        h.callback("in_progress", "d-1", repo="org/l4repo")
        h.callback("completed", "d-1", repo="org/l4repo", conclusion="success")
        (row,) = h.checks()
        assert row.synced and row.status == "completed"
        with h.runtime.sessions() as s:
            from crcr.store.deliveries import Delivery

            event = Delivery(id="evt-1", event="check_run", action="rerequested", repo="pytorch/pytorch",
                             payload=json.dumps({"action": "rerequested", "check_run": {"id": row.github_id}}))
            s.add(event)
            s.commit()
            d1 = checks.on_check_run(s, event, h.runtime)
            d2 = checks.on_check_run(s, event, h.runtime)
            assert (d1.delivery_id, d2.delivery_id) == ("d-1/rerun/1", "d-1/rerun/2")
            assert s.scalars(select(Dispatch.target).where(Dispatch.delivery_id.like("d-1/rerun/%"))).all() == [
                "org/l4repo", "org/l4repo"]
