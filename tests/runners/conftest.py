"""Fixtures of the runners' tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def small_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instantiate the embedded suite over a few ops only (same ids, faster collection)."""
    monkeypatch.setenv("CRCR_SUITE_OPS", "add,mul,nn.functional.relu")
    monkeypatch.setenv("CRCR_SUITE_MAX_SAMPLES", "2")
    monkeypatch.delenv("CI", raising=False)
