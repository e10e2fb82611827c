"""The capability document (configs/backends/snpu.yaml), generated from what is registered.

Facts only: the aten ops with an snpu kernel (by category), the OpInfo entries whose
samples pass on snpu per dtype (from an OpInfo sweep, cached by a key over torch's
version and snpu's source), the dtypes, the features and the machine's limits. The same
inputs give the same YAML byte for byte (sorted, no timestamps).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

SCHEMA_VERSION = 1
SNPU_DIR = Path(__file__).resolve().parent

NATIVE = ("bfloat16", "float16", "float32")
INDEXING = ("bool", "int16", "int32", "int64", "int8", "uint8")
REFUSED = ("complex128", "complex32", "complex64", "float64")

FEATURES = {
    "autograd": True,
    "out_variants": True,
    "views_share_memory": True,
    "cpu_fallback": "opt-in: CRCR_SNPU_FALLBACK=cpu",
    "sparse": False,
    "quantized": False,
    "distributed": False,
    "torch_compile": False,
    # TorchScript: scripting compiles on the host and its interpreter dispatches aten ops to snpu as eager
    # does; torch.jit.trace checks its trace by comparing the outputs as float64 copies on the device
    # (SnpuDtypeError), so tracing does not work with its default check
    "jit_script": True,
    "jit_trace": False,
    "multi_device": False,
    "streams": False,
    "pin_memory": False,
    # a storage allocated on the device itself (UntypedStorage(n, device="snpu"), a device storage's
    # clone()) raises SnpuStorageError: a Python backend has no PrivateUse1 allocator (runners/snpu/device.py)
    "device_storage_allocation": False,
    "device_generator": False,
    "accelerator_synchronize": False,
    "snpu_synchronize": True,
    # prims::* ops (what torch._refs calls) dispatch to snpu's kernels (runners/snpu/dispatch.py)
    "prims": True,
}


def source_key() -> str:
    """Hash of torch's version and every snpu source file: the sweep cache key."""
    h = hashlib.sha256(torch.__version__.encode())
    for path in sorted(SNPU_DIR.rglob("*.py")):
        h.update(path.relative_to(SNPU_DIR).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def registered_ops() -> dict[str, list[str]]:
    """aten ops with an snpu kernel, by category (sorted)."""
    from runners.snpu import install
    from runners.snpu.dispatch import KERNELS

    install()
    out: dict[str, set[str]] = {}
    for name, kernel in KERNELS.items():
        out.setdefault(kernel.category, set()).add(name)
    out.setdefault("attention", set()).add("aten::scaled_dot_product_attention")
    return {k: sorted(v) for k, v in sorted(out.items())}


def routed_out_overloads() -> dict[str, str]:
    """Every ``out=`` overload snpu runs, with the kernel that computes it (:func:`runners.snpu.dispatch.out_routes`);
    any other ``out=`` overload is refused, even where the op has a kernel."""
    from runners.snpu import install
    from runners.snpu.dispatch import KERNELS, out_routes

    install()
    return out_routes(set(KERNELS))


def executions() -> dict[str, list[str]]:
    """aten ops by how they run: ``tiled`` (a tile plan, checked by the tiling proof),
    ``whole`` (one whole-tensor operation on device memory) or ``view`` (no data moves)."""
    from runners.snpu import install
    from runners.snpu.dispatch import EXECUTIONS, KERNELS

    install()
    out: dict[str, list[str]] = {e: [] for e in EXECUTIONS}
    for name, kernel in sorted(KERNELS.items()):
        out[kernel.execution].append(name)
    # registered on the autograd key (runners.snpu.kernels.attention), tiled by plan_attention
    out["tiled"] = sorted([*out["tiled"], "aten::scaled_dot_product_attention"])
    return out


def limits() -> dict[str, Any]:
    from runners.snpu import machine
    from runners.snpu.machine import _itemsize

    m = machine.current()
    # whole rows per tile: input, fp32 work copy and output sticks
    row_max = {}
    for name in ("float32", "float16", "bfloat16"):
        dtype = getattr(torch, name)
        work = max(1, 4 // _itemsize(dtype))
        per_stick = (2 + work) * m.stick_bytes
        row_max[name] = (m.usable_scratchpad_bytes // per_stick) * m.stick_elems(dtype)
    return {
        "devices": 1,
        "cores": m.cores,
        "scratchpad_bytes_per_core": m.scratchpad_bytes,
        "usable_scratchpad_bytes_per_core": m.usable_scratchpad_bytes,
        "stick_bytes": m.stick_bytes,
        "clock_hz": m.clock_hz,
        "peak_macs_per_cycle": {
            "float16": m.peak_macs_per_cycle(torch.float16),
            "float32": m.peak_macs_per_cycle(torch.float32),
        },
        "memory_bandwidth_bytes_per_s": m.memory_bandwidth_bytes_per_s,
        "max_softmax_norm_row_elements": row_max,
        "row_limits": row_limits(),
    }


def row_limits() -> dict[str, dict[str, int]]:
    """For each kernel that holds a whole row in one tile, the longest row it accepts per
    native float dtype (elements); a longer row raises ``SnpuPlanError``."""
    from runners.snpu import install, machine
    from runners.snpu.dispatch import KERNELS
    from runners.snpu.planner import longest_row

    install()
    m = machine.current()
    longest = {
        (name, kind): longest_row(getattr(torch, name), m, output_row=kind == "row")
        for name in ("float32", "float16", "bfloat16")
        for kind in ("row", "one")
    }
    return {
        op: {name: longest[(name, kernel.whole_row)] for name in ("float32", "float16", "bfloat16")}
        for op, kernel in sorted(KERNELS.items())
        if kernel.whole_row is not None
    }


def load_or_run_sweep(
    cache: Path | None,
    *,
    refresh: bool = False,
    sample_limit: int | None = None,
    only: list[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """The OpInfo sweep as {"key", "sample_limit", "outcomes": [...]}, from cache if current.

    ``only`` restricts the sweep to these OpInfo names (a quick look; the file then
    covers only them).
    """
    key = source_key() + (
        "" if not only else "-" + hashlib.sha256(",".join(sorted(only)).encode()).hexdigest()[:8]
    )
    if cache is not None and cache.is_file() and not refresh:
        try:
            data = json.loads(cache.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict) and data.get("key") == key and data.get("sample_limit") == sample_limit:
            return data
    from torch.testing._internal.common_methods_invocations import op_db

    from runners.snpu.opinfo_sweep import sweep

    ops = list(op_db)
    if only:
        from runners.snpu.opinfo_sweep import opinfo_name

        unknown = sorted(set(only) - {opinfo_name(op) for op in ops})
        if unknown:
            from crcr.errors import InputError

            raise InputError(
                f"no OpInfo entry named {', '.join(unknown)}",
                hint="names as in op_db, e.g. add, nn.functional.relu",
            )
        ops = [op for op in ops if opinfo_name(op) in set(only)]
    done = [0]

    def tick(name: str) -> None:
        done[0] += 1
        if progress:
            progress(done[0], len(ops), name)

    result = sweep(ops, sample_limit=sample_limit, progress=tick)
    data = {"key": key, "sample_limit": sample_limit, "outcomes": [o.__dict__ for o in result.outcomes]}
    if cache is not None:
        from crcr.fileio import atomic_write_text

        atomic_write_text(cache, json.dumps(data, indent=0, sort_keys=True) + "\n")
    return data


def build(sweep_data: dict[str, Any] | None = None) -> dict[str, Any]:
    """The capability document; ``sweep_data`` from ``load_or_run_sweep`` adds OpInfo facts."""
    ops = registered_ops()
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "backend": "snpu",
        "device_type": "snpu",
        "dispatch_key": "PrivateUse1",
        "test_class_suffix": "PRIVATEUSE1",
        "generated_by": "crcr snpu capabilities",
        "torch_version": str(torch.__version__),
        "unsupported_op_error": "NotImplementedError (runners.snpu.errors.SnpuUnsupportedOpError)",
        "unsupported_dtype_error": "RuntimeError (runners.snpu.errors.SnpuDtypeError)",
        # integers and bool run on the vector unit (indexing, masks, integer arithmetic);
        # matmul and the special-function unit are float-only
        "dtypes": {
            "native_float": list(NATIVE),
            "integer_and_bool": list(INDEXING),
            "refused": list(REFUSED),
        },
        "features": dict(FEATURES),
        "limits": limits(),
        "aten_ops": ops,
        "aten_op_count": sum(len(v) for v in ops.values()),
        "out_routes": routed_out_overloads(),
        # every op says how it runs: tiled ops are checked by the tiling proof; whole-tensor
        # ops run untiled on device memory and are costed as one DMA
        "execution": executions(),
        "execution_count": {k: len(v) for k, v in executions().items()},
    }
    if sweep_data is not None:
        outcomes = sweep_data["outcomes"]
        per: dict[str, dict[str, Any]] = {}
        for dname in ("float32", "float16", "bfloat16"):
            rows = [o for o in outcomes if o["dtype"] == dname]
            per[dname] = {
                "pass": sorted(o["name"] for o in rows if o["status"] == "pass"),
                "fail": {
                    o["name"]: o["error"]
                    for o in sorted(rows, key=lambda o: o["name"])
                    if o["status"] == "fail"
                },
            }
        names = sorted({o["name"] for o in outcomes})
        covered = sorted(set(per["float32"]["pass"]))
        doc["opinfo"] = {
            "source": "torch.testing._internal.common_methods_invocations.op_db",
            "entries": len(names),
            "sample_limit": sweep_data.get("sample_limit"),
            "covered": covered,
            "covered_count": {d: len(per[d]["pass"]) for d in per},
            "by_dtype": per,
        }
    return doc


def to_yaml(doc: dict[str, Any]) -> str:
    import yaml

    header = (
        "# Generated by `crcr snpu capabilities` from what runners.snpu registers and from an OpInfo sweep.\n"
        "# Do not edit by hand: regenerate it. See docs/snpu.md.\n"
    )
    return header + yaml.safe_dump(doc, sort_keys=False, width=4096, default_flow_style=False)
