"""End to end with the relay and the fake GitHub.

Trunk pushes land (one a ghstack stack of three commits, only its head dispatched); the
backend's jobs call back over HTTP with failures and upload their per-test results;
``crcr triage analyze --request-reruns`` reads the database and asks for a bisection
run; the relay's rerun-request task turns it into a push dispatch for that SHA, sent to
the fake GitHub; the downstream answers; after the reruns the suspect is the middle
commit of the stack, and ``crcr triage report --post`` opens one issue and one upstream
PR comment, and posts nothing more when run again.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import select

from crcr.cli.main import main
from crcr.settings import get_settings
from crcr.store.deliveries import Delivery, Dispatch
from crcr.store.triage import RerunRequest
from relay import dispatch, rerun_requests
from tests.fakes.github import FakeGitHub
from tests.relay.callbacks_harness import UPSTREAM, harness

BACKEND = "org/l2repo"
SHAS = [f"{i:x}" * 40 for i in range(1, 9)]  # c0..c7, 40-hex
PRS = [101, 102, 103, 104, 105, 106, 107, 108]
PUSHES = [[0], [1], [2], [3, 4, 5], [6], [7]]  # [3, 4, 5] is a ghstack stack landed in one push
BREAK = 4  # test_sum breaks at c4 (PR 105), the middle of the stack
TESTS = ["test_ops.py::test_sum", "test_ops.py::test_mean", "test_nn.py::test_linear"]


def outcomes(pos: int) -> list[dict]:
    return [{"id": t, "outcome": "failed" if (t.endswith("test_sum") and pos >= BREAK) else "passed",
             **({"message": "AssertionError: Tensor-likes are not close!"} if t.endswith("test_sum") and pos >= BREAK
                else {})} for t in TESTS]


class Trunk:
    def __init__(self, h):
        self.h = h
        self.run_id = 1000

    def land(self, push_no: int, commits: list[int], delivery_id: str | None = None) -> str:
        h = self.h
        head = SHAS[commits[-1]]
        payload = {"ref": "refs/heads/main", "after": head, "before": SHAS[commits[0] - 1] if commits[0] else "0" * 40,
                   "repository": {"full_name": UPSTREAM},
                   "commits": [{"id": SHAS[i], "message": f"Change {i} (#{PRS[i]})\n\nbody",
                                "modified": [f"aten/src/file{i}.cpp"]} for i in commits],
                   "head_commit": {"id": head}}
        delivery_id = delivery_id or f"push-{push_no}"
        now = h.clock()
        with h.runtime.sessions.begin() as s:  # what intake + the dispatch worker leave behind
            s.add(Delivery(id=delivery_id, event="push", repo=UPSTREAM, head_sha=head, ref="refs/heads/main",
                           labels=[], sender="pytorchmergebot", payload=json.dumps(payload), payload_bytes=100,
                           received_at=now))
            s.flush()
            s.add(Dispatch(delivery_id=delivery_id, target=BACKEND, kind="github", level=2, event_type="push",
                           state="sent", attempts=1, created_at=now, updated_at=now, sent_at=now, next_attempt_at=now))
        return delivery_id

    def job(self, delivery_id: str, pos: int) -> None:
        """The backend's job: in_progress, results upload, completed (over HTTP, with an OIDC token)."""
        h = self.h
        self.run_id += 1
        run_id = str(self.run_id)
        assert h.callback("in_progress", delivery_id, repo=BACKEND, run_id=run_id, job="test-npu",
                          event_type="push").status_code == 200
        h.clock.advance(300)
        tests = outcomes(pos)
        doc = {"schema_version": 1, "run": {"run_id": run_id, "device": "npu", "upstream_sha": SHAS[pos]}, "tests": tests}
        r = h.client.post("/results", params={"delivery_id": delivery_id, "run_id": run_id, "run_attempt": "1",
                                              "job_name": "test-npu"}, content=json.dumps(doc).encode(),
                          headers={"Authorization": f"Bearer {h.issuer.mint(repository=BACKEND)}",
                                   "Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        failed = [t["id"] for t in tests if t["outcome"] == "failed"]
        r = h.callback("completed", delivery_id, repo=BACKEND, run_id=run_id, job="test-npu", event_type="push",
                       conclusion="failure" if failed else "success", failed_tests=failed)
        assert r.status_code == 200, r.text
        h.clock.advance(300)


def cli(argv: list[str], capsys) -> tuple[int, str]:
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out


@pytest.fixture
def env(tmp_path, monkeypatch):
    with FakeGitHub() as gh, harness(tmp_path, github_api_url=gh.url, github_app_id=gh.app_id,
                                     github_private_key=gh.private_key_pem) as h:
        h.clock.now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        monkeypatch.setenv("CRCR_DATABASE_URL", h.runtime.settings.resolved_database_url)
        monkeypatch.setenv("CRCR_DATA_DIR", str(tmp_path / "data"))
        monkeypatch.setenv("CRCR_GITHUB_API_URL", gh.url)
        monkeypatch.setenv("CRCR_GITHUB_APP_ID", gh.app_id)
        monkeypatch.setenv("CRCR_GITHUB_PRIVATE_KEY", gh.private_key_pem)
        monkeypatch.delenv("CRCR_TRIAGE_POSTING", raising=False)
        get_settings.cache_clear()
        gh.add_issue(UPSTREAM, 105, title="Change 4")
        yield h, gh
    get_settings.cache_clear()


def sent_dispatches(gh: FakeGitHub) -> list[dict]:
    return [r.body for r in gh.requests if r.method == "POST" and r.path == f"/repos/{BACKEND}/dispatches"]


def test_trunk_failures_to_bisection_reruns_to_one_posted_report(env, capsys, tmp_path):
    h, gh = env
    trunk = Trunk(h)
    for n, commits in enumerate(PUSHES):
        delivery = trunk.land(n, commits)
        trunk.job(delivery, commits[-1])

    asked: list[str] = []
    for _round in range(6):
        code, out = cli(["triage", "analyze", "--backend", BACKEND, "--request-reruns", "--json", "-"], capsys)
        assert code == 0
        data = json.loads(out)
        if not data["requested"]:
            break
        assert len(data["requested"]) == 1
        sha = data["requested"][0]
        asked.append(sha)
        h.clock.now = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=10 * (_round + 1))  # past the pacing
        ids = rerun_requests.dispatch_due(h.runtime)
        assert len(ids) == 1
        outcome = dispatch.attempt(h.runtime, ids[0])
        assert outcome is not None and outcome.state == "sent"
        body = sent_dispatches(gh)[-1]
        assert body["event_type"] == "push"
        assert body["client_payload"]["payload"]["after"] == sha  # a push dispatch for that SHA
        assert "/rerun/" in body["client_payload"]["delivery_id"]
        trunk.job(body["client_payload"]["delivery_id"], SHAS.index(sha))

    # the bisection went inside the stack: first its middle commit, never outside the range
    assert asked[0] == SHAS[4]
    assert set(asked) <= {SHAS[3], SHAS[4]}
    assert len(asked) <= 3  # ceil(log2 3) + 1 for the 3 commits after the last good up to the first bad
    assert data["action"] == "revert", data
    assert data["suspect"] == {"sha": SHAS[BREAK], "pr": 105, "title": "Change 4 (#105)"}
    assert data["failing_tests"] == {"test_ops.py::test_sum": SHAS[BREAK]}
    with h.runtime.sessions() as s:
        assert all(r.state == "dispatched" and r.delivery_id.startswith("push-3/rerun/")
                   for r in s.scalars(select(RerunRequest)))

    out_dir = tmp_path / "report"
    args = ["triage", "report", "--backend", BACKEND, "--out", str(out_dir), "--post", "--issue-repo", BACKEND,
            "--comment-upstream"]
    code, out = cli(args, capsys)
    assert code == 0, out
    assert "opened issue" in out and "commented on" in out
    verdict = json.loads((out_dir / "triage-verdict.json").read_text())
    assert verdict["suspected_upstream"]["pr"] == 105 and verdict["reproduced_on_retry"] is True
    assert "Revert the upstream PR" in (out_dir / "triage-report.md").read_text()
    assert "verdict stored on" in out
    with h.runtime.sessions() as s:  # the check-run summaries and the dashboard read it there
        from crcr.store.jobs import Job

        stored = [j.triage_verdict for j in s.scalars(select(Job).where(Job.head_sha == SHAS[7]))]
        assert stored and stored[0]["suspected_upstream"]["commit"] == SHAS[BREAK]
    code, out = cli(args, capsys)
    assert code == 0 and "already posted" in out
    assert len(gh.state.comments) == 1
    assert len([k for k in gh.state.issues if k[0] == BACKEND]) == 1


def test_no_trunk_runs_is_not_green(env, capsys):
    code = 0
    try:
        main(["triage", "analyze", "--backend", "org/nobody"])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 1 and "error[triage-no-data]" in err and "hint:" in err


def test_a_failed_trunk_callback_makes_the_relay_request_the_bisection_run(env):
    """No CLI: the relay runs the analyzer crcr.cli installs after the failing completed callback."""
    from crcr.cli.triage import trunk_analyzer

    h, gh = env
    h.runtime.trunk_analyzer = trunk_analyzer(h.runtime.sessions, UPSTREAM, min_interval_s=0)
    trunk = Trunk(h)
    for n, commits in enumerate(PUSHES[:4]):  # green c0..c2, then the stack's head c5 fails
        trunk.job(trunk.land(n, commits), commits[-1])
    with h.runtime.sessions() as s:
        requested = [r.sha for r in s.scalars(select(RerunRequest))]
    assert requested == [SHAS[4]]  # the middle of the untested stack, asked for once
    # green trunk jobs never trigger an analysis
    calls: list[str] = []
    h.runtime.trunk_analyzer = calls.append
    trunk.job(trunk.land(9, [0]), 0)
    assert calls == []
    trunk.job(trunk.land(10, [6]), 6)  # a failing one does
    assert calls == [BACKEND]
    # so does a rerun triage asked for, even a green one: it moves the bisection on
    trunk.job(trunk.land(11, [0], delivery_id="push-9/rerun/1"), 0)
    assert calls == [BACKEND, BACKEND]


def test_the_analysis_runs_as_a_queued_worker_task(env):
    """crcr serve / crcr worker register the task; the callback only enqueues it."""
    from crcr.cli.triage import TRUNK_TASK, register_trunk_task

    h, gh = env
    register_trunk_task(h.runtime)
    h.runtime.huey.immediate = True  # run enqueued tasks in this thread, as a worker would
    enqueued: list[str] = []
    original = h.runtime.trunk_analyzer
    h.runtime.trunk_analyzer = lambda backend: (enqueued.append(backend), original(backend))
    trunk = Trunk(h)
    for n, commits in enumerate(PUSHES[:4]):
        trunk.job(trunk.land(n, commits), commits[-1])
    assert enqueued == [BACKEND]
    assert any(key.endswith(TRUNK_TASK) for key in h.runtime.huey._registry._registry)
    with h.runtime.sessions() as s:
        assert [r.sha for r in s.scalars(select(RerunRequest))] == [SHAS[4]]
