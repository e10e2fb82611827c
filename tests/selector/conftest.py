"""Fixtures for the selector: the fixture upstream tree, its inventory, capabilities, a CLI runner."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from crcr.contracts.inventory import Inventory
from selector.agent.tools import Tools
from selector.capabilities import Capabilities, load_capabilities
from selector.disabled import DisabledTests
from selector.inventory.static_ast import scan_checkout

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "selector"
UPSTREAM = FIX / "upstream"


@pytest.fixture(scope="session")
def opdb() -> dict:
    return json.loads((FIX / "opdb.json").read_text())


@pytest.fixture
def inventory(opdb: dict) -> Inventory:
    inv, problems = scan_checkout(UPSTREAM, opdb, {})
    assert problems == []
    return inv


@pytest.fixture
def caps() -> Capabilities:
    return load_capabilities(FIX / "snpu-capabilities.yaml")


@pytest.fixture
def disabled() -> DisabledTests:
    return DisabledTests(FIX / "disabled-tests.json")


@pytest.fixture
def tools(caps: Capabilities, inventory: Inventory) -> Tools:
    return Tools(caps, inventory.by_id(), UPSTREAM)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run ``crcr ...`` in-process; returns (exit status, stdout, stderr)."""
    from crcr.cli.main import main
    from crcr.settings import get_settings

    monkeypatch.setenv("CRCR_DATA_DIR", str(tmp_path / "data"))
    # The fixture tree is inventoried against the fixture op table (a slice of the real one),
    # which spares each test building the installed torch's table in a child process.
    from importlib.metadata import version

    seeded = tmp_path / "data" / "selector" / f"opdb-{version('torch')}.json"
    seeded.parent.mkdir(parents=True)
    seeded.write_text((FIX / "opdb.json").read_text())
    monkeypatch.delenv("CRCR_DEBUG", raising=False)
    get_settings.cache_clear()

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    yield run
    get_settings.cache_clear()
