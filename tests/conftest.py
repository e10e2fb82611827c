"""Shared fixtures: service URLs (PostgreSQL, Redis) with CI's no-silent-skip rule."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
WEBHOOKS = FIXTURES / "webhooks"

# Test data trees that must never be collected by crcr's own run. importgraph/ holds a tiny
# `torch` package: loading anything from it would put it on sys.path and shadow the real torch.
collect_ignore = ["fixtures/importgraph"]

POSTGRES_URL = os.environ.get("CRCR_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("CRCR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url.replace("+psycopg", ""))
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=1):
            return True
    except OSError:
        return False


def require_service(name: str, url: str, port: int) -> None:
    """Skip when a service is unreachable on a developer machine; fail under CI."""
    if _reachable(url, port):
        return
    message = f"{name} is not reachable at {url}"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must start it (.ci/services.sh)", pytrace=False)
    pytest.skip(f"{message} (set CI=1 to make this a failure)")


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL schema-isolated database URL (a new database per test)."""
    require_service("PostgreSQL", POSTGRES_URL, 5432)
    import sqlalchemy as sa

    admin = sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    name = f"crcr_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    base = POSTGRES_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis URL with a key prefix unique to this test (returned as ?prefix=...)."""
    require_service("Redis", REDIS_URL, 6379)
    yield REDIS_URL
