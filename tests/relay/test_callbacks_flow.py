"""The per-job state machine through the real app: DISPATCHED -> IN_PROGRESS -> COMPLETED."""

from __future__ import annotations

import pytest

from tests.relay.callbacks_harness import harness


@pytest.fixture
def h(tmp_path):
    with harness(tmp_path) as h:
        yield h


def test_full_lifecycle_records_queue_and_execution_times(h):
    h.dispatch("d-1", "org/l2repo")
    h.clock.advance(42)
    r = h.callback("in_progress", "d-1")
    assert r.status_code == 200, r.text
    assert r.json()["job"]["state"] == "in_progress"
    assert r.json()["job"]["queue_time_s"] == 42.0
    h.clock.advance(600)
    r = h.callback("completed", "d-1", conclusion="failure", test_results={"passed": 40, "failed": 2, "skipped": 1},
                   failed_tests=["test_ops.py::test_add", "test_nn.py::test_conv"])
    assert r.status_code == 200, r.text
    assert r.json()["job"] == {
        "delivery_id": "d-1", "repo": "org/l2repo", "run_id": "100", "run_attempt": "1", "job_name": "build",
        "state": "completed", "queue_time_s": 42.0, "execution_time_s": 600.0,
    }
    (job,) = h.jobs()
    assert (job.passed, job.failed, job.skipped, job.conclusion) == (40, 2, 1, "failure")
    assert job.failed_tests == ["test_ops.py::test_add", "test_nn.py::test_conv"]
    assert [e.outcome for e in h.log()] == ["accepted", "accepted"]


def test_queued_then_in_progress_is_accepted(h):
    h.dispatch("d-1", "org/l2repo")
    assert h.callback("queued", "d-1").json()["job"]["state"] == "dispatched"
    h.clock.advance(5)
    assert h.callback("in_progress", "d-1").json()["job"]["queue_time_s"] == 5.0


def test_callback_without_dispatch_is_refused(h):
    h.dispatch("d-1", "org/l4repo")  # dispatched to another repo only
    r = h.callback("in_progress", "d-1", repo="org/l2repo")
    assert r.status_code == 409
    assert "no dispatch" in r.json()["error"]
    r = h.callback("in_progress", "never-dispatched")
    assert r.status_code == 409
    assert h.jobs() == []


def test_duplicate_and_replayed_completion_are_refused(h):
    h.dispatch("d-1", "org/l2repo")
    assert h.callback("in_progress", "d-1").status_code == 200
    r = h.callback("in_progress", "d-1")
    assert r.status_code == 409 and "duplicate" in r.json()["error"]
    assert h.callback("completed", "d-1", conclusion="success").status_code == 200
    replay = h.callback("completed", "d-1", conclusion="failure")
    assert replay.status_code == 409
    (job,) = h.jobs()
    assert job.conclusion == "success"  # the replay changed nothing
    backwards = h.callback("in_progress", "d-1")
    assert backwards.status_code == 409 and "out-of-order" in backwards.json()["error"]


def test_skipped_step_is_refused(h):
    h.dispatch("d-1", "org/l2repo")
    r = h.callback("completed", "d-1", conclusion="success")
    assert r.status_code == 400  # as CRCR
    assert "in_progress first" in r.json()["error"]
    assert h.jobs() == []


def test_jobs_are_keyed_by_run_attempt_and_job_name(h):
    h.dispatch("d-1", "org/l2repo")
    for attempt, job in [("1", "build"), ("1", "test"), ("2", "build")]:
        assert h.callback("in_progress", "d-1", attempt=attempt, job=job).status_code == 200
    assert sorted((j.run_attempt, j.job_name) for j in h.jobs()) == [("1", "build"), ("1", "test"), ("2", "build")]


def test_what_crcrs_action_really_sends_is_accepted(h):
    """schema_version "1", conclusion/started_at null, run ids as numbers, run_attempt absent."""
    h.dispatch("d-1", "org/l2repo")
    body = h.body("in_progress", "d-1", attempt=None)
    body["workflow"]["run_id"] = 123456789
    r = h.client.post("/callback", json=body, headers=h.issuer.bearer(repository="org/l2repo"))
    assert r.status_code == 200, r.text
    assert r.json()["job"]["run_id"] == "123456789"
    assert r.json()["job"]["run_attempt"] == "1"


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda b: b.pop("delivery_id"), "delivery_id"),
        (lambda b: b["workflow"].pop("status"), "workflow.status"),
        (lambda b: b["workflow"].update(status="exploded"), "workflow.status"),
        (lambda b: b["workflow"].update(schema_version="2"), "workflow.schema_version"),
        (lambda b: b.update(failed_tests=[f"t{i}" for i in range(1001)]), "failed_tests"),
    ],
)
def test_schema_violations_are_400_and_name_the_field(h, mutate, where):
    h.dispatch("d-1", "org/l2repo")
    body = h.body("in_progress", "d-1")
    mutate(body)
    r = h.client.post("/callback", json=body, headers=h.issuer.bearer(repository="org/l2repo"))
    assert r.status_code == 400
    assert where in r.json()["error"]


def test_not_json_is_400(h):
    r = h.client.post("/callback", content=b"{nope", headers=h.issuer.bearer(repository="org/l2repo"))
    assert r.status_code == 400


def test_malformed_verdict_is_dropped_whole_and_the_rest_applies(h):
    h.dispatch("d-1", "org/l2repo")
    h.callback("in_progress", "d-1")
    bad = {"schema_version": 1, "category": "upstream", "confidence": "high", "summary": "x",
           "analyzed_at": "2026-11-30T06:00:00Z",
           "evidence": [{"job": "j", "test": "t", "excerpt": "e"}] * 11}
    r = h.callback("completed", "d-1", conclusion="failure", triage_verdict=bad,
                   test_results={"passed": 1, "failed": 1, "skipped": 0})
    assert r.status_code == 200
    assert any("triage_verdict dropped" in w and "evidence" in w for w in r.json()["warnings"])
    (job,) = h.jobs()
    assert job.state == "completed" and job.failed == 1
    assert job.triage_verdict is None


def test_valid_verdict_is_stored(h):
    h.dispatch("d-1", "org/l2repo")
    h.callback("in_progress", "d-1")
    verdict = {"schema_version": 1, "category": "upstream", "confidence": "medium", "summary": "aten change",
               "suspected_upstream": {"pr": 194610, "commit": "0e797b5a6acf", "reason": "touched the op"},
               "evidence": [{"job": "build", "test": "t", "log_url": "https://example.com/l", "excerpt": "boom"}],
               "analyzed_at": "2026-11-30T06:00:00Z"}
    r = h.callback("completed", "d-1", conclusion="failure", triage_verdict=verdict)
    assert r.json()["warnings"] == []
    (job,) = h.jobs()
    assert job.triage_verdict["suspected_upstream"]["pr"] == 194610


def test_oversized_verdict_is_dropped(h):
    h.dispatch("d-1", "org/l2repo")
    h.callback("in_progress", "d-1")
    verdict = {"schema_version": 1, "category": "flake", "confidence": "low", "summary": "s",
               "analyzed_at": "x", "evidence": [{"excerpt": "e" * 1000, "test": "t" * 500, "job": "j" * 300}] * 10}
    r = h.callback("completed", "d-1", conclusion="success", triage_verdict=verdict)
    assert any("bytes" in w for w in r.json()["warnings"])


def test_rate_limit_per_repo_then_429_and_recovers(tmp_path):
    with harness(tmp_path, callback_rate_per_minute=5) as h:
        h.dispatch("d-1", "org/l2repo")
        h.dispatch("d-1", "org/l4repo")
        codes = [h.callback("in_progress", "d-1", job=f"j{i}").status_code for i in range(7)]
        assert codes == [200] * 5 + [429] * 2
        r = h.callback("in_progress", "d-1", job="j9")
        assert r.headers["Retry-After"] == "60"
        # another repo has its own quota
        assert h.callback("in_progress", "d-1", repo="org/l4repo").status_code == 200
        h.clock.advance(61)
        assert h.callback("in_progress", "d-1", job="late").status_code == 200


def test_callbacks_metric_counts_outcomes(h):
    h.dispatch("d-1", "org/l2repo")
    h.callback("in_progress", "d-1")
    h.callback("in_progress", "d-1")
    h.client.post("/callback", json={}, headers={"Authorization": "Bearer nope"})
    text = h.client.get("/metrics").text
    assert 'crcr_callbacks_total{outcome="accepted"} 1.0' in text
    assert 'crcr_callbacks_total{outcome="rejected"} 1.0' in text
    assert 'crcr_callbacks_total{outcome="unauthorized"} 1.0' in text


def test_oversized_callback_is_413_without_storing(h):
    h.dispatch("d-1", "org/l2repo")
    body = h.body("in_progress", "d-1", failed_tests=["x" * 3000] * 800)
    r = h.client.post("/callback", json=body, headers=h.issuer.bearer(repository="org/l2repo"))
    assert r.status_code == 413
    assert h.jobs() == [] and h.log() == []


def test_storage_failure_is_503_not_500(h):
    from sqlalchemy import text

    h.dispatch("d-1", "org/l2repo")
    with h.runtime.engine.begin() as conn:
        conn.execute(text("DROP TABLE callback_log"))
    r = h.callback("in_progress", "d-1")
    assert r.status_code == 503
    assert "storage" in r.json()["error"]


def test_local_check_sink_skips_oncall_pings_quietly(tmp_path, caplog):
    """CRCR_CHECK_SINK=local (crcr demo): no GitHub to comment on; no ConfigError traceback either."""
    import logging

    from relay import checks as relay_checks
    from tests.relay.callbacks_harness import harness as callbacks_harness

    with callbacks_harness(tmp_path, check_sink="local") as h, caplog.at_level(logging.INFO):
        h.dispatch("d-oncall", "org/l4repo")
        assert h.callback("in_progress", "d-oncall", repo="org/l4repo").status_code == 200
        assert h.callback("completed", "d-oncall", repo="org/l4repo", conclusion="failure").status_code == 200
        assert relay_checks.wait_for_background()
        (check,) = h.checks()
        assert check.github_id is not None  # the check run went to the local sink
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
