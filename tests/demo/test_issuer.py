"""The demo's OIDC issuer: tokens fetched the GitHub Actions way verify with the relay's own verifier."""

from __future__ import annotations

import httpx
import pytest

from crcr.demo.issuer import LocalIssuer
from relay.oidc import AuthError, OidcVerifier, Provider
from runners.report import resolve_token


def test_a_job_token_from_the_token_endpoint_verifies_against_the_served_jwks() -> None:
    with LocalIssuer(repository="local/snpu") as issuer:
        token = resolve_token(None, issuer.job_environment(), "pytorch-cross-repo-ci-relay")
        verifier = OidcVerifier([Provider(issuer.url, issuer.url + "/.well-known/jwks")], "pytorch-cross-repo-ci-relay")
        ident = verifier.verify(f"Bearer {token}")
        assert (ident.repo, ident.issuer) == ("local/snpu", issuer.url)
        assert verifier.fetches == 1
        other = OidcVerifier([Provider(issuer.url, issuer.url + "/.well-known/jwks")], "another-audience")
        with pytest.raises(AuthError, match="audience"):
            other.verify(f"Bearer {token}")


def test_the_token_endpoint_wants_the_request_token() -> None:
    with LocalIssuer(repository="local/snpu") as issuer:
        url = issuer.job_environment()["ACTIONS_ID_TOKEN_REQUEST_URL"]
        assert httpx.get(url, params={"audience": "a"}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(url, params={"audience": "a"}).status_code == 401
        assert issuer.issued == 0
