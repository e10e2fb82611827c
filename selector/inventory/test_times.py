"""File-level inventory from PyTorch's published ``test-times.json`` (CI durations per file).

Entries are CI-side names (``nn/test_linear``); a few are absolute runner paths
(``/__w/pytorch/pytorch/test/profiler/test_cupti_monitor``), which name the same file and
are mapped back under ``test/``. A name that still is not a safe relative path is left
out with a reason instead of reaching the planner.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from crcr.contracts.inventory import Inventory, InventoryTest
from selector.errors import SelectorInputError
from selector.fingerprint import digest

# The CI checkout root on PyTorch's runners; times recorded from it carry an absolute path.
_RUNNER_PREFIX = re.compile(r"^/.*?/test/")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*")
# Id of the one file-level entry per file: a pattern over every test of the file, so the
# plan can hold it as an entry (``*`` alone is not a valid pattern).
FILE_LEVEL_ID = ".*"


def normalize_name(name: str) -> tuple[str | None, str | None]:
    """``(test/<name>.py, None)``, or ``(None, reason)`` for a name that names no file under ``test/``."""
    original = name
    if name.startswith("/"):
        stripped = _RUNNER_PREFIX.sub("", name, count=1)
        if stripped == name:
            return None, f"{original!r} is an absolute path outside any test/ folder"
        name = stripped
    name = name.removesuffix(".py")
    if not _SAFE_NAME.fullmatch(name) or any(part in (".", "..") for part in name.split("/")):
        return None, f"{original!r} is not a relative test file name"
    return f"test/{name}.py", None


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SelectorInputError(f"cannot read test times from {path}: {exc}",
                                 hint="pass PyTorch's test-times.json (see crcr/data/pytorch-stats/SOURCES.md)") from None
    if not isinstance(data, dict):
        raise SelectorInputError(f"{path} is not a JSON object of build configs",
                                 hint="pass PyTorch's test-times.json (see crcr/data/pytorch-stats/SOURCES.md)")
    return data


def _table(table: object, out: dict[str, float], problems: list[str], *, keep_first: bool) -> None:
    if not isinstance(table, dict):
        return
    for name, secs in table.items():
        if not isinstance(name, str) or isinstance(secs, bool) or not isinstance(secs, int | float) or secs < 0:
            problems.append(f"{name!r}: duration {secs!r} is not a number of seconds; left out")
            continue
        file, why = normalize_name(name)
        if file is None:
            problems.append(f"{why}; left out")
            continue
        if keep_first and file in out:
            continue
        out[file] = max(out.get(file, 0.0), float(secs))


def file_times_with_problems(path: Path, config: str = "default", job: str = "default",
                             *, all_configs: bool = False) -> tuple[dict[str, float], list[str]]:
    """``test/<file>.py`` -> seconds, and why any entry was left out.

    One build config and job by default; with ``all_configs`` every file any config
    times, taking ``config``/``job`` where it has the file and the longest other time
    elsewhere (so a budget is never cut on an optimistic figure).
    """
    data = _read(path)
    table = data.get(config, {}).get(job) if isinstance(data.get(config), dict) else None
    if not isinstance(table, dict):
        raise SelectorInputError(f"{path} has no {config!r}/{job!r} table", hint=f"configs: {', '.join(sorted(data)[:5])} ...")
    out: dict[str, float] = {}
    problems: list[str] = []
    _table(table, out, problems, keep_first=False)
    if all_configs:
        primary = set(out)
        others: dict[str, float] = {}
        for cfg in sorted(data):
            jobs = data[cfg]
            if not isinstance(jobs, dict):
                continue
            for j in sorted(jobs):
                if (cfg, j) != (config, job):
                    _table(jobs[j], others, [], keep_first=False)
        for file, secs in others.items():
            if file not in primary:
                out[file] = secs
    return dict(sorted(out.items())), sorted(set(problems))


def file_times(path: Path, config: str = "default", job: str = "default", *, all_configs: bool = False) -> dict[str, float]:
    """``test/<file>.py`` -> seconds (entries that name no file are left out; see ``file_times_with_problems``)."""
    return file_times_with_problems(path, config, job, all_configs=all_configs)[0]


def times_inventory_with_problems(path: Path, config: str = "default", job: str = "default",
                                  *, all_configs: bool = True) -> tuple[Inventory, list[str]]:
    """One file-level entry per timed file (id ``test/<file>.py::.*``), and the entries left out with why."""
    times, problems = file_times_with_problems(path, config, job, all_configs=all_configs)
    tests = [
        InventoryTest(id=f"{file}::{FILE_LEVEL_ID}", file=file, method=FILE_LEVEL_ID, duration_s=round(secs, 3),
                      fingerprint=digest(file))
        for file, secs in times.items()
    ]
    return Inventory(source="test-times", granularity="file", tests=tests), problems


def times_inventory(path: Path, config: str = "default", job: str = "default", *, all_configs: bool = True) -> Inventory:
    """Every file test-times.json times (all configs), one file-level entry each."""
    return times_inventory_with_problems(path, config, job, all_configs=all_configs)[0]
