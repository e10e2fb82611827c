"""The installed torch's OpInfo databases as plain data (names, dtypes, features).

``@ops(op_db)`` in an upstream test file is expanded against this table. Building it
imports ``torch.testing._internal`` (seconds), so it runs once per torch version in a
child process (the selector's own process never imports it: a later snpu registration
in the same process would find no device-generic classes) and is cached as JSON in the
data directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from crcr.fileio import atomic_write_text
from selector.errors import SelectorInputError

CACHE_VERSION = 1


def dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _dump() -> dict[str, Any]:  # runs in the child process
    import torch
    import torch.testing._internal.common_methods_invocations as cmi
    from torch.testing._internal.opinfo.core import OpInfo

    lists = {
        n: getattr(cmi, n)
        for n in dir(cmi)
        if isinstance(getattr(cmi, n), list) and getattr(cmi, n) and isinstance(getattr(cmi, n)[0], OpInfo)
    }
    ops: dict[str, dict[str, Any]] = {}
    members: dict[str, list[str]] = {}
    for list_name, entries in sorted(lists.items()):
        keys = []
        for op in entries:
            key = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
            keys.append(key)
            if key in ops:
                continue
            ops[key] = {
                "name": op.name,
                "variant": op.variant_test_name,
                "formatted_name": op.formatted_name,
                "aten_name": getattr(op, "aten_name", None),
                "dtypes": sorted(dtype_name(d) for d in op.supported_dtypes("cpu")),
                "supports_autograd": bool(op.supports_autograd),
                "supports_out": bool(op.supports_out),
                "supports_forward_ad": bool(getattr(op, "supports_forward_ad", False)),
                "class": type(op).__name__,
            }
        members[list_name] = keys
    return {"cache_version": CACHE_VERSION, "torch": torch.__version__, "ops": ops, "lists": members}


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError as exc:
        raise SelectorInputError("torch is not installed", hint="pip install 'crcr[torch]'") from exc


def load_opdb(data_dir: Path) -> dict[str, Any]:
    """The op table of the installed torch, from cache or built once in a child process."""
    torch_version = _installed_version()
    cache = data_dir / "selector" / f"opdb-{torch_version}.json"
    if cache.is_file():
        try:
            data = json.loads(cache.read_text(encoding="utf-8"))
            if data.get("cache_version") == CACHE_VERSION:
                return data
        except (OSError, json.JSONDecodeError):
            pass  # rebuilt below
    proc = subprocess.run(
        [sys.executable, "-c", "import json,sys; from selector.inventory.opdb import _dump; json.dump(_dump(), sys.stdout)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SelectorInputError(f"could not read the installed torch's op_db: {tail[0]}", hint="check the torch install")
    data = json.loads(proc.stdout)
    atomic_write_text(cache, json.dumps(data, sort_keys=True))
    return data
