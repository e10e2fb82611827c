"""File-level inventory from PyTorch's published ``test-times.json`` (CI durations per file)."""

from __future__ import annotations

import json
from pathlib import Path

from crcr.contracts.inventory import Inventory, InventoryTest
from selector.errors import SelectorInputError
from selector.fingerprint import digest


def file_times(path: Path, config: str = "default", job: str = "default") -> dict[str, float]:
    """``test/<file>.py`` -> seconds, from one build config and job of test-times.json."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SelectorInputError(f"cannot read test times from {path}: {exc}") from None
    table = data.get(config, {}).get(job)
    if not isinstance(table, dict):
        raise SelectorInputError(f"{path} has no {config!r}/{job!r} table", hint=f"configs: {', '.join(sorted(data)[:5])} ...")
    return {f"test/{name}.py": float(secs) for name, secs in table.items() if isinstance(secs, int | float)}


def times_inventory(path: Path, config: str = "default", job: str = "default") -> Inventory:
    tests = [
        InventoryTest(id=f"{file}::*", file=file, method="*", duration_s=round(secs, 3), fingerprint=digest(file))
        for file, secs in sorted(file_times(path, config, job).items())
    ]
    return Inventory(source="test-times", granularity="file", tests=tests)
