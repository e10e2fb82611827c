"""A history from the relay's database: trunk order from stored pushes, results uploads,
missing baselines, pending jobs and rerun deliveries; on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from tests.relay.callbacks_harness import UPSTREAM, harness
from tests.triage.test_end_to_end import BACKEND, SHAS, Trunk
from triage.bisect import analyze
from triage.rules import load_rules
from triage.source import from_store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def h(request, tmp_path):
    url = None if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    with harness(tmp_path, database_url=url) as h:
        yield h


def upload(h, delivery_id, run_id, tested_sha, tests):
    doc = {"schema_version": 1, "run": {"run_id": run_id, "device": "npu", "upstream_sha": tested_sha}, "tests": tests}
    r = h.client.post("/results", params={"delivery_id": delivery_id, "run_id": run_id, "run_attempt": "1",
                                          "job_name": "test-npu"}, content=json.dumps(doc).encode(),
                      headers={"Authorization": f"Bearer {h.issuer.mint(repository=BACKEND)}"})
    assert r.status_code == 200, r.text


def test_store_history_orders_by_push_and_keeps_missing_baselines_and_pending_out(h):
    trunk = Trunk(h)
    for n, commits in enumerate([[0], [1], [2], [3]]):
        trunk.land(n, commits)
    for n in range(3):  # c0..c2 green, through the real callback + upload path
        trunk.job(f"push-{n}", n)
    # c2 ran again, but the job installed an old nightly: its green is evidence for c0 only
    assert h.callback("in_progress", "push-2", repo=BACKEND, run_id="900", job="test-npu",
                      event_type="push").status_code == 200
    upload(h, "push-2", "900", SHAS[0], [{"id": "test_ops.py::test_sum", "outcome": "passed"}])
    assert h.callback("completed", "push-2", repo=BACKEND, run_id="900", job="test-npu", event_type="push",
                      conclusion="success").status_code == 200
    # c3 is still running
    assert h.callback("in_progress", "push-3", repo=BACKEND, run_id="901", job="test-npu",
                      event_type="push").status_code == 200

    history = from_store(h.runtime.sessions, BACKEND, upstream_repo=UPSTREAM)
    assert [c.sha for c in history.commits] == SHAS[:4]
    assert [c.pr for c in history.commits] == [101, 102, 103, 104]
    assert history.commits[0].title == "Change 0 (#101)"
    assert history.commits[2].diff_summary == "modified: aten/src/file2.cpp"
    stale = [r for r in history.runs if r.tested_sha == SHAS[0] and r.sha == SHAS[2]]
    assert len(stale) == 1 and not stale[0].baseline_ok
    pending = [r for r in history.runs if r.pending]
    assert [r.sha for r in pending] == [SHAS[3]]
    # a push dispatched to the backend whose job has not called back yet is in flight too
    trunk.land(4, [4])
    history = from_store(h.runtime.sessions, BACKEND, upstream_repo=UPSTREAM)
    assert sorted(r.sha for r in history.runs if r.pending) == [SHAS[3], SHAS[4]]
    analysis = analyze(history, load_rules())
    assert analysis.kind == "none"  # nothing failed; the stale green and the running job are not evidence
    assert [o.run.sha for o in analysis.missing_baselines] == [SHAS[2]]
