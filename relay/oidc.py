"""OIDC bearer verification for ``/callback`` and ``/results``.

A token is accepted when its issuer is configured, its signature verifies against
that issuer's JWKS, and its audience, issuer and expiry hold. The caller's identity
is the ``repository`` claim and nothing else; Buildkite tokens carry none, so their
identity comes from a mapping of immutable ``organization_id/pipeline_id`` to a repo
(``ci_providers.yml``, read in CRCR's format, ``required_claims`` included). Slugs
are not used: they can be renamed and then re-taken.

JWKS documents are cached per issuer for ``oidc_jwks_ttl_s``; a token whose ``kid``
is not in the cached set triggers one early refetch (key rotation), at most once per
``MIN_REFETCH_S`` per issuer so forged kids cannot hammer the issuer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
import yaml

from crcr.errors import ConfigError
from crcr.settings import Settings

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
BUILDKITE_ISSUER = "https://agent.buildkite.com"
ALGORITHMS = ["RS256", "ES256"]
MIN_REFETCH_S = 10.0
MAX_TOKEN_CHARS = 8192
LEEWAY_S = 30


class AuthError(Exception):
    """The bearer token is missing or invalid (401), or names a caller not allowed to call (403)."""

    def __init__(self, reason: str, status: int = 401) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class Identity:
    """Who called: the repo the token vouches for, and which issuer said so."""

    repo: str
    issuer: str
    subject: str = ""


@dataclass
class Provider:
    """One OIDC issuer; ``repo_map`` set means identity comes from it, not from claims."""

    issuer: str
    jwks_uri: str
    repo_map: dict[str, str] | None = None
    # per repo_map key: claim -> allowed values (any matches), as CRCR's ``required_claims``
    required_claims: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)


@dataclass
class _Keys:
    keys: dict[str, jwt.PyJWK] = field(default_factory=dict)
    fetched_at: float = float("-inf")


def _default_jwks_uri(issuer: str) -> str:
    # GitHub Actions and Buildkite both publish their keys here
    return issuer.rstrip("/") + "/.well-known/jwks"


def load_providers(settings: Settings) -> list[Provider]:
    """Issuers from ``oidc_issuers`` plus those in ``ci_providers.yml`` (the file wins)."""
    providers = {
        # Buildkite has no repository claim: without a mapping file every pipeline is refused
        iss: Provider(iss, _default_jwks_uri(iss), {} if iss == BUILDKITE_ISSUER else None)
        for iss in settings.oidc_issuers
    }
    if settings.ci_providers is not None:
        for p in parse_ci_providers(Path(settings.ci_providers)):
            providers[p.issuer] = p
    return list(providers.values())


# CRCR compiles its trust anchors in and reads only mappings from the file: a provider
# named here needs no ``issuer`` key (crcr's own format may still name one)
KNOWN_PROVIDERS = {"github": GITHUB_ISSUER, "buildkite": BUILDKITE_ISSUER}


def _bad_providers(path: Path, key: str, what: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {what}", hint="fix CRCR_CI_PROVIDERS; see docs/callbacks.md#ci-providers")


def _repo_map(path: Path, where: str, raw: Any) -> tuple[dict[str, str], dict[str, dict[str, tuple[str, ...]]]]:
    """CRCR's ``repo_map``: ``org_id/pipeline_id: owner/repo`` or ``{repo, required_claims}``."""
    if not isinstance(raw, dict):
        raise _bad_providers(path, where, "repo_map must be a mapping of org_id/pipeline_id -> owner/repo")
    repos: dict[str, str] = {}
    claims: dict[str, dict[str, tuple[str, ...]]] = {}
    for key_raw, value in raw.items():
        key = str(key_raw).strip()
        entry = f"{where}.{key}"
        if key.count("/") != 1 or not all(key.split("/")):
            raise _bad_providers(path, entry, "the key must be organization_id/pipeline_id (the immutable UUIDs)")
        required: Any = {}
        if isinstance(value, dict):
            repo, required = value.get("repo"), value.get("required_claims") or {}
        else:
            repo = value
        if not isinstance(repo, str) or repo.strip().count("/") != 1 or not all(repo.strip().split("/")):
            raise _bad_providers(path, entry, f"{repo!r} is not an owner/repo name")
        if not isinstance(required, dict):
            raise _bad_providers(path, f"{entry}.required_claims", "must map a claim name to its allowed values")
        norm = {}
        for claim, allowed in required.items():
            values = allowed if isinstance(allowed, list) else [allowed]
            if not values or not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in values):
                raise _bad_providers(path, f"{entry}.required_claims.{claim}", "expected a value or a list of values")
            norm[str(claim)] = tuple(str(v) for v in values)
        repos[key.lower()] = repo.strip()
        if norm:
            claims[key.lower()] = norm
    return repos, claims


def parse_ci_providers(path: Path) -> list[Provider]:
    """Read ``ci_providers.yml``: CRCR's file unchanged, or crcr's with explicit issuers.

    CRCR's shape is ``providers: {buildkite: {repo_map: {...}}}`` (issuers compiled in)
    plus a legacy top-level ``buildkite:`` mapping, read only when the first yields no
    mapping, as CRCR does. A provider entry may also give ``issuer`` and ``jwks_uri``
    (crcr's extension; any issuer). Anything crcr cannot use is a ConfigError naming
    the key, raised when the relay starts, never at request time.
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read ci_providers file {path}: {exc.strerror}", hint="fix CRCR_CI_PROVIDERS") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}", hint="see docs/callbacks.md#ci-providers") from exc
    if not isinstance(data, dict):
        raise _bad_providers(path, "(top level)", "expected a mapping with a 'providers' key")
    entries = data.get("providers")
    legacy = data.get("buildkite")
    if entries is None and legacy is None:
        raise _bad_providers(path, "providers", "missing: expected 'providers: {buildkite: {repo_map: ...}}'")
    if entries is not None and not isinstance(entries, dict):
        raise _bad_providers(path, "providers", "expected a mapping of provider name -> settings")
    found: dict[str, Provider] = {}
    for name, entry in (entries or {}).items():
        where = f"providers.{name}"
        if not isinstance(entry, dict):
            raise _bad_providers(path, where, "expected a mapping (repo_map, or issuer/jwks_uri/repo_map)")
        issuer = entry.get("issuer", KNOWN_PROVIDERS.get(str(name)))
        if not isinstance(issuer, str) or not issuer.startswith(("https://", "http://")):
            raise _bad_providers(path, where, f"needs an 'issuer' URL (known without one: {', '.join(KNOWN_PROVIDERS)})")
        jwks_uri = entry.get("jwks_uri") or _default_jwks_uri(issuer)
        repo_map: dict[str, str] | None = None
        claims: dict[str, dict[str, tuple[str, ...]]] = {}
        if entry.get("repo_map") is not None:
            repo_map, claims = _repo_map(path, f"{where}.repo_map", entry["repo_map"])
        elif issuer == BUILDKITE_ISSUER:
            repo_map = {}  # Buildkite has no repository claim: unmapped pipelines are refused
        found[issuer] = Provider(issuer=issuer, jwks_uri=jwks_uri, repo_map=repo_map, required_claims=claims)
    bk = found.get(BUILDKITE_ISSUER)
    if legacy is not None and (bk is None or not bk.repo_map):  # CRCR's legacy flat section
        repo_map, claims = _repo_map(path, "buildkite", legacy)
        found[BUILDKITE_ISSUER] = Provider(BUILDKITE_ISSUER, bk.jwks_uri if bk else _default_jwks_uri(BUILDKITE_ISSUER),
                                           repo_map, claims)
    return list(found.values())


class OidcVerifier:
    """Verifies bearer tokens; thread-safe (FastAPI runs sync endpoints in a pool)."""

    def __init__(
        self,
        providers: list[Provider],
        audience: str,
        *,
        jwks_ttl_s: float = 600.0,
        http: httpx.Client | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.providers = {p.issuer: p for p in providers}
        self.audience = audience
        self.jwks_ttl_s = jwks_ttl_s
        self._http = http or httpx.Client(timeout=5.0, follow_redirects=False)
        self._clock = clock
        self._keys: dict[str, _Keys] = {}
        self._lock = threading.Lock()
        self.fetches = 0  # observable in tests and metrics

    @classmethod
    def from_settings(cls, settings: Settings, http: httpx.Client | None = None) -> OidcVerifier:
        return cls(load_providers(settings), settings.oidc_audience, jwks_ttl_s=settings.oidc_jwks_ttl_s, http=http)

    # -- keys ------------------------------------------------------------------------
    def _fetch(self, provider: Provider) -> _Keys:
        self.fetches += 1
        try:
            resp = self._http.get(provider.jwks_uri)
            resp.raise_for_status()
            jwks = jwt.PyJWKSet.from_dict(resp.json())
        except (httpx.HTTPError, ValueError, jwt.PyJWKSetError) as exc:
            raise AuthError(f"cannot fetch the signing keys of {provider.issuer}: {type(exc).__name__}") from exc
        return _Keys({k.key_id: k for k in jwks.keys if k.key_id}, self._clock())

    def _key_for(self, provider: Provider, kid: str) -> jwt.PyJWK:
        with self._lock:
            cached = self._keys.get(provider.issuer)
            now = self._clock()
            expired = cached is not None and now - cached.fetched_at > self.jwks_ttl_s
            # rotation: an unknown kid may be a key the issuer published since the last fetch
            rotated = cached is not None and kid not in cached.keys and now - cached.fetched_at >= MIN_REFETCH_S
            if cached is None:
                cached = self._keys[provider.issuer] = self._fetch(provider)
            elif expired or rotated:
                try:
                    cached = self._keys[provider.issuer] = self._fetch(provider)
                except AuthError:
                    # the issuer is unreachable: keep verifying with the keys we have, and ask
                    # again after MIN_REFETCH_S rather than on every request
                    cached.fetched_at = now - self.jwks_ttl_s + MIN_REFETCH_S
            key = cached.keys.get(kid)
        if key is None:
            raise AuthError(f"token signed with unknown key id for issuer {provider.issuer}")
        return key

    # -- tokens ----------------------------------------------------------------------
    def verify(self, authorization: str | None) -> Identity:
        """The identity behind an ``Authorization: Bearer ...`` header, or AuthError."""
        if not authorization:
            raise AuthError("missing Authorization header (expected 'Bearer <OIDC token>')")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError("Authorization must be 'Bearer <OIDC token>'")
        if len(token) > MAX_TOKEN_CHARS:
            raise AuthError("token too long")
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise AuthError(f"malformed token: {exc}") from exc
        issuer = unverified.get("iss")
        provider = self.providers.get(issuer) if isinstance(issuer, str) else None
        if provider is None:
            raise AuthError("token issuer is not one this relay accepts")
        kid = header.get("kid")
        alg = header.get("alg")
        if not isinstance(kid, str) or alg not in ALGORITHMS:
            raise AuthError("token header needs a key id and an RS256/ES256 algorithm")
        key = self._key_for(provider, kid)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=provider.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthError("token expired") from exc
        except jwt.InvalidAudienceError as exc:
            raise AuthError(f"token audience is not {self.audience!r}") from exc
        except jwt.PyJWTError as exc:
            raise AuthError(f"token rejected: {exc}") from exc
        return Identity(repo=self._repo_of(provider, claims), issuer=provider.issuer, subject=str(claims.get("sub", "")))

    @staticmethod
    def _repo_of(provider: Provider, claims: dict[str, Any]) -> str:
        if provider.repo_map is not None:
            org, pipeline = claims.get("organization_id"), claims.get("pipeline_id")
            if not isinstance(org, str) or not isinstance(pipeline, str) or not org or not pipeline:
                raise AuthError(
                    "token carries no organization_id/pipeline_id claims: request them with "
                    "`buildkite-agent oidc request-token --claim organization_id,pipeline_id`"
                )
            key = f"{org}/{pipeline}".lower()
            repo = provider.repo_map.get(key)
            if repo is None:  # a valid token, but no registered pipeline: 403 as CRCR
                raise AuthError(f"pipeline {org}/{pipeline} is not mapped to a repository in ci_providers.yml", 403)
            for claim, allowed in provider.required_claims.get(key, {}).items():
                if str(claims.get(claim, "")) not in allowed:  # e.g. a fork build on a pipeline pinned to main
                    raise AuthError(f"claim {claim!r} of pipeline {org}/{pipeline} is not an allowed value", 403)
            return repo
        repo = claims.get("repository")
        if not isinstance(repo, str) or repo.count("/") != 1 or len(repo) > 200:
            raise AuthError("token carries no valid 'repository' claim")
        return repo
