"""The fake GitHub answers as GitHub's REST description (npm @octokit/openapi) says it does."""

from __future__ import annotations

import json
import time

import jwt
import pytest
import requests
from jsonschema import Draft202012Validator

from tests.conftest import FIXTURES

SPEC = json.loads((FIXTURES / "github-openapi" / "subset.json").read_text())


def validate(operation: str, status: int, body) -> None:
    """Fail unless ``body`` matches the documented response of ``operation`` for ``status``."""
    responses = SPEC["operations"][operation]["responses"]
    assert str(status) in responses, f"{operation} is not documented to answer {status}"
    schema = responses[str(status)]
    if schema is None:
        assert body in (None, b"", ""), f"{operation} {status} must have no body"
        return
    Draft202012Validator({**schema, "components": SPEC["components"]}).validate(body)


def _app_jwt(gh, *, iss=None, exp_in=540, iat_ago=60, key=None) -> str:
    now = int(time.time())
    claims = {"iat": now - iat_ago, "exp": now + exp_in, "iss": iss if iss is not None else gh.app_id}
    return jwt.encode(claims, key or gh.private_key_pem, algorithm="RS256")


def _json(resp):
    return resp.json() if resp.content else None


def test_installation_token_dispatch_and_check_run_responses_match_the_spec(fake_github):
    gh = fake_github
    h = {"Authorization": f"Bearer {_app_jwt(gh)}", "Accept": "application/vnd.github+json"}
    r = requests.get(f"{gh.url}/repos/org/repo/installation", headers=h, timeout=5)
    validate("GET /repos/{owner}/{repo}/installation", r.status_code, r.json())
    inst = r.json()["id"]
    r = requests.post(f"{gh.url}/app/installations/{inst}/access_tokens", headers=h, timeout=5)
    validate("POST /app/installations/{installation_id}/access_tokens", r.status_code, r.json())
    th = {"Authorization": f"token {r.json()['token']}"}
    body = {"event_type": "pull_request", "client_payload": {"event_type": "pull_request", "delivery_id": "d",
                                                             "payload": {}}}
    Draft202012Validator(SPEC["operations"]["POST /repos/{owner}/{repo}/dispatches"]["request"]).validate(body)
    r = requests.post(f"{gh.url}/repos/org/repo/dispatches", json=body, headers=th, timeout=5)
    assert r.status_code == 204
    validate("POST /repos/{owner}/{repo}/dispatches", r.status_code, _json(r))
    r = requests.post(f"{gh.url}/repos/org/repo/dispatches", json={"event_type": "x" * 101}, headers=th, timeout=5)
    validate("POST /repos/{owner}/{repo}/dispatches", r.status_code, r.json())
    assert r.status_code == 422
    r = requests.post(f"{gh.url}/repos/org/repo/check-runs", headers=th, timeout=5,
                      json={"name": "crcr/org/repo/CI/build", "head_sha": "a" * 40, "status": "in_progress",
                            "external_id": "123"})
    validate("POST /repos/{owner}/{repo}/check-runs", r.status_code, r.json())
    cid = r.json()["id"]
    r = requests.patch(f"{gh.url}/repos/org/repo/check-runs/{cid}", headers=th, timeout=5,
                       json={"conclusion": "success", "output": {"title": "ok", "summary": "3 passed"}})
    validate("PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}", r.status_code, r.json())
    assert r.json()["status"] == "completed"
    gh.add_commit("org/repo", "c" * 40)
    r = requests.get(f"{gh.url}/repos/org/repo/commits/{'c' * 40}", headers=th, timeout=5)
    validate("GET /repos/{owner}/{repo}/commits/{ref}", r.status_code, r.json())
    r = requests.get(f"{gh.url}/repos/org/repo/commits/{'d' * 40}", headers=th, timeout=5)
    validate("GET /repos/{owner}/{repo}/commits/{ref}", r.status_code, r.json())


def test_not_installed_is_a_documented_404(fake_github):
    fake_github.set_installation("org/none", None)
    r = requests.get(f"{fake_github.url}/repos/org/none/installation",
                     headers={"Authorization": f"Bearer {_app_jwt(fake_github)}"}, timeout=5)
    validate("GET /repos/{owner}/{repo}/installation", r.status_code, r.json())


@pytest.mark.parametrize("bad", ["wrong_iss", "expired", "too_long", "other_key"])
def test_app_jwt_rules_are_enforced(fake_github, bad):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    gh = fake_github
    kwargs = {
        "wrong_iss": {"iss": "999"}, "expired": {"exp_in": -10},
        "too_long": {"exp_in": 3600},
        "other_key": {"key": rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())},
    }[bad]
    r = requests.post(f"{gh.url}/app/installations/1/access_tokens",
                      headers={"Authorization": f"Bearer {_app_jwt(gh, **kwargs)}"}, timeout=5)
    assert r.status_code == 401


def test_unknown_token_is_401(fake_github):
    r = requests.post(f"{fake_github.url}/repos/org/repo/dispatches", json={"event_type": "x"},
                      headers={"Authorization": "token ghs_forged"}, timeout=5)
    assert r.status_code == 401 and r.json()["message"] == "Bad credentials"


def test_faults_latency_status_drop_and_lost_response(fake_github):
    gh = fake_github
    gh.add_fault("GET", r"/installation$", status=503, times=1)
    gh.add_fault("GET", r"/installation$", drop=True, times=1)
    gh.add_fault("GET", r"/installation$", lose_response=True, times=1)
    h = {"Authorization": f"Bearer {_app_jwt(gh)}"}
    assert requests.get(f"{gh.url}/repos/o/r/installation", headers=h, timeout=5).status_code == 503
    for _ in range(2):
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{gh.url}/repos/o/r/installation", headers=h, timeout=5)
    assert requests.get(f"{gh.url}/repos/o/r/installation", headers=h, timeout=5).status_code == 200
    faults = [c.fault for c in gh.calls("GET")]
    assert faults == ["status 503", "drop", "lose_response", None]
    # a lost response did the work (status recorded) but never answered
    lost = gh.calls("GET")[2]
    assert lost.status == 200 and not lost.responded


def _token_headers(gh) -> dict[str, str]:
    h = {"Authorization": f"Bearer {_app_jwt(gh)}"}
    token = requests.post(f"{gh.url}/app/installations/1/access_tokens", headers=h, timeout=5).json()["token"]
    return {"Authorization": f"token {token}"}


def test_pr_conversation_endpoints_answer_as_documented(fake_github):
    """Comments, reactions, labels, collaborator permission and run cancels (the /ci commands' calls)."""
    gh = fake_github
    th = _token_headers(gh)
    base = f"{gh.url}/repos/pytorch/pytorch"
    req = SPEC["operations"]["POST /repos/{owner}/{repo}/issues/{issue_number}/comments"]["request"]
    Draft202012Validator(req).validate({"body": "hello"})
    r = requests.post(f"{base}/issues/7/comments", json={"body": "hello"}, headers=th, timeout=5)
    validate("POST /repos/{owner}/{repo}/issues/{issue_number}/comments", r.status_code, r.json())
    cid = r.json()["id"]
    r = requests.patch(f"{base}/issues/comments/{cid}", json={"body": "edited"}, headers=th, timeout=5)
    validate("PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}", r.status_code, r.json())
    assert r.json()["body"] == "edited"
    r = requests.patch(f"{base}/issues/comments/{cid}", json={"nobody": 1}, headers=th, timeout=5)
    validate("PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}", r.status_code, r.json())
    for expected in (201, 200):  # the same reaction twice: 200 the second time
        r = requests.post(f"{base}/issues/comments/{cid}/reactions", json={"content": "eyes"}, headers=th, timeout=5)
        assert r.status_code == expected
        validate("POST /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions", r.status_code, r.json())
    r = requests.post(f"{base}/issues/comments/{cid}/reactions", json={"content": "party"}, headers=th, timeout=5)
    validate("POST /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions", r.status_code, r.json())
    assert r.status_code == 422
    r = requests.post(f"{base}/issues/7/labels", json={"labels": ["crcr/ok-to-test"]}, headers=th, timeout=5)
    validate("POST /repos/{owner}/{repo}/issues/{issue_number}/labels", r.status_code, r.json())
    for role, folded in (("maintain", "write"), ("triage", "read"), ("admin", "admin"), ("none", "none")):
        gh.set_permission("pytorch/pytorch", f"u-{role}", role)
        r = requests.get(f"{base}/collaborators/u-{role}/permission", headers=th, timeout=5)
        validate("GET /repos/{owner}/{repo}/collaborators/{username}/permission", r.status_code, r.json())
        assert (r.json()["permission"], r.json()["role_name"]) == (folded, role)
    gh.set_run("org/l4", 55)
    r = requests.post(f"{gh.url}/repos/org/l4/actions/runs/55/cancel", headers=th, timeout=5)
    validate("POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel", r.status_code, r.json())
    assert r.status_code == 202
    r = requests.post(f"{gh.url}/repos/org/l4/actions/runs/55/cancel", headers=th, timeout=5)
    validate("POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel", r.status_code, r.json())
    assert r.status_code == 409
