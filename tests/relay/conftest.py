"""Fixtures for the relay core tests: a started fake GitHub and a relay factory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.github import FakeGitHub


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as gh:
        yield gh


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """Each storage test runs on SQLite (in tmp_path) and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'crcr.db'}"
    return request.getfixturevalue("postgres_url")
