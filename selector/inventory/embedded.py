"""The embedded op suite's inventory, from the runners through the ``crcr`` CLI.

The selector never imports the runners (an import contract forbids it): it runs
``crcr run --collect-only --inventory FILE`` in a child process and reads the file,
which follows ``crcr.contracts.inventory``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from crcr.contracts.inventory import Inventory, load_inventory
from selector.errors import SelectorInputError


def collect_embedded(device: str = "snpu", files: list[str] | None = None, keyword: str | None = None,
                     timeout_s: float = 1800.0) -> Inventory:
    """Collect the embedded suite for ``device`` (optionally one upstream file or a -k slice)."""
    with tempfile.TemporaryDirectory(prefix="crcr-inventory-") as tmp:
        out = Path(tmp) / "inventory.json"
        cmd = [sys.executable, "-m", "crcr.cli.main", "run", "--collect-only", "--device", device, "--inventory", str(out)]
        for f in files or []:
            cmd += ["--file", f]
        if keyword:
            cmd += ["-k", keyword]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise SelectorInputError(f"collecting the embedded suite took over {timeout_s:.0f}s",
                                     hint="narrow it with --file or -k") from None
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise SelectorInputError(
                f"crcr run --collect-only failed (exit {proc.returncode}): {' | '.join(tail) or 'no output'}",
                hint="run it by hand to see the whole error",
            )
        return load_inventory(out)
