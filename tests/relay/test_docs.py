"""The configuration page documents every setting (a user reads it to configure crcr)."""

from __future__ import annotations

from crcr.settings import Settings
from tests.conftest import ROOT


def test_every_setting_is_documented():
    page = (ROOT / "docs" / "configuration.md").read_text()
    missing = [f"CRCR_{name.upper()}" for name in Settings.model_fields if f"`CRCR_{name.upper()}`" not in page]
    assert missing == [], f"add these settings to docs/configuration.md: {missing}"
