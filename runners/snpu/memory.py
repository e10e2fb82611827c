"""Device memory accounting: the bytes held by storages that live snpu tensors use.

A storage counts once however many tensors (views) share it, from the first snpu
tensor that wraps it until the last one is freed, as ``torch.cuda.memory_allocated``
counts live allocations. Cumulative figures (allocations made by factories) are kept
beside it.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

_lock = threading.Lock()
_storages: dict[int, list[int]] = {}  # storage data_ptr -> [live wrappers, nbytes]
_stats = {"allocations": 0, "allocated_bytes": 0, "active_bytes": 0, "peak_active_bytes": 0}


def track(wrapper: Any, data: Any) -> None:
    """Count ``data``'s storage as device memory while ``wrapper`` lives."""
    storage = data.untyped_storage()
    key, nbytes = storage.data_ptr(), storage.nbytes()
    if key == 0 or nbytes == 0:
        return
    with _lock:
        entry = _storages.get(key)
        if entry is None:
            _storages[key] = [1, nbytes]
            _stats["active_bytes"] += nbytes
            _stats["peak_active_bytes"] = max(_stats["peak_active_bytes"], _stats["active_bytes"])
        else:
            entry[0] += 1
    weakref.finalize(wrapper, _release, key)


def _release(key: int) -> None:
    with _lock:
        entry = _storages.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            del _storages[key]
            _stats["active_bytes"] -= entry[1]


def count_allocation(nbytes: int) -> None:
    with _lock:
        _stats["allocations"] += 1
        _stats["allocated_bytes"] += nbytes


def stats() -> dict[str, int]:
    with _lock:
        return dict(_stats)


def reset_peak() -> None:
    with _lock:
        _stats["peak_active_bytes"] = _stats["active_bytes"]
