"""crcr report against a local relay stand-in speaking /callback and /results over real HTTP."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from crcr.contracts.callback import CallbackBody
from crcr.contracts.results import RunMeta, RunResults, TestResult, parse_results
from tests.runners.helpers import crcr

TOKEN = "tok-" + "s3cr3t" * 6
OIDC_JWT = "eyJhbGciOiJSUzI1NiJ9.eyJyZXBvc2l0b3J5IjoibyJ9.c2lnbmF0dXJlc2lnbg"


class Relay:
    """Records requests; answers like the relay (and GitHub's OIDC token endpoint)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.script: list[tuple[int, dict, dict]] = []  # queued (status, headers, body) answers

    def answer(self) -> tuple[int, dict, dict]:
        return self.script.pop(0) if self.script else (200, {}, {"ok": True, "status": "accepted"})


@pytest.fixture
def relay() -> Iterator[tuple[Relay, str]]:
    state = Relay()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output quiet
            pass

        def _reply(self, status, headers, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            url = urlsplit(self.path)
            state.requests.append({"method": "GET", "path": url.path, "query": parse_qs(url.query),
                                   "auth": self.headers.get("Authorization")})
            self._reply(200, {}, {"value": OIDC_JWT})

        def do_POST(self):
            url = urlsplit(self.path)
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                raw = gzip.decompress(raw)
            state.requests.append({"method": "POST", "path": url.path, "query": parse_qs(url.query),
                                   "auth": self.headers.get("Authorization"), "body": json.loads(raw),
                                   "gzip": self.headers.get("Content-Encoding") == "gzip"})
            self._reply(*state.answer())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _results(tmp_path, failed: int = 2, passed: int = 3):
    tests = [TestResult(id=f"test/test_ops.py::TestCommonPRIVATEUSE1::test_f{i}_snpu_float32", outcome="failed",
                        error_class="AssertionError", message=f"boom token={TOKEN}") for i in range(failed)]
    tests += [TestResult(id=f"test/test_ops.py::TestCommonPRIVATEUSE1::test_p{i}_snpu_float32", outcome="passed")
              for i in range(passed)]
    tests.append(TestResult(id="test/test_ops.py::TestCommonPRIVATEUSE1::test_s_snpu_float64", outcome="skipped"))
    results = RunResults(run=RunMeta(run_id="r1", device="snpu", upstream_sha="abc123", shard="1/2"), tests=tests)
    path = tmp_path / "results.json"
    results.write(path)
    return path


@pytest.fixture
def actions_env(monkeypatch, tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "pull_request", "client_payload": {
        "event_type": "pull_request", "delivery_id": "d-42", "payload": {"number": 7}}}))
    for key, value in {"GITHUB_EVENT_PATH": str(event), "GITHUB_RUN_ID": "900", "GITHUB_RUN_ATTEMPT": "2",
                       "GITHUB_JOB": "test-snpu", "GITHUB_WORKFLOW": "crcr", "GITHUB_SERVER_URL": "https://github.com",
                       "GITHUB_REPOSITORY": "acme/npu"}.items():
        monkeypatch.setenv(key, value)
    for key in ("CRCR_CALLBACK_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN"):
        monkeypatch.delenv(key, raising=False)


def test_report_posts_in_progress_then_upload_then_completed(tmp_path, relay, actions_env, monkeypatch, capsys):
    state, base = relay
    monkeypatch.setenv("CRCR_CALLBACK_TOKEN", TOKEN)
    assert crcr("report", "--results", str(_results(tmp_path)), "--callback", f"{base}/callback") == 0
    assert [(r["path"], r.get("gzip")) for r in state.requests] == [
        ("/callback", False), ("/results", True), ("/callback", False)]
    assert all(r["auth"] == f"Bearer {TOKEN}" for r in state.requests)
    started, upload, completed = (r["body"] for r in state.requests)
    CallbackBody.model_validate(started)
    CallbackBody.model_validate(completed)
    assert started["workflow"]["status"] == "in_progress" and started["delivery_id"] == "d-42"
    assert started["payload"] == {"number": 7}
    assert state.requests[1]["query"] == {"delivery_id": ["d-42"], "run_id": ["900"], "run_attempt": ["2"],
                                          "job_name": ["test-snpu"]}
    assert len(parse_results(upload).tests) == 6
    wf = completed["workflow"]
    assert (wf["status"], wf["conclusion"], wf["run_id"], wf["run_attempt"], wf["job_name"]) == (
        "completed", "failure", "900", "2", "test-snpu")
    assert wf["test_results"] == {"passed": 3, "failed": 2, "skipped": 1}
    assert wf["url"] == "https://github.com/acme/npu/actions/runs/900"
    assert completed["failed_tests"] == [f"test/test_ops.py::TestCommonPRIVATEUSE1::test_f{i}_snpu_float32" for i in range(2)]
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err
    assert TOKEN not in json.dumps(upload)  # the excerpt was scrubbed before it left the machine


def test_failed_tests_are_capped_at_1000(tmp_path, relay, actions_env, monkeypatch):
    state, base = relay
    monkeypatch.setenv("CRCR_CALLBACK_TOKEN", TOKEN)
    assert crcr("report", "--results", str(_results(tmp_path, failed=1005, passed=0)), "--callback", f"{base}/callback") == 0
    completed = state.requests[-1]["body"]
    assert len(completed["failed_tests"]) == 1000
    assert completed["workflow"]["test_results"]["failed"] == 1005
    assert len(parse_results(state.requests[1]["body"]).failed()) == 1005  # the upload has them all


def test_token_minted_from_github_actions_oidc(tmp_path, relay, actions_env, monkeypatch):
    state, base = relay
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", f"{base}/token?api-version=2.0")
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "request-token")
    assert crcr("report", "--results", str(_results(tmp_path)), "--callback", f"{base}/callback",
                "--phase", "start") == 0
    mint, call = state.requests
    assert mint["method"] == "GET" and mint["auth"] == "Bearer request-token"
    assert mint["query"]["audience"] == ["pytorch-cross-repo-ci-relay"]
    assert call["auth"] == f"Bearer {OIDC_JWT}" and call["body"]["workflow"]["status"] == "in_progress"


def test_rate_limit_is_retried_and_refusals_are_clear_errors(tmp_path, relay, actions_env, monkeypatch, capsys):
    state, base = relay
    monkeypatch.setenv("CRCR_CALLBACK_TOKEN", TOKEN)
    state.script = [(429, {"Retry-After": "0"}, {"detail": "slow down"})]
    assert crcr("report", "--results", str(_results(tmp_path)), "--callback", f"{base}/callback") == 0
    assert [r["path"] for r in state.requests] == ["/callback", "/callback", "/results", "/callback"]
    state.requests.clear()
    state.script = [(200, {}, {"status": "accepted"}), (409, {}, {"detail": "no such job"})]
    assert crcr("report", "--results", str(_results(tmp_path)), "--callback", f"{base}/callback") == 1
    err = capsys.readouterr().err
    assert "results upload: the relay answered 409" in err and "in_progress callback must come first" in err
    assert TOKEN not in err


def test_missing_token_and_delivery_are_input_errors(tmp_path, relay, actions_env, monkeypatch, capsys):
    _, base = relay
    assert crcr("report", "--results", str(_results(tmp_path)), "--callback", f"{base}/callback") == 2
    assert "no token" in capsys.readouterr().err
    monkeypatch.setenv("CRCR_CALLBACK_TOKEN", TOKEN)
    monkeypatch.delenv("GITHUB_EVENT_PATH")
    assert crcr("report", "--results", str(_results(tmp_path)), "--callback", f"{base}/callback") == 2
    assert "no delivery id" in capsys.readouterr().err
