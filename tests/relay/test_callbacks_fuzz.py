"""Property-based bodies and headers on /callback and /results: never a 5xx, nothing stored
for a caller without a valid token."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.relay.callbacks_harness import harness

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
scalar = st.none() | st.booleans() | st.integers() | st.text(max_size=30) | st.floats() | st.lists(st.text(max_size=5), max_size=2)
workflow = st.fixed_dictionaries(
    {"status": st.sampled_from(["queued", "in_progress", "completed", "", "done"]) | scalar},
    optional={k: scalar for k in ("schema_version", "conclusion", "name", "url", "run_id", "run_attempt", "job_name",
                                  "check_run_id", "started_at", "completed_at", "artifact_url")}
    | {"test_results": st.dictionaries(st.sampled_from(["passed", "failed", "skipped", "x"]), scalar, max_size=3)},
)
near_valid = st.fixed_dictionaries(
    {"delivery_id": st.sampled_from(["d-1", "", "0" * 40, "1f2e3d4"]) | scalar, "workflow": workflow | scalar},
    optional={"event_type": st.sampled_from(["pull_request", "nightly", "periodic", "push"]) | scalar,
              "payload": json_values,
              "failed_tests": st.lists(st.text(max_size=10) | st.integers(), max_size=5) | scalar,
              "triage_verdict": st.dictionaries(st.sampled_from(["schema_version", "category", "confidence",
                                                                 "summary", "evidence", "analyzed_at"]),
                                                json_values, max_size=6) | scalar},
)
raw_bodies = (st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode())
              | st.sampled_from([b"[" * 100_000, b'{"a":' * 50_000, b'{"delivery_id": "d-1", "workflow": ' + b"[" * 100_000]))


def test_callback_bodies_and_headers_never_5xx(tmp_path):
    with harness(tmp_path) as h:
        h.dispatch("d-1", "org/l2repo")
        good = h.issuer.mint(repository="org/l2repo", expires_in=3600)

        @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(body=near_valid.map(lambda b: json.dumps(b).encode()) | raw_bodies,
               auth=st.sampled_from(["good", "none", "junk", "basic"]) | st.text(max_size=40),
               encoding=st.sampled_from([None, "gzip", "identity", "br"]))
        def check(body, auth, encoding):
            headers = {"Content-Type": "application/json"}
            if auth == "good":
                headers["Authorization"] = f"Bearer {good}"
            elif auth == "junk":
                headers["Authorization"] = "Bearer eyJhbGciOiJIUzI1NiJ9.e30.x"
            elif auth == "basic":
                headers["Authorization"] = "Basic Zm9vOmJhcg=="
            elif auth != "none" and auth.isprintable() and auth.isascii():
                headers["Authorization"] = auth
            if encoding:
                headers["Content-Encoding"] = encoding
            r = h.client.post("/callback", content=body, headers=headers)
            assert r.status_code < 500, (r.status_code, r.text, body)
            if auth != "good":
                assert r.status_code == 401
            r = h.client.post("/results", params={"delivery_id": "d-1", "run_id": "100", "job_name": "build"},
                              content=body, headers=headers)
            assert r.status_code < 500, (r.status_code, r.text, body)

        before = len(h.log())
        check()
        # only callers with the good token ever reached storage
        assert all(e.repo == "org/l2repo" for e in h.log()[before:])


def test_absurdly_deep_json_is_400_not_500(tmp_path):
    with harness(tmp_path) as h:
        h.dispatch("d-1", "org/l2repo")
        h.callback("in_progress", "d-1")
        headers = h.issuer.bearer(repository="org/l2repo")
        for deep in (b"[" * 100_000, b'{"delivery_id": "d-1", "workflow": ' + b"[" * 100_000):
            assert h.client.post("/callback", content=deep, headers=headers).status_code == 400
            r = h.client.post("/results", params={"delivery_id": "d-1", "run_id": "100", "job_name": "build"},
                              content=deep, headers=headers)
            assert r.status_code == 400
