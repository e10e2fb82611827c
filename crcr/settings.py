"""Settings: ``CRCR_*`` environment variables, then an optional YAML file (``CRCR_CONFIG``).

One cached ``get_settings()``; tests build ``Settings(...)`` directly or call
``get_settings.cache_clear()`` after changing the environment. Secrets are
``SecretStr`` so they never print in reprs, logs or ``crcr config show``.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from crcr.errors import ConfigError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class _YamlFileSource(PydanticBaseSettingsSource):
    """Reads the file named by ``CRCR_CONFIG`` (YAML mapping of setting -> value)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = os.environ.get("CRCR_CONFIG")
        if not path:
            return {}
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"CRCR_CONFIG names {path!r}, which is not a file", hint="unset CRCR_CONFIG or fix the path")
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}", hint="fix the settings file") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of setting names to values", hint="see docs/configuration.md")
        known = set(Settings.model_fields)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{path}: unknown settings {unknown}", hint="see docs/configuration.md for every key")
        return data


class Settings(BaseSettings):
    """Every setting crcr reads. Each is ``CRCR_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="CRCR_", extra="ignore", case_sensitive=False)

    # where state lives
    data_dir: Path = Field(Path(".crcr"), description="directory for the SQLite database, queue and logs")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default sqlite:///<data_dir>/crcr.db (WAL)")
    queue_url: str | None = Field(None, description="huey queue: redis://... for RedisHuey; default SQLite in data_dir")
    queue_name: str = Field("crcr", description="huey queue name (several relays can share one Redis)")
    workers: int = Field(16, ge=1, description="worker threads of crcr serve's dispatch worker (parallel dispatches)")

    # upstream and intake
    upstream_repo: str = Field("pytorch/pytorch", description="the upstream repository whose events are relayed")
    webhook_secret: SecretStr | None = Field(None, description="GitHub webhook secret (HMAC-SHA256)")
    max_webhook_bytes: int = Field(25 * 1024 * 1024, gt=0, description="bodies larger than this get 413")

    # downstream targets
    allowlist: str = Field("configs/allowlist.yaml", description="path or https URL of the CRCR-format allowlist")
    allowlist_ttl_s: float = Field(300.0, ge=0, description="how long a fetched allowlist is cached")

    # GitHub
    github_api_url: str = Field("https://api.github.com", description="GitHub REST base URL (GHES or a test server)")
    github_app_id: str | None = Field(None, description="the relay's GitHub App id")
    github_private_key: SecretStr | None = Field(None, description="the App's PEM private key (or use the _file form)")
    github_private_key_file: Path | None = Field(None, description="path to the App's PEM private key")
    github_token: SecretStr | None = Field(None, description="a plain token, for read-only lookups where no App is set")
    check_sink: str = Field("github", description="where check runs go: github (the App), or local: JSON files under "
                                                  "<data_dir>/checks/ (no GitHub; what crcr demo uses)")

    # dispatch
    dispatch_max_attempts: int = Field(8, ge=1, description="attempts before a dispatch is dead")
    dispatch_backoff_base_s: float = Field(2.0, gt=0, description="first retry delay; doubles per attempt, with jitter")
    dispatch_backoff_max_s: float = Field(600.0, gt=0, description="longest delay between attempts")
    dispatch_timeout_s: float = Field(10.0, gt=0, description="HTTP timeout of one dispatch request")
    sweeper_interval_s: float = Field(30.0, gt=0, description="how often rows left in flight are re-enqueued")
    sweeper_stale_after_s: float = Field(120.0, gt=0, description="a row in flight this long without progress is re-enqueued")
    retention_days: float = Field(30.0, gt=0, description="default age for `crcr db prune` (payloads older are dropped)")

    # callbacks
    oidc_issuers: list[str] = Field(
        default_factory=lambda: ["https://token.actions.githubusercontent.com"],
        description="OIDC issuers whose tokens are accepted on /callback and /results",
    )
    oidc_audience: str = Field("pytorch-cross-repo-ci-relay", description="audience the callback tokens must carry")
    oidc_jwks_ttl_s: float = Field(600.0, ge=0, description="JWKS cache lifetime; an unknown kid refetches early")
    ci_providers: Path | None = Field(None, description="ci_providers.yml: Buildkite org/pipeline ids -> repo")
    callback_rate_per_minute: int = Field(60, ge=1, description="callbacks accepted per repo per minute, then 429")
    max_results_bytes: int = Field(32 * 1024 * 1024, gt=0, description="largest /results upload (after gunzip)")

    # triage's bisection reruns (the relay's trunk analysis and `crcr triage analyze --request-reruns`)
    triage_rerun_spacing_s: float = Field(120.0, ge=0, description="seconds between two rerun requests of a backend "
                                          "becoming due (pacing; 0: all at once)")
    triage_reruns_per_round: int = Field(1, ge=1, le=8, description="commits one analysis may ask to rerun at once "
                                         "(1: binary search; k: the gap cut in k+1 parts, run concurrently)")
    triage_min_interval_s: float = Field(30.0, ge=0, description="the relay analyses a backend's trunk at most once "
                                         "per this many seconds (a burst of shard callbacks is one look)")

    # selector agent (crcr select plan --agent claude)
    anthropic_api_key: SecretStr | None = Field(None, description="Anthropic API key (else ANTHROPIC_API_KEY)")
    anthropic_base_url: str | None = Field(None, description="Messages API base URL (a proxy or a test server)")
    select_agent_model: str = Field("claude-sonnet-4-6", description="model the selector's Claude agent uses")
    select_agent_batch: int = Field(20, ge=1, le=200, description="tests per agent request")
    select_trace_budget_s: float = Field(
        600.0, ge=0, description="seconds crcr select plan may spend running CPU twins (the CPU trace) in one plan; "
        "the tests left are planned without a trace and say so, a re-plan continues (0: no budget)")
    select_probe_budget_s: float = Field(
        600.0, ge=0, description="seconds crcr select plan may spend running template probes in one plan; the tests "
        "whose probe did not run are planned from the capability file and say so, a re-plan continues (0: no budget)")
    select_trace_jobs: int = Field(1, ge=1, le=64, description="CPU-trace children crcr select plan runs at once")

    # service
    host: str = Field("127.0.0.1", description="address crcr serve binds")
    port: int = Field(8000, ge=0, le=65535, description="port crcr serve binds (0 picks a free one)")
    public_url: str | None = Field(None, description="URL where downstream jobs reach this relay (callbacks)")
    log_format: str = Field("auto", description="auto | json | text")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING, ERROR")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _YamlFileSource(settings_cls)

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, v: str) -> str:
        level = v.upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}")
        return level

    @field_validator("check_sink")
    @classmethod
    def _check_sink(cls, v: str) -> str:
        if v not in {"github", "local"}:
            raise ValueError("check_sink must be github or local")
        return v

    @field_validator("log_format")
    @classmethod
    def _log_format(cls, v: str) -> str:
        if v not in {"auto", "json", "text"}:
            raise ValueError("log_format must be auto, json or text")
        return v

    # derived values
    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'crcr.db').resolve()}"

    @property
    def resolved_queue_url(self) -> str:
        return self.queue_url or f"sqlite:///{(self.data_dir / 'queue.db').resolve()}"

    def private_key_pem(self) -> str | None:
        if self.github_private_key is not None:
            return self.github_private_key.get_secret_value()
        if self.github_private_key_file is not None:
            try:
                return self.github_private_key_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(
                    f"cannot read CRCR_GITHUB_PRIVATE_KEY_FILE {self.github_private_key_file}: {exc.strerror}",
                    hint="point it at the App's .pem file",
                ) from exc
        return None


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (cached; tests call ``get_settings.cache_clear()``)."""
    try:
        return Settings()
    except ConfigError:
        raise
    except ValidationError as exc:  # name the variable; never echo a secret's value
        raise ConfigError(f"invalid settings: {describe_validation_error(exc)}",
                          hint="fix these CRCR_* variables (or keys of the CRCR_CONFIG file); "
                               "see docs/configuration.md") from exc
    except SettingsError as exc:  # e.g. a list setting that is not JSON
        match = re.search(r'field "(\w+)"', str(exc))
        name = f"CRCR_{match.group(1).upper()}" if match else "a CRCR_* variable"
        raise ConfigError(f"invalid settings: {name} could not be parsed",
                          hint='list settings are JSON in the environment, e.g. CRCR_OIDC_ISSUERS=\'["https://..."]\'; '
                               "see docs/configuration.md") from exc
    except (TypeError, ValueError) as exc:  # anything else pydantic-settings raises while reading a value
        raise ConfigError(f"invalid settings: {exc}", hint="check the CRCR_* environment variables") from exc


def describe_validation_error(exc: ValidationError) -> str:
    """One ``CRCR_NAME: problem (got 'value')`` per error; values of secret fields are not shown."""
    parts = []
    for err in exc.errors(include_url=False):
        name = str(err["loc"][0]) if err["loc"] else "?"
        field = Settings.model_fields.get(name)
        secret = field is not None and "SecretStr" in str(field.annotation)
        msg = err["msg"].removeprefix("Value error, ")
        got = "" if secret or "input" not in err else f" (got {err['input']!r})"
        parts.append(f"CRCR_{name.upper()}: {msg}{got}")
    return "; ".join(parts)
