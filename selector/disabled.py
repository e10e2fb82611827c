"""Tests upstream disables (``disabled-tests-condensed.json``), matched to inventory ids.

Upstream keys look like ``"test_x_cuda (__main__.TestFooCUDA)": [issue, url, platforms]``.
A backend's instantiation differs (``TestFooPRIVATEUSE1`` or ``TestFooSNPU``, ``test_x_snpu``), so keys are
matched on a device-neutral form: the class without its device suffix and the method
with the device token replaced. Only entries that apply on Linux (no platform list, or
one naming ``linux``) and not to another accelerator's own variant count.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from crcr.contracts.inventory import generic_class
from crcr.errors import ConfigError

_KEY = re.compile(r"^(?P<method>\S+) \((?:__main__\.)?(?P<cls>[\w.]+)\)$")
_OTHER_ACCELERATORS = ("cuda", "mps", "xpu", "hpu", "lazy", "meta")
_LINUX_OK = {"linux"}


@dataclass(frozen=True)
class DisabledEntry:
    issue: str
    url: str
    platforms: tuple[str, ...]
    upstream_key: str


def _neutral_class(cls: str, device: str) -> str:
    return generic_class(cls, device) or cls


def _neutral_method(method: str, device: str) -> str:
    return re.sub(rf"_{re.escape(device)}(?=_|$)", "_DEVICE", method, count=1)


class DisabledTests:
    """Index of upstream-disabled tests that apply to a Linux backend."""

    def __init__(self, path: Path, device: str = "snpu") -> None:
        self.path = path
        self.device = device
        self._index: dict[tuple[str, str], DisabledEntry] = {}
        hint = "pass pytorch's disabled-tests JSON (an object of 'test (Class)' -> [issue, url, platforms])"
        if not path.is_file():
            raise ConfigError(f"disabled-tests file {path} does not exist", hint=hint)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})", hint=hint) from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}", hint=hint)
        for key, value in sorted(data.items()):
            m = _KEY.match(key)
            if not m or not isinstance(value, list) or len(value) < 3:
                continue
            platforms = tuple(str(p) for p in value[2])
            if platforms and not (_LINUX_OK & set(platforms)):
                continue
            method, cls = m.group("method"), m.group("cls").rsplit(".", 1)[-1]
            if any(re.search(rf"_{acc}(?=_|$)", method) for acc in _OTHER_ACCELERATORS):
                continue  # another accelerator's variant says nothing about this one
            neutral = _neutral_method(method, "cpu")
            entry = DisabledEntry(str(value[0]), str(value[1]), platforms, key)
            self._index[(_neutral_class(cls, self.device), neutral)] = entry
            self._index.setdefault((_neutral_class(cls, self.device), method), entry)

    def lookup(self, cls: str | None, method: str) -> DisabledEntry | None:
        if cls is None:
            return None
        ncls = _neutral_class(cls, self.device)
        return self._index.get((ncls, _neutral_method(method, self.device))) or self._index.get((ncls, method))

    def __len__(self) -> int:
        return len({e.upstream_key for e in self._index.values()})
