"""A backend's capability file, ``configs/backends/<name>.yaml``: what the device supports.

Read keys (others are kept for the agent's tool but not interpreted)::

    backend: snpu
    device_type: snpu                 # name in test ids (renamed PrivateUse1); or device:
    dtypes: {native_float: [float16, bfloat16, float32], integer_and_bool: [int64, bool, ...],
             refused: [float64, complex64, ...]}      # groups; or a plain list of supported dtypes
    aten_ops: {elementwise: [aten::add.Tensor, ...], ...}   # or a plain list
    opinfo: {covered: [add, softmax, ...],             # or a plain list of OpInfo names
             by_dtype: {float32: {pass: [...], fail: {op: error}}, ...}}
    features: {autograd: true, distributed: false, sparse: false, torch_compile: false, ...}
    limits: {devices: 1, ...}

This is the shape ``crcr snpu capabilities`` writes. Lists may also be mappings of
name -> bool or nested under ``supported:``; unknown shapes raise a ConfigError.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crcr.contracts.cputrace import CpuTrace
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
    indexing_dtypes: set[str] = field(default_factory=set)  # held for indexing and masks, no compute
    refused_dtypes: set[str] = field(default_factory=set)
    opinfo_by_dtype: dict[str, set[str]] = field(default_factory=dict)  # sweep: ops whose samples pass
    opinfo_failures: dict[str, dict[str, str]] = field(default_factory=dict)  # sweep: dtype -> op -> error
    # template probes run for this plan (``family|op|dtype`` -> None when it passed, else the error)
    template_probes: dict[str, str | None] = field(default_factory=dict)
    # ``file::template`` -> the OpInfo attributes the template reads (comma-joined), from its source
    template_reads: dict[str, str] = field(default_factory=dict)
    # probes wanted but not run (``family|op|dtype`` -> why, e.g. the probe budget was spent): the tests they
    # would have decided are planned by the later rules, and their reasons say so
    unprobed: dict[str, str] = field(default_factory=dict)
    # CPU traces of the plain device tests the agent decides (test id -> what its CPU twin did); None when no
    # trace was asked for (``--no-trace``, or a device that does not run here)
    cpu_traces: dict[str, CpuTrace] | None = None
    # every ``out=`` overload the backend runs, with the kernel that computes it (its own, or its functional
    # overload's: ``aten::pow.Scalar_out`` -> ``aten::pow.Scalar``); any other ``out=`` overload is refused. None:
    # the file does not say (older files), and an ``out=`` overload counts as supported where its op is listed
    out_routes: dict[str, str] | None = None
    # tests whose trace was wanted but not run (test id -> why, e.g. the trace budget was spent): their plan
    # reason says so, so a reviewer can tell a budget's gap from a test the trace could not decide
    untraced: dict[str, str] = field(default_factory=dict)

    def attach_probes(self, results: dict[str, str | None], reads: dict[str, str] | None = None,
                      unprobed: dict[str, str] | None = None) -> None:
        """Plan from these probe answers too, and say of each probe in ``unprobed`` why it has none; the digest
        (and so the plan cache's context) covers them (a later plan with more answers re-plans their tests)."""
        self.template_probes = dict(results)
        self.template_reads = dict(reads or {})
        self.unprobed = dict(unprobed or {})
        evidence: list[object] = [self.template_probes, self.template_reads]
        if self.unprobed:
            evidence.append(self.unprobed)
        probe_digest = hashlib.sha256(json.dumps(evidence, sort_keys=True).encode()).hexdigest()
        self.digest = hashlib.sha256(f"{self.digest}:{probe_digest}".encode()).hexdigest()[:16]

    def attach_cpu_traces(self, traces: dict[str, CpuTrace], untraced: dict[str, str] | None = None) -> None:
        """Plan plain device tests from these CPU traces (``runners.cpu_trace``), and say of each test in
        ``untraced`` why it has none; the digest covers both (a later plan with more traces re-plans them)."""
        self.cpu_traces = dict(traces)
        self.untraced = dict(untraced or {})
        evidence = {k: v.evidence() for k, v in self.cpu_traces.items()}
        if self.untraced:
            evidence = {"traces": evidence, "untraced": self.untraced}
        trace_digest = hashlib.sha256(json.dumps(evidence, sort_keys=True).encode()).hexdigest()
        self.digest = hashlib.sha256(f"{self.digest}:trace:{trace_digest}".encode()).hexdigest()[:16]

    @property
    def has_opinfo(self) -> bool:
        return bool(self.opinfo or self.opinfo_by_dtype)

    def supports_op(self, op: str, dtype: str | None = None) -> bool:
        """Whether ``op`` (OpInfo name, ``name.variant`` allowed) has a working kernel, for ``dtype`` if known.

        Uses the OpInfo facts when the file has them; otherwise whether the op's aten name is registered.
        """
        if dtype and dtype in self.opinfo_by_dtype:
            return op in self.opinfo_by_dtype[dtype]
        if self.has_opinfo:
            if op in self.opinfo:
                return True
            parts = op.split(".")
            return any(".".join(parts[:i]) in self.opinfo for i in range(1, len(parts)))
        names = self.aten_names()
        last = op.split(".")[-1]
        if last.startswith("__r") and last.endswith("__"):
            last = last[3:-2]  # __radd__ -> add
        return last in names or op.replace(".", "_") in names or op.split(".")[0] in names

    def sweep_failure(self, op: str, dtype: str | None) -> str | None:
        """The error the capability sweep recorded for ``op`` at ``dtype``, if it failed there."""
        if dtype is None:
            return None
        return self.opinfo_failures.get(dtype, {}).get(op)

    def aten_names(self) -> set[str]:
        """Bare aten op names (``aten::add.Tensor`` -> ``add``)."""
        return {a.split("::", 1)[-1].split(".", 1)[0] for a in self.aten_ops}

    def feature(self, name: str, default: bool = False) -> bool:
        for key in (name, *FEATURE_ALIASES.get(name, ())):
            if key in self.features:
                return bool(self.features[key])
        return default


# Our feature names -> names capability files use for them.
FEATURE_ALIASES: dict[str, tuple[str, ...]] = {"compile": ("torch_compile",), "distributed": ("multi_device",)}


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

    dtypes_raw = pick("dtypes", "supported_dtypes")
    indexing: set[str] = set()
    refused: set[str] = set()
    if isinstance(dtypes_raw, dict) and all(isinstance(v, list) for v in dtypes_raw.values()):
        # grouped, e.g. {native_float: [...], integer_and_bool: [...], refused: [...]}: every group
        # but the refused/unsupported one is held by the device
        dtypes, indexing, refused = set(), set(), set()
        for group, names in dtypes_raw.items():
            found = _as_set(names, f"dtypes.{group}", where)
            if "refus" in group or "unsupported" in group:
                refused |= found
            else:
                dtypes |= found
                if "index" in group or "int" in group or "bool" in group:
                    indexing |= found
    else:
        dtypes = _as_set(dtypes_raw, "dtypes", where)
    aten_raw = pick("aten_ops", "aten", "operators")
    if isinstance(aten_raw, dict) and all(isinstance(v, list) for v in aten_raw.values()):
        aten = {str(a) for v in aten_raw.values() for a in v}  # grouped by kernel family
    else:
        aten = _as_set(aten_raw, "aten_ops", where)
    opinfo_raw = pick("opinfo", "opinfo_names", "opinfos", "ops")
    by_dtype: dict[str, set[str]] = {}
    failures: dict[str, dict[str, str]] = {}
    if isinstance(opinfo_raw, dict) and ("covered" in opinfo_raw or "by_dtype" in opinfo_raw):
        opinfo = _as_set(opinfo_raw.get("covered"), "opinfo.covered", where)
        for dname, facts in (opinfo_raw.get("by_dtype") or {}).items():
            if isinstance(facts, dict):
                by_dtype[str(dname)] = _as_set(facts.get("pass"), f"opinfo.by_dtype.{dname}.pass", where)
                fails = facts.get("fail") or {}
                failures[str(dname)] = {str(k): str(v) for k, v in fails.items()} if isinstance(fails, dict) else {}
    else:
        opinfo = _as_set(opinfo_raw, "opinfo", where)
    features_raw = pick("features") or {}
    if isinstance(features_raw, list):
        features = {str(f): True for f in features_raw}
    elif isinstance(features_raw, dict):
        # a string value ("opt-in: ...") means "not on by default"
        features = {str(k): (v is True) if not isinstance(v, dict) else bool(v.get("supported", True))
                    for k, v in features_raw.items()}
    else:
        raise ConfigError(f"{where}: features must be a list or mapping")
    backend = str(data.get("backend") or data.get("name") or Path(where).stem)
    routes_raw = pick("out_routes")
    if routes_raw is not None and not (isinstance(routes_raw, dict)
                                       and all(isinstance(k, str) and isinstance(v, str) for k, v in routes_raw.items())):
        raise ConfigError(f"{where}: out_routes must map each routed out= overload to the kernel that computes it",
                          hint="e.g. out_routes: {aten::pow.Scalar_out: aten::pow.Scalar}; regenerate the file with "
                               "crcr snpu capabilities")
    limits = pick("limits") or {}
    if not isinstance(limits, dict):
        raise ConfigError(f"{where}: limits must be a mapping")
    limits = dict(limits)
    if "device_count" not in limits and "devices" in limits:
        limits["device_count"] = limits["devices"]
    return Capabilities(
        backend=backend,
        device=str(data.get("device") or data.get("device_type") or backend),
        dtypes=dtypes,
        opinfo=opinfo,
        aten_ops=aten,
        features=features,
        limits=limits,
        digest=hashlib.sha256(text.encode()).hexdigest()[:16],
        raw_text=text,
        indexing_dtypes=indexing,
        refused_dtypes=refused,
        opinfo_by_dtype=by_dtype,
        opinfo_failures=failures,
        out_routes=dict(routes_raw) if routes_raw is not None else None,
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
