"""A backend's capability file, ``configs/backends/<name>.yaml``: what the device supports.

Read keys (others are kept for the agent's tool but not interpreted)::

    backend: snpu
    device: snpu                      # name in test ids (renamed PrivateUse1)
    dtypes: [float16, bfloat16, float32, int64, bool, ...]
    opinfo: [add, softmax, nn.functional.relu, ...]   # OpInfo names with a kernel
    aten_ops: [aten::add.Tensor, ...]                 # registered aten operators
    features: {autograd: true, distributed: false, sparse: false, ...}
    limits: {device_count: 1, memory_bytes: 17179869184}

Lists may also be given as mappings (``dtypes: {float32: true, float64: false}``) or
nested under ``supported:``; unknown shapes raise a ConfigError naming the key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crcr.errors import ConfigError

MAX_CAPABILITY_BYTES = 16 * 1024 * 1024


@dataclass
class Capabilities:
    backend: str
    device: str
    dtypes: set[str]
    opinfo: set[str]
    aten_ops: set[str]
    features: dict[str, bool]
    limits: dict[str, Any]
    digest: str
    path: Path | None = None
    raw_text: str = ""
    notes: dict[str, Any] = field(default_factory=dict)

    def supports_op(self, op: str) -> bool:
        """OpInfo name, with or without variant (``nn.functional.relu``, ``max.reduction_with_dim``)."""
        if op in self.opinfo:
            return True
        parts = op.split(".")
        return any(".".join(parts[:i]) in self.opinfo for i in range(1, len(parts)))

    def aten_names(self) -> set[str]:
        """Bare aten op names (``aten::add.Tensor`` -> ``add``)."""
        return {a.split("::", 1)[-1].split(".", 1)[0] for a in self.aten_ops}

    def feature(self, name: str, default: bool = False) -> bool:
        return bool(self.features.get(name, default))


def _as_set(value: Any, key: str, where: str) -> set[str]:
    if value is None:
        return set()
    if isinstance(value, list | tuple):
        out = set()
        for v in value:
            if isinstance(v, str):
                out.add(v)
            elif isinstance(v, dict) and isinstance(v.get("name"), str):
                out.add(v["name"])
            else:
                raise ConfigError(f"{where}: {key} holds {v!r}; expected names", hint="list names as strings")
        return out
    if isinstance(value, dict):
        return {str(k) for k, v in value.items() if v not in (False, None, "no", "unsupported")}
    raise ConfigError(f"{where}: {key} must be a list or a mapping, not {type(value).__name__}")


def parse_capabilities(text: str, where: str) -> Capabilities:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({exc})", hint="regenerate it with: crcr snpu capabilities") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping", hint="see docs/selector.md for the capability file")
    sup = data.get("supported") if isinstance(data.get("supported"), dict) else {}
    def pick(*keys: str) -> Any:
        for k in keys:
            if k in data:
                return data[k]
            if k in sup:
                return sup[k]
        return None

    features_raw = pick("features") or {}
    if isinstance(features_raw, list):
        features = {str(f): True for f in features_raw}
    elif isinstance(features_raw, dict):
        features = {str(k): bool(v) if not isinstance(v, dict) else bool(v.get("supported", True))
                    for k, v in features_raw.items()}
    else:
        raise ConfigError(f"{where}: features must be a list or mapping")
    backend = str(data.get("backend") or data.get("name") or Path(where).stem)
    limits = pick("limits") or {}
    if not isinstance(limits, dict):
        raise ConfigError(f"{where}: limits must be a mapping")
    return Capabilities(
        backend=backend,
        device=str(data.get("device") or backend),
        dtypes=_as_set(pick("dtypes", "supported_dtypes"), "dtypes", where),
        opinfo=_as_set(pick("opinfo", "opinfo_names", "opinfos", "ops"), "opinfo", where),
        aten_ops=_as_set(pick("aten_ops", "aten", "operators"), "aten_ops", where),
        features=features,
        limits=limits,
        digest=hashlib.sha256(text.encode()).hexdigest()[:16],
        raw_text=text,
    )


def capability_path(backend: str, configs: Path = Path("configs")) -> Path:
    if not backend.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"backend name {backend!r} is not a plain name", hint="use letters, digits, - and _")
    return configs / "backends" / f"{backend}.yaml"


def load_capabilities(path: Path) -> Capabilities:
    if not path.is_file():
        raise ConfigError(
            f"capability file {path} does not exist",
            hint="generate it (crcr snpu capabilities) or pass --capabilities FILE",
        )
    if path.stat().st_size > MAX_CAPABILITY_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CAPABILITY_BYTES} bytes")
    caps = parse_capabilities(path.read_text(encoding="utf-8"), str(path))
    caps.path = path
    return caps
