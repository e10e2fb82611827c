"""The demo keeps the snpu inventory and the selector's caches for the next demo, keyed by
the installed torch and this crcr's code, and reuses them only under the same key."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from crcr.cli import demo


def _torch(version: str, git: str = "cf30153c") -> SimpleNamespace:
    return SimpleNamespace(__version__=version, version=SimpleNamespace(git_version=git))


def test_the_key_changes_with_torch_and_with_the_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    a = demo._cache_dir(_torch("2.13.0+cpu"))
    assert a.parent == tmp_path / "crcr" / "demo"
    assert demo._cache_dir(_torch("2.13.0+cpu")) == a
    assert demo._cache_dir(_torch("2.13.1+cpu")) != a
    assert demo._cache_dir(_torch("2.13.0+cpu", git="0badc0de")) != a
    monkeypatch.setattr(demo, "_code_digest", lambda: "edited")
    assert demo._cache_dir(_torch("2.13.0+cpu")) != a


class _Fake:
    """subprocess.run / Popen stand-ins that write what the real commands write."""

    def __init__(self, data: Path) -> None:
        self.data, self.calls = data, []

    def run(self, argv, **kw):
        self.calls.append("inventory")
        Path(argv[argv.index("--out") + 1]).write_text('{"tests": []}')
        return subprocess.CompletedProcess(argv, 0)

    def popen(self, argv, **kw):
        self.calls.append("warm")
        (self.data / "selector").mkdir(parents=True, exist_ok=True)
        (self.data / "selector" / "opdb-x.json").write_text("{}")
        return SimpleNamespace(wait=lambda: 0, returncode=0)


def test_built_once_then_copied_from_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "key"
    first, second = tmp_path / "d1", tmp_path / "d2"
    for d in (first, second):
        (d / "downstream").mkdir(parents=True)
    fake = _Fake(first)
    monkeypatch.setattr(demo.subprocess, "run", fake.run)
    monkeypatch.setattr(demo.subprocess, "Popen", fake.popen)
    assert demo._inventory_and_caches(first, first / "downstream" / "inventory-snpu.json", {}, cache) is False
    assert sorted(fake.calls) == ["inventory", "warm"]  # both built, side by side
    assert (cache / "inventory-snpu.json").is_file() and (cache / "selector" / "opdb-x.json").is_file()
    fake.calls.clear()
    assert demo._inventory_and_caches(second, second / "downstream" / "inventory-snpu.json", {}, cache) is True
    assert fake.calls == []  # nothing collected again
    assert (second / "downstream" / "inventory-snpu.json").read_text() == '{"tests": []}'
    assert (second / "selector" / "opdb-x.json").is_file()
    # --fresh (no cache): collected again
    third = tmp_path / "d3"
    (third / "downstream").mkdir(parents=True)
    fake.data = third
    assert demo._inventory_and_caches(third, third / "downstream" / "inventory-snpu.json", {}, None) is False
    assert sorted(fake.calls) == ["inventory", "warm"]


def test_an_unwritable_cache_only_means_collecting_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = tmp_path / "d"
    (data / "downstream").mkdir(parents=True)
    blocker = tmp_path / "ro"
    blocker.write_text("a file where the cache folder's parent should be")
    fake = _Fake(data)
    monkeypatch.setattr(demo.subprocess, "run", fake.run)
    monkeypatch.setattr(demo.subprocess, "Popen", fake.popen)
    assert demo._inventory_and_caches(data, data / "downstream" / "inventory-snpu.json", {}, blocker / "key") is False
    assert (data / "downstream" / "inventory-snpu.json").is_file()  # the demo goes on
