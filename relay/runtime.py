"""Everything a relay process shares: settings, database, allowlist, queue, GitHub, clock.

The API (``relay.app``) and a worker process (``crcr worker``) each build one
``Runtime``; the worker tasks and routers read their collaborators from it, so tests
swap any of them (a fake GitHub URL, a fixed clock, an immediate queue).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from huey import Huey
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker

from crcr.errors import ConfigError
from crcr.fileio import atomic_write_text
from crcr.queue import Wakeup, make_huey
from crcr.settings import Settings
from crcr.store.base import make_engine, make_sessionmaker
from relay.allowlist import AllowlistSource
from relay.metrics import RelayMetrics

if TYPE_CHECKING:
    from crcr.github import GitHubApp

log = logging.getLogger("crcr.relay")

Clock = Callable[[], dt.datetime]
SECRET_FILE = "webhook-secret"  # noqa: S105 - a file name, not a secret


def utc_clock() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def webhook_secret(settings: Settings, *, create: bool = True) -> tuple[bytes, Path | None]:
    """The webhook secret: ``CRCR_WEBHOOK_SECRET``, else ``<data_dir>/webhook-secret``.

    On the embedded default (no secret configured) a random secret is generated into
    the data dir on first start (mode 0600) so ``crcr serve`` works at once and never
    accepts unsigned webhooks; its path is returned so the CLI can print it.
    """
    if settings.webhook_secret is not None:
        value = settings.webhook_secret.get_secret_value()
        if not value:
            raise ConfigError("CRCR_WEBHOOK_SECRET is set but empty", hint="set it to the GitHub webhook secret")
        return value.encode("utf-8"), None
    path = settings.data_dir / SECRET_FILE
    if path.is_file():
        value = path.read_text(encoding="utf-8").strip()
        if value:
            return value.encode("utf-8"), path
    if not create:
        raise ConfigError("no webhook secret is configured", hint="set CRCR_WEBHOOK_SECRET")
    value = secrets.token_hex(32)
    atomic_write_text(path, value + "\n")
    os.chmod(path, 0o600)
    return value.encode("utf-8"), path


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    sessions: sessionmaker
    allowlist: AllowlistSource
    metrics: RelayMetrics
    huey: Huey
    clock: Clock = utc_clock
    tasks: Any = None  # relay.worker.Tasks, set by register_tasks
    # callable(backend repo) run after a failed trunk job's completed callback; crcr.cli
    # installs triage here (the relay never imports triage)
    trunk_analyzer: Any = None
    # callable(list of results bodies, oldest first) -> refinement proposals for the
    # dashboard's backend page; crcr.cli installs the selector's (the relay never imports it)
    refine_proposals: Any = None
    wakeup: Wakeup = field(default_factory=Wakeup)  # wakes this process's idle workers on enqueue
    # SQLite has one writer at a time and its busy handler *sleeps* (up to 100 ms a try)
    # while waiting; threads of this process queue on a lock instead, in microseconds.
    write_lock: Any = None
    _github: Any = None
    _github_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_settings(cls, settings: Settings, *, huey: Huey | None = None, clock: Clock | None = None,
                      queue_name: str | None = None) -> Runtime:
        engine = make_engine(settings.resolved_database_url)
        return cls(
            settings=settings,
            engine=engine,
            sessions=make_sessionmaker(engine),
            allowlist=AllowlistSource(settings.allowlist, ttl_s=settings.allowlist_ttl_s,
                                      github_api_url=settings.github_api_url),
            metrics=RelayMetrics(),
            huey=huey or make_huey(settings.resolved_queue_url, name=queue_name or settings.queue_name),
            clock=clock or utc_clock,
        )

    def __post_init__(self) -> None:
        if self.write_lock is None:
            self.write_lock = threading.Lock() if self.engine.dialect.name == "sqlite" else contextlib.nullcontext()

    def github(self) -> GitHubApp:
        """The GitHub App client, built on first use (only `github` targets need one)."""
        with self._github_lock:
            if self._github is None:
                from crcr.github import GitHubApp

                self._github = GitHubApp.from_settings(self.settings)
            return self._github

    def close(self) -> None:
        self.engine.dispose()
