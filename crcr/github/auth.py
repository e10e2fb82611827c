"""GitHub App authentication: app JWT -> installation token, cached until near expiry.

PyGithub mints a new token for every new auth object, so crcr keeps its own cache:
the installation of each repository (``GET /repos/{o}/{r}/installation``) and one token
per installation (``POST /app/installations/{id}/access_tokens``), reused until
``refresh_margin_s`` before its ``expires_at``. Concurrent callers for the same
installation wait for one mint instead of each minting their own.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives import serialization
from github import Auth, GithubIntegration

# PyGithub's defaults retry 5xx/403 silently and sleep between calls; crcr owns retries.
NO_RETRY_KWARGS = {"retry": None, "seconds_between_requests": None, "seconds_between_writes": None}


class CachedAppAuth(Auth.AppAuth):
    """The App JWT, signed once and reused until a minute before it expires.

    PyGithub signs a fresh JWT for every App request, parsing the PEM key each time
    (about 100 ms of CPU per request on a small machine: a cold fan-out to 32
    installations spent seconds there). The key is parsed once here and the JWT
    (``iat`` 60 s in the past, ``exp`` 9 minutes ahead, ``iss`` the app id as a string)
    is shared by all threads.
    """

    def __init__(self, app_id: str, private_key: str, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(str(app_id), private_key)
        self._key = serialization.load_pem_private_key(private_key.encode(), password=None)
        self._clock = clock
        self._jwt: tuple[str, float] | None = None
        self._jwt_lock = threading.Lock()

    def create_jwt(self, expiration: int | None = None) -> str:
        now = int(self._clock())
        with self._jwt_lock:
            if self._jwt is not None and self._jwt[1] - 60 > now:
                return self._jwt[0]
            exp = now + 540
            token = jwt.encode({"iat": now - 60, "exp": exp, "iss": str(self.app_id)}, self._key, algorithm="RS256")
            self._jwt = (token, exp)
            return token


@dataclass(frozen=True)
class CachedToken:
    token: str
    expires_at: float  # unix seconds


class InstallationTokens:
    """Installation ids per repo and tokens per installation, both cached."""

    def __init__(self, app_id: str, private_key: str, base_url: str, *, timeout_s: float = 10.0,
                 refresh_margin_s: float = 300.0, clock: Callable[[], float] = time.time) -> None:
        self.app_id = str(app_id)
        self.base_url = base_url.rstrip("/")
        self.refresh_margin_s = refresh_margin_s
        self.clock = clock
        self._integration = GithubIntegration(
            auth=CachedAppAuth(self.app_id, private_key, clock=clock), base_url=self.base_url,
            timeout=max(1, math.ceil(timeout_s)), pool_size=32, **NO_RETRY_KWARGS,
        )
        self._installations: dict[str, int] = {}
        self._tokens: dict[int, CachedToken] = {}
        self._locks: dict[object, threading.Lock] = {}
        self._guard = threading.Lock()
        self.mints = 0  # tokens minted by this process (observable in tests and benchmarks)

    def _lock_for(self, key: object) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def installation_id(self, repo: str) -> int:
        """The App installation that covers ``repo`` (raises GithubException 404 if none)."""
        cached = self._installations.get(repo)
        if cached is not None:
            return cached
        with self._lock_for(("inst", repo)):
            if repo in self._installations:
                return self._installations[repo]
            owner, name = repo.split("/", 1)
            inst = self._integration.get_repo_installation(owner, name)
            self._installations[repo] = inst.id
            return inst.id

    def token(self, installation_id: int) -> str:
        """A valid installation token, minted only when none is cached or it nears expiry."""
        cached = self._tokens.get(installation_id)
        if cached and cached.expires_at - self.refresh_margin_s > self.clock():
            return cached.token
        with self._lock_for(("tok", installation_id)):
            cached = self._tokens.get(installation_id)
            if cached and cached.expires_at - self.refresh_margin_s > self.clock():
                return cached.token
            auth = self._integration.get_access_token(installation_id)
            expires = auth.expires_at
            if expires is None:  # GitHub documents one hour
                exp_ts = self.clock() + 3600
            else:
                if expires.tzinfo is None:
                    expires = expires.replace(tzinfo=dt.UTC)
                exp_ts = expires.timestamp()
            self._tokens[installation_id] = CachedToken(auth.token, exp_ts)
            self.mints += 1
            return auth.token

    def forget(self, repo: str) -> None:
        """Drop what is cached for ``repo`` (after a 401: the token or installation changed)."""
        inst = self._installations.pop(repo, None)
        if inst is not None:
            self._tokens.pop(inst, None)

    def token_for_repo(self, repo: str) -> str:
        return self.token(self.installation_id(repo))
