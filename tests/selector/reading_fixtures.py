"""Shared by the offline agent's reading tests: an inventory record for a test in a fixture file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crcr.contracts.inventory import InventoryTest


def device_test(file: str, cls: str, method: str, dtype: str | None, device: str = "snpu") -> InventoryTest:
    """The record pytest's collection gives ``cls.method`` of ``file`` instantiated for ``device`` (and ``dtype``)."""
    name = f"{method}_{device}" + (f"_{dtype}" if dtype else "")
    return InventoryTest(
        id=f"{file}::{cls}::{name}",
        file=file,
        cls=cls,
        method=name,
        template=method,
        device=device,
        dtype=dtype,
        fingerprint="f" + name,
    )


def traced_plan(root: Path, tests: list[InventoryTest], kind: str) -> dict[str, Any]:
    """Each test's decision (by id) when its file in the checkout ``root`` is traced with ``kind`` ("cpu",
    "shadow"; traces cached under ``root / data-<kind>``) and planned against snpu's capability file."""
    from types import SimpleNamespace

    from crcr.cli.select import _attach_cpu_traces
    from selector.agent.offline import OfflineAgent
    from selector.agent.tools import Tools
    from selector.capabilities import load_capabilities
    from selector.plan import classify_tests
    from selector.rules import RuleContext

    caps = load_capabilities(Path(__file__).resolve().parents[2] / "configs" / "backends" / "snpu.yaml")
    tools = Tools(caps, {t.id: t for t in tests}, root)
    _attach_cpu_traces(SimpleNamespace(tests=tests), caps, None, tools, root / f"data-{kind}", root, kind=kind)
    return classify_tests(tests, RuleContext(caps, dtype_reaches=tools.dtype_reaches), OfflineAgent(), tools)


def write_checkout(root: Path, files: dict[str, str]) -> Path:
    """A checkout at ``root`` holding ``files`` (path under the checkout -> text)."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root
