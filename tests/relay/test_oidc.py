"""OIDC bearer tokens on /callback and /results: a local JWKS server, keys made here."""

from __future__ import annotations

import jwt
import pytest

from relay.oidc import AuthError, OidcVerifier, Provider, parse_ci_providers
from tests.fakes.oidc import FakeIssuer, fresh_key
from tests.relay.callbacks_harness import harness

AUD = "pytorch-cross-repo-ci-relay"


@pytest.fixture
def h(tmp_path):
    with harness(tmp_path) as h:
        h.dispatch("d-1", "org/l2repo")
        yield h


def post(h, token=None, headers=None, repo="org/l2repo"):
    hdrs = headers if headers is not None else {"Authorization": f"Bearer {token}"}
    return h.client.post("/callback", json=h.body("in_progress", "d-1"), headers=hdrs)


def test_valid_token_is_accepted(h):
    assert post(h, h.issuer.mint(repository="org/l2repo")).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"Authorization": ""}, {"Authorization": "Basic dXNlcjpwdw=="},
                                     {"Authorization": "Bearer"}, {"Authorization": "Bearer not.a.jwt"}])
def test_missing_or_malformed_token_is_401(h, headers):
    r = post(h, headers=headers)
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert h.jobs() == []


def test_forged_signature_is_401(h):
    forged = h.issuer.mint(repository="org/l2repo", key=fresh_key())  # right kid, wrong key
    r = post(h, forged)
    assert r.status_code == 401
    assert h.jobs() == []


def test_tampered_claims_are_401(h):
    good = h.issuer.mint(repository="org/l1repo")
    header, payload, sig = good.split(".")
    other = h.issuer.mint(repository="org/l2repo").split(".")[1]
    assert post(h, f"{header}.{other}.{sig}").status_code == 401


def test_expired_token_is_401(h):
    r = post(h, h.issuer.mint(repository="org/l2repo", expires_in=-120, issued_ago=900))
    assert r.status_code == 401
    assert "expired" in r.json()["error"]


def test_wrong_audience_is_401(h):
    r = post(h, h.issuer.mint(repository="org/l2repo", audience="sts.amazonaws.com"))
    assert r.status_code == 401
    assert "audience" in r.json()["error"]


def test_wrong_issuer_is_401(h):
    with FakeIssuer() as stranger:  # a real issuer this relay was not configured to trust
        r = post(h, stranger.mint(repository="org/l2repo"))
    assert r.status_code == 401
    # an issuer claim naming the trusted issuer but signed by the stranger's key fails too
    assert post(h, h.issuer.mint(repository="org/l2repo", key=fresh_key(), kid="other")).status_code == 401


def test_identity_comes_from_the_token_not_the_body(h):
    """An L1 repo naming an L2 repo in its body is still L1: ignored, nothing recorded."""
    body = h.body("in_progress", "d-1", repository="org/l2repo")
    body["repository"] = "org/l2repo"
    r = h.client.post("/callback", json=body, headers=h.issuer.bearer(repository="org/l1repo"))
    assert r.status_code == 200
    assert r.json() == {"ok": True, "status": "ignored"}
    assert h.jobs() == [] and h.log() == []


def test_repo_not_allowlisted_is_ignored_with_200(h):
    r = post(h, h.issuer.mint(repository="evil/repo"))
    assert r.status_code == 200
    assert r.json()["status"] == "ignored"
    assert h.jobs() == []


def test_token_without_repository_claim_is_401(h):
    assert post(h, h.issuer.mint(repository=None)).status_code == 401


def test_key_rotation_new_kid_is_fetched(h):
    assert post(h, h.issuer.mint(repository="org/l2repo")).status_code == 200
    fetches = h.issuer.requests
    h.issuer.rotate()
    cached = h.runtime.oidc._keys[h.issuer.url]
    cached.fetched_at -= 11  # past the 10 s refetch guard, well within the 600 s TTL
    r = h.client.post("/callback", json=h.body("in_progress", "d-1", job="after-rotation"),
                      headers=h.issuer.bearer(repository="org/l2repo"))
    assert r.status_code == 200, r.text
    assert h.issuer.requests == fetches + 1


def test_jwks_is_cached_between_requests(h):
    for i in range(3):
        post(h, h.issuer.mint(repository="org/l2repo"))
    assert h.issuer.requests == 1


def test_unknown_kid_refetch_is_rate_limited():
    with FakeIssuer() as issuer:
        t = [1000.0]
        v = OidcVerifier([Provider(issuer.url, issuer.jwks_uri)], AUD, clock=lambda: t[0])
        assert v.verify("Bearer " + issuer.mint()).repo == "org/repo"
        for _ in range(5):
            with pytest.raises(AuthError):
                v.verify("Bearer " + issuer.mint(kid="forged-kid", key=fresh_key()))
        assert issuer.requests == 1  # forged kids within MIN_REFETCH_S cost no fetch
        t[0] += 11
        with pytest.raises(AuthError):
            v.verify("Bearer " + issuer.mint(kid="forged-kid", key=fresh_key()))
        assert issuer.requests == 2


def test_jwks_outage_is_401_not_5xx(h):
    h.issuer.fail = True
    r = post(h, h.issuer.mint(repository="org/l2repo"))
    assert r.status_code == 401
    assert "signing keys" in r.json()["error"]


def test_buildkite_identity_from_pipeline_id_mapping(tmp_path):
    org_id, pipe_id = "0184a3ec-1111-4c4f-9b3e-aaaaaaaaaaaa", "0184a3ec-2222-4c4f-9b3e-bbbbbbbbbbbb"
    with FakeIssuer() as bk:
        providers = tmp_path / "ci_providers.yml"
        providers.write_text(
            "providers:\n"
            f"  buildkite:\n    issuer: {bk.url}\n    jwks_uri: {bk.jwks_uri}\n"
            f"    repo_map:\n      {org_id}/{pipe_id}: org/l2repo\n"
        )
        with harness(tmp_path, ci_providers=providers) as h:
            h.dispatch("d-1", "org/l2repo")
            claims = {"organization_id": org_id, "pipeline_id": pipe_id, "organization_slug": "org",
                      "pipeline_slug": "ci"}
            token = bk.mint(repository=None, extra=claims)
            r = h.client.post("/callback", json=h.body("in_progress", "d-1"), headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200, r.text
            assert h.jobs()[0].repo == "org/l2repo"
            # a repository claim cannot override the mapping, and an unmapped pipeline is refused
            sneaky = bk.mint(repository="org/l4repo", extra={**claims, "pipeline_id": "0184a3ec-3333"})
            r = h.client.post("/callback", json=h.body("in_progress", "d-1", job="x"),
                              headers={"Authorization": f"Bearer {sneaky}"})
            assert r.status_code == 403  # a valid token of an unregistered pipeline: 403, as CRCR
            assert "not mapped" in r.json()["error"]


def test_ci_providers_file_errors_name_the_entry(tmp_path):
    from crcr.errors import ConfigError

    p = tmp_path / "ci.yml"
    p.write_text("providers:\n  bk:\n    issuer: https://agent.buildkite.com\n    repo_map:\n      vllm/ci: not-a-repo\n")
    with pytest.raises(ConfigError) as exc:
        parse_ci_providers(p)
    assert "vllm/ci" in exc.value.message
    p.write_text("providers:\n  bk:\n    jwks_uri: https://x\n")
    with pytest.raises(ConfigError, match="issuer"):
        parse_ci_providers(p)


def test_none_algorithm_is_refused():
    with FakeIssuer() as issuer:
        v = OidcVerifier([Provider(issuer.url, issuer.jwks_uri)], AUD)
        token = jwt.encode({"iss": issuer.url, "aud": AUD, "repository": "org/repo", "exp": 2**40, "iat": 0},
                           None, algorithm="none", headers={"kid": issuer.kid})
        with pytest.raises(AuthError):
            v.verify(f"Bearer {token}")


def test_expired_jwks_cache_survives_an_issuer_outage():
    with FakeIssuer() as issuer:
        t = [1000.0]
        v = OidcVerifier([Provider(issuer.url, issuer.jwks_uri)], AUD, jwks_ttl_s=600, clock=lambda: t[0])
        assert v.verify("Bearer " + issuer.mint()).repo == "org/repo"
        issuer.fail = True
        t[0] += 700  # past the TTL, and the issuer answers 503
        assert v.verify("Bearer " + issuer.mint()).repo == "org/repo"  # the known key still verifies
        requests = issuer.requests
        v.verify("Bearer " + issuer.mint())
        assert issuer.requests == requests  # no refetch on every request while it is down
        t[0] += 11
        issuer.fail = False
        issuer.rotate()
        assert v.verify("Bearer " + issuer.mint()).repo == "org/repo"  # back up: new keys fetched
