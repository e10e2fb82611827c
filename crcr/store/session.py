"""One place that turns settings into an engine and a session factory."""

from __future__ import annotations

from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker

from crcr.store.base import make_engine, make_sessionmaker


def engine_for(url: str) -> Engine:
    """The engine for ``url`` (SQLite gets WAL and a busy timeout; see ``make_engine``)."""
    return make_engine(url)


def sessions_for(engine: Engine) -> sessionmaker:
    return make_sessionmaker(engine)
