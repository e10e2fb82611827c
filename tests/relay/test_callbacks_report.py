"""The downstream half (`crcr report`'s Reporter) against the relay: the two sides agree."""

from __future__ import annotations

import pytest

from crcr.contracts.results import RunResults
from relay.results import load_upload
from runners import report as reporting
from tests.fakes.github import FakeGitHub
from tests.relay.callbacks_harness import harness

ENV = {"GITHUB_RUN_ID": "4242", "GITHUB_RUN_ATTEMPT": "2", "GITHUB_REPOSITORY": "org/l4repo",
       "GITHUB_SERVER_URL": "https://github.com", "GITHUB_WORKFLOW": "crcr", "GITHUB_JOB": "test"}


@pytest.fixture
def h(tmp_path):
    with FakeGitHub() as gh, harness(tmp_path, github_api_url=gh.url, github_app_id=gh.app_id,
                                     github_private_key=gh.private_key_pem) as h:
        h.gh = gh
        yield h


def results() -> RunResults:
    return RunResults.model_validate({
        "run": {"run_id": "r1", "device": "snpu", "shard": "1/2"},
        "tests": [{"id": "test_ops.py::TestOps::test_add", "outcome": "passed"},
                  {"id": "test_ops.py::TestOps::test_mul", "outcome": "failed", "error_class": "AssertionError"},
                  {"id": "test_ops.py::TestOps::test_div", "outcome": "skipped"}],
    })


def test_crcr_report_start_upload_complete_through_the_relay(h):
    h.dispatch("d-1", "org/l4repo")
    identity = reporting.identity_from_env(ENV, delivery_id="d-1", job_name="test-1")
    reporter = reporting.Reporter("http://testserver/callback", h.issuer.mint(repository="org/l4repo"),
                                  client=h.client, sleep=lambda s: None)
    answers = reporting.report(reporter, identity, results(), "all")
    assert [a["status"] for a in answers] == ["in_progress", "stored", "completed"]
    (job,) = h.jobs()
    assert (job.run_id, job.run_attempt, job.job_name, job.state) == ("4242", "2", "test-1", "completed")
    assert (job.passed, job.failed, job.skipped, job.conclusion) == (1, 1, 1, "failure")
    assert job.failed_tests == ["test_ops.py::TestOps::test_mul"]
    (upload,) = h.uploads()
    assert upload.job_id == job.id and len(load_upload(upload)["tests"]) == 3
    (check,) = h.checks()
    assert check.name == "crcr/org/l4repo/crcr/test-1" and check.status == "completed"
    # as CRCR, each push creates a check run; GitHub shows the newest of a name
    runs = h.gh.state.check_runs
    run = runs[max(runs)]
    assert run["external_id"] == "4242:7" and run["conclusion"] == "failure"
    assert f"upload #{upload.id} (1 failed, 1 passed, 1 skipped)" in run["output"]["summary"]


def test_a_replayed_report_is_refused_with_a_hint(h):
    from crcr.errors import ExternalError

    h.dispatch("d-1", "org/l4repo")
    identity = reporting.identity_from_env(ENV, delivery_id="d-1")
    reporter = reporting.Reporter("http://testserver/callback", h.issuer.mint(repository="org/l4repo"),
                                  client=h.client, sleep=lambda s: None)
    reporting.report(reporter, identity, results(), "all")
    with pytest.raises(ExternalError) as exc:
        reporting.report(reporter, identity, results(), "start")
    assert "409" in exc.value.message and "already completed" in exc.value.message
