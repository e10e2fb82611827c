"""Declarative base and engine factory (SQLite with WAL by default, PostgreSQL by URL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.orm import DeclarativeBase, sessionmaker

from crcr.errors import ConfigError

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


_URL_HINT = "set CRCR_DATABASE_URL to postgresql://user@host/db or leave it unset for SQLite in CRCR_DATA_DIR"


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and its directory created.

    A URL that does not parse, names an unknown database or lacks its driver, or a SQLite
    directory that cannot be created, raises ``ConfigError`` (the URL is never echoed:
    it may carry a password).
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError("CRCR_DATABASE_URL is not a database URL", hint=_URL_HINT) from exc
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database
        if path and path != ":memory:":
            directory = Path(path).parent
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                why = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
                raise ConfigError(f"cannot create the database directory {directory}: {why}",
                                  hint="set CRCR_DATA_DIR to a directory crcr can write") from exc
        kwargs.setdefault("connect_args", {"check_same_thread": False, "timeout": 30})
        engine = _create(url, parsed, kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    kwargs.setdefault("pool_pre_ping", True)
    return _create(url, parsed, kwargs)


def _create(url: str, parsed: URL, kwargs: dict[str, Any]) -> Engine:
    try:
        return create_engine(url, **kwargs)
    except NoSuchModuleError as exc:
        raise ConfigError(f"CRCR_DATABASE_URL names an unknown database {parsed.drivername!r}",
                          hint=_URL_HINT) from exc
    except ImportError as exc:
        hint = "pip install 'crcr[postgres]'" if parsed.get_backend_name() == "postgresql" else _URL_HINT
        raise ConfigError(f"the driver for CRCR_DATABASE_URL ({parsed.drivername}) is not installed: {exc.name}",
                          hint=hint) from exc


def make_sessionmaker(engine: Engine) -> sessionmaker:
    return sessionmaker(bind=engine, expire_on_commit=False)
