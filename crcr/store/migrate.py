"""Alembic migrations driven from code (``crcr db upgrade``, and ``crcr serve`` on start).

The migration scripts live in ``crcr/store/migrations``; the metadata they are checked
against is every table module of ``crcr.store`` (loaded by ``load_all_models``).
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData
from sqlalchemy.engine import Engine

import crcr.store
from crcr.errors import ExternalError
from crcr.store.base import Base

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_NOT_MODELS = {"base", "migrate", "session", "migrations", "prune"}


def load_all_models() -> MetaData:
    """Import every table module of ``crcr.store`` so ``Base.metadata`` is complete."""
    for info in pkgutil.iter_modules(crcr.store.__path__):
        if info.name not in _NOT_MODELS and not info.name.startswith("_"):
            importlib.import_module(f"crcr.store.{info.name}")
    return Base.metadata


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database to ``revision``; storage failures become an ``ExternalError``."""
    load_all_models()
    cfg = alembic_config(engine)
    try:
        command.upgrade(cfg, revision)
    except Exception as exc:
        if isinstance(exc, ExternalError):
            raise
        # several processes starting at once (replicas of `crcr worker`) race to migrate;
        # the loser waits for the winner to reach head (SQLite DDL is not transactional,
        # so the winner may still be creating tables), which is what it wanted anyway
        if revision == "head" and _wait_for_head(engine, cfg):
            return
        raise ExternalError(
            f"database migration failed on {engine.url.render_as_string(hide_password=True)}: {exc}",
            hint="check CRCR_DATABASE_URL and that the database is reachable",
            reference="db-migration-failed",
        ) from exc


def _wait_for_head(engine: Engine, cfg: Config, timeout_s: float = 30.0) -> bool:
    head = ScriptDirectory.from_config(cfg).get_current_head()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if current_revision(engine) == head:
                return True
        except Exception:  # noqa: S110 - the table may not exist yet; keep waiting
            pass
        time.sleep(0.2)
    return False


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
