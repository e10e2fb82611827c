"""Inventories from pytest's own collection, through the ``crcr`` CLI.

The selector never imports the runners (an import contract forbids it): it runs
``crcr run --collect-only --inventory FILE`` in a child process and reads the file,
which follows ``crcr.contracts.inventory``. That works for the embedded op suite and
for a PyTorch checkout (``--pytorch-src``): ids are exactly what pytest collects for the
device on the installed torch. Files that cannot be imported come back as the
inventory's ``errors`` (the child exits 1 for them; the inventory is still written).
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
    return collect(device, files, keyword, None, timeout_s)


def collect(device: str, files: list[str] | None = None, keyword: str | None = None,
            pytorch_src: Path | None = None, timeout_s: float = 1800.0) -> Inventory:
    """Collect the embedded suite, or a checkout's ``test/`` tree, for ``device``."""
    what = f"{pytorch_src}/test" if pytorch_src is not None else "the embedded suite"
    with tempfile.TemporaryDirectory(prefix="crcr-inventory-") as tmp:
        out = Path(tmp) / "inventory.json"
        cmd = [sys.executable, "-m", "crcr.cli.main", "run", "--collect-only", "--device", device, "--inventory", str(out)]
        if pytorch_src is not None:
            cmd += ["--pytorch-src", str(pytorch_src)]
        for f in files or []:
            cmd += ["--file", f]
        if keyword:
            cmd += ["-k", keyword]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise SelectorInputError(f"collecting {what} took over {timeout_s:.0f}s",
                                     hint="narrow it with --file or -k") from None
        if out.is_file():
            inventory = load_inventory(out)
            if proc.returncode == 0 or inventory.errors:
                return inventory  # import failures are records; the caller reports them and exits non-zero
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise SelectorInputError(
            f"crcr run --collect-only failed for {what} (exit {proc.returncode}): {' | '.join(tail) or 'no output'}",
            hint="run it by hand to see the whole error",
        )
