"""A local OIDC issuer for ``crcr demo``: a real JWKS over HTTP and GitHub Actions' token endpoint.

The relay verifies callbacks exactly as in production (issuer configured in
``CRCR_OIDC_ISSUERS``, keys fetched from ``<issuer>/.well-known/jwks``, audience,
expiry, ``repository`` claim). The downstream job gets its token the way a GitHub
Actions job does: ``GET $ACTIONS_ID_TOKEN_REQUEST_URL&audience=...`` with
``Authorization: Bearer $ACTIONS_ID_TOKEN_REQUEST_TOKEN`` answers ``{"value": JWT}``.

It lives only as long as ``crcr demo`` runs and is configured only in the environment
of the relay the demo starts: it is never a default issuer.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

TOKEN_PATH = "/token"  # noqa: S105 - a URL path
JWKS_PATH = "/.well-known/jwks"


class LocalIssuer:
    """``with LocalIssuer(repository="local/snpu") as iss:`` serves on ``iss.url`` until exit."""

    def __init__(self, *, repository: str, token_lifetime_s: int = 900) -> None:
        self.repository = repository
        self.token_lifetime_s = token_lifetime_s
        self.request_token = secrets.token_urlsafe(32)  # what the job presents to get an id token
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:16]
        self.issued = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if url.path == JWKS_PATH:
                    self._send(200, issuer.jwks())
                elif url.path == TOKEN_PATH:
                    given = self.headers.get("Authorization", "").partition(" ")[2]
                    if not hmac.compare_digest(given.encode(), issuer.request_token.encode()):
                        self._send(401, {"message": "bad request token"})
                        return
                    audience = (parse_qs(url.query).get("audience") or [""])[0]
                    if not audience:
                        self._send(400, {"message": "audience is required"})
                        return
                    self._send(200, {"value": issuer.mint(audience)})
                else:
                    self._send(404, {"message": "not found"})

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self) -> LocalIssuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
        jwk.update({"kid": self.kid, "use": "sig", "alg": "RS256"})
        return {"keys": [jwk]}

    def mint(self, audience: str) -> str:
        now = int(time.time())
        self.issued += 1
        claims = {"iss": self.url, "aud": audience, "iat": now, "nbf": now, "exp": now + self.token_lifetime_s,
                  "jti": uuid.uuid4().hex, "sub": f"repo:{self.repository}:ref:refs/heads/main",
                  "repository": self.repository, "repository_owner": self.repository.split("/")[0]}
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self.kid})

    def job_environment(self) -> dict[str, str]:
        """The variables a GitHub Actions job with ``id-token: write`` has (read by ``crcr report``)."""
        return {"ACTIONS_ID_TOKEN_REQUEST_URL": f"{self.url}{TOKEN_PATH}",
                "ACTIONS_ID_TOKEN_REQUEST_TOKEN": self.request_token}
