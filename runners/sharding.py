"""Time-balanced shards: longest first onto the least loaded shard.

Durations come from previous results (per test id), else PyTorch's published
test-times at file level (``crcr.data.TEST_TIMES``: a file's mean seconds shared
evenly among the file's collected tests), else counts (every test weighs 1). The
assignment depends only on the ids and their weights, sorted with the id as the tie
breaker, so every machine computes the same shards: disjoint, and together complete.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from crcr.data import TEST_TIMES
from crcr.errors import InputError


def parse_shard(spec: str) -> tuple[int, int]:
    """``"2/8"`` -> ``(2, 8)``; the index counts from 1."""
    parts = spec.split("/")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise InputError(f"shard {spec!r} is not I/N", hint="e.g. --shard 2/8 runs the second of eight shards")
    index, count = int(parts[0]), int(parts[1])
    if count < 1 or not 1 <= index <= count:
        raise InputError(
            f"shard {spec!r}: the index must be between 1 and the number of shards ({count})",
            hint="shards count from 1: --shard 1/N ... --shard N/N",
        )
    return index, count


def upstream_file_key(test_file: str) -> str:
    """``test/nn/test_conv.py`` -> ``nn/test_conv`` (test-times.json's keys)."""
    key = test_file[len("test/"):] if test_file.startswith("test/") else test_file
    return key[:-3] if key.endswith(".py") else key


def load_file_times(path: Path = TEST_TIMES) -> dict[str, float]:
    """Seconds per upstream file: the ``default``/``default`` job first, other configs fill gaps."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read test times from {path}: {exc}",
                         hint="pass results files written by crcr run --results") from exc
    times: dict[str, float] = {}
    envs = sorted(data, key=lambda e: (e != "default", e))
    for env in envs:
        configs = data[env] if isinstance(data[env], dict) else {}
        for config in sorted(configs, key=lambda c: (c != "default", c)):
            files = configs[config] if isinstance(configs[config], dict) else {}
            for name, seconds in files.items():
                if isinstance(seconds, int | float) and name not in times:
                    times[name] = float(seconds)
    return times


def load_test_durations(paths: Iterable[Path | str]) -> dict[str, float]:
    """Per-id durations from previous results files (the latest file given wins)."""
    from crcr.contracts.results import load_results

    durations: dict[str, float] = {}
    for path in paths:
        for test in load_results(path).tests:
            if test.outcome != "skipped":
                durations[test.id] = test.duration_s
    return durations


def weights(
    ids: Sequence[str],
    durations: Mapping[str, float] | None = None,
    file_times: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """A weight per id from the best source that knows it."""
    durations = durations or {}
    file_times = file_times or {}
    per_file = Counter(i.split("::", 1)[0] for i in ids)
    known = [durations[i] for i in ids if i in durations]
    fallback = (sum(known) / len(known)) if known else 1.0
    out: dict[str, float] = {}
    for test_id in ids:
        if test_id in durations:
            out[test_id] = max(durations[test_id], 0.0)
            continue
        file = test_id.split("::", 1)[0]
        seconds = file_times.get(upstream_file_key(file))
        out[test_id] = seconds / per_file[file] if seconds is not None and not durations else fallback
    return out


def assign(weighted: Mapping[str, float], count: int) -> list[list[str]]:
    """Split ids into ``count`` shards, longest first onto the least loaded shard."""
    if count < 1:
        raise InputError("the number of shards must be at least 1")
    shards: list[list[str]] = [[] for _ in range(count)]
    heap = [(0.0, index) for index in range(count)]
    for test_id in sorted(weighted, key=lambda i: (-weighted[i], i)):
        load, index = heapq.heappop(heap)
        shards[index].append(test_id)
        heapq.heappush(heap, (load + weighted[test_id], index))
    return shards


def shard_of(ids: Sequence[str], index: int, count: int, weighted: Mapping[str, float]) -> list[str]:
    """The ids of shard ``index`` (from 1) in their original order."""
    mine = set(assign(weighted, count)[index - 1])
    return [i for i in ids if i in mine]


def balance(weighted: Mapping[str, float], count: int) -> float:
    """Largest shard over the ideal (total / count); 1.0 is perfect."""
    shards = assign(weighted, count)
    total = sum(weighted.values())
    if total <= 0:
        return 1.0
    return max(sum(weighted[i] for i in s) for s in shards) / (total / count)


def matrix(count: int) -> dict[str, list[dict[str, object]]]:
    """The GitHub Actions matrix for ``count`` shards: use ``fromJSON`` on it."""
    if count < 1:
        raise InputError(f"--matrix {count}: the number of shards must be at least 1", hint="e.g. --matrix 8")
    return {"include": [{"shard": f"{i}/{count}", "index": i, "total": count} for i in range(1, count + 1)]}
