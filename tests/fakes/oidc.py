"""A local OIDC issuer: a JWKS endpoint over real HTTP and a token minter with keys made here.

    with FakeIssuer() as issuer:                  # serves /.well-known/jwks on 127.0.0.1:<port>
        token = issuer.mint(repository="org/repo", audience="pytorch-cross-repo-ci-relay")
        issuer.rotate()                           # a new key (new kid) signs from now on
        issuer.requests                           # how many times the JWKS was fetched

Keys are RSA-2048 generated once per process and handed out in turn, so tests stay
fast while each issuer still has keys nobody else signs with.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

_POOL: list[rsa.RSAPrivateKey] = []
_POOL_LOCK = threading.Lock()
_NEXT = itertools.count()


def _key() -> rsa.RSAPrivateKey:
    """A private key from a small per-process pool (generating RSA keys costs ~50 ms each)."""
    with _POOL_LOCK:
        while len(_POOL) < 6:
            _POOL.append(rsa.generate_private_key(public_exponent=65537, key_size=2048))
        return _POOL[next(_NEXT) % len(_POOL)]


def fresh_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class FakeIssuer:
    """One OIDC issuer at ``http://127.0.0.1:<port>`` publishing its keys as a JWKS."""

    def __init__(self, *, issuer_path: str = "") -> None:
        self._lock = threading.Lock()
        self.keys: list[tuple[str, rsa.RSAPrivateKey]] = [(uuid.uuid4().hex[:16], _key())]
        self.published: list[tuple[str, rsa.RSAPrivateKey]] = list(self.keys)
        self.requests = 0
        self.fail = False
        issuer_self = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                with issuer_self._lock:
                    issuer_self.requests += 1
                    fail = issuer_self.fail
                    body = json.dumps(issuer_self.jwks()).encode()
                if fail or not self.path.endswith("/.well-known/jwks"):
                    self.send_response(503 if fail else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{issuer_path}"
        self.jwks_uri = f"{self.url}/.well-known/jwks"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FakeIssuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def kid(self) -> str:
        return self.keys[-1][0]

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid, key in self.published:
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
            jwk.update({"kid": kid, "use": "sig", "alg": "RS256"})
            out.append(jwk)
        return {"keys": out}

    def rotate(self, *, keep_old: bool = False) -> str:
        """Sign with a brand-new key from now on and publish it; returns its kid."""
        kid = uuid.uuid4().hex[:16]
        with self._lock:
            self.keys.append((kid, fresh_key()))
            self.published = list(self.keys) if keep_old else [self.keys[-1]]
        return kid

    def mint(
        self,
        *,
        repository: str | None = "org/repo",
        audience: str = "pytorch-cross-repo-ci-relay",
        issuer: str | None = None,
        expires_in: float = 300,
        issued_ago: float = 5,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """A signed token like GitHub Actions mints (``repository`` claim etc.)."""
        now = time.time()
        claims: dict[str, Any] = {
            "iss": issuer or self.url,
            "aud": audience,
            "iat": int(now - issued_ago),
            "nbf": int(now - issued_ago),
            "exp": int(now + expires_in),
            "jti": uuid.uuid4().hex,
            "sub": f"repo:{repository}:ref:refs/heads/main" if repository else "pipeline",
        }
        if repository is not None:
            claims["repository"] = repository
            claims["repository_owner"] = repository.split("/")[0]
        claims.update(extra or {})
        signing_kid, signing_key = self.keys[-1]
        return jwt.encode(claims, key or signing_key, algorithm="RS256", headers={"kid": kid or signing_kid})

    def bearer(self, **kwargs: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.mint(**kwargs)}"}
