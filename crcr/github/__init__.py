"""crcr's GitHub adapter: App auth with cached installation tokens and PyGithub clients.

    app = GitHubApp.from_settings(settings)
    gh = app.client_for_repo("org/repo")      # a configured ``github.Github``
    gh.get_repo("org/repo").create_check_run(...)   # lazy: no GET /repos

Clients are made with PyGithub's hidden retries and throttling turned off
(``retry=None``, ``seconds_between_*=None``) and ``lazy=True``, so every HTTP request
is one the caller decided to make; callers own their retry policy.
"""

from __future__ import annotations

import math
import threading

from github import Auth, Github

from crcr.errors import ConfigError
from crcr.github.auth import NO_RETRY_KWARGS, InstallationTokens

__all__ = ["GitHubApp", "InstallationTokens", "make_client"]


def make_client(token: str, base_url: str, *, timeout_s: float = 10.0, pool_size: int | None = None) -> Github:
    """A PyGithub client for ``token`` with crcr's rules (no hidden retries, lazy)."""
    return Github(auth=Auth.Token(token), base_url=base_url.rstrip("/"), timeout=max(1, math.ceil(timeout_s)),
                  lazy=True, pool_size=pool_size, **NO_RETRY_KWARGS)


class GitHubApp:
    """The relay's GitHub App: installation tokens plus one reusable client per token."""

    def __init__(self, app_id: str, private_key: str, base_url: str, *, timeout_s: float = 10.0,
                 pool_size: int = 32) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.pool_size = pool_size
        self.tokens = InstallationTokens(app_id, private_key, self.base_url, timeout_s=timeout_s)
        self._clients: dict[str, Github] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings) -> GitHubApp:
        key = settings.private_key_pem()
        if not settings.github_app_id or not key:
            raise ConfigError(
                "dispatching to GitHub needs a GitHub App: CRCR_GITHUB_APP_ID and a private key are not set",
                hint="set CRCR_GITHUB_APP_ID and CRCR_GITHUB_PRIVATE_KEY_FILE, or use only `local` targets",
                reference="github-app-missing",
            )
        return cls(settings.github_app_id, key, settings.github_api_url, timeout_s=settings.dispatch_timeout_s)

    def client_for_repo(self, repo: str) -> Github:
        """A configured ``Github`` authenticated as the installation that covers ``repo``."""
        token = self.tokens.token_for_repo(repo)
        with self._lock:
            client = self._clients.get(token)
            if client is None:
                # tokens rotate hourly: keep only clients for live tokens
                if len(self._clients) > 256:
                    self._clients.clear()
                client = make_client(token, self.base_url, timeout_s=self.timeout_s, pool_size=self.pool_size)
                self._clients[token] = client
            return client

    def forget(self, repo: str) -> None:
        self.tokens.forget(repo)
