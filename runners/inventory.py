"""The inventory of what would run, taken from pytest's own collection (``--collect-only``).

Ids come from collection, never derived by hand. For tests that PyTorch's
``instantiate_device_type_tests`` generated, the instantiated function keeps its
parametrization (``device``, ``dtype``, ``op`` / ``module_info`` ...) as a default
argument and the template's name through ``functools.wraps``; both are read here.
Fingerprints hash the template's source and a stable description of the OpInfo, so a
new torch version yields added / removed / changed / unchanged sets.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
import textwrap
from functools import lru_cache
from pathlib import Path
from typing import Any

from crcr.contracts.inventory import Inventory, InventoryTest
from runners.runconfig import RunConfig

# decorators the selector's rules read (device restrictions, dtypes, skips, feature needs)
_INTERESTING = re.compile(
    r"^(only\w+|skip\w*|dtypes\w*|ops|modules|expectedFailure\w*|largeTensorTest|"
    r"deviceCountAtLeast|precisionOverride|toleranceOverride|slowTest|serialTest|parametrize|"
    r"unittest\.skip\w*|requires\w*|with_tf32_off|tf32_on_and_off)"
)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@lru_cache(maxsize=4096)
def _template_info(fn: Any) -> tuple[str | None, list[str]]:
    """(source fingerprint, decorators) of a test template, from its own source."""
    try:
        lines, _ = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None, []
    source = textwrap.dedent("".join(lines))
    decorators: list[str] = []
    try:
        tree = ast.parse(source)
        node = tree.body[0] if tree.body else None
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for dec in node.decorator_list:
                text = ast.unparse(dec)
                if _INTERESTING.match(text):
                    decorators.append(text if len(text) <= 200 else text[:197] + "...")
    except SyntaxError:
        pass
    return _digest(source), decorators


def _dtypes_text(dtypes: Any) -> str:
    return ",".join(sorted(str(d).replace("torch.", "") for d in (dtypes or ())))


def opinfo_fingerprint(info: Any) -> str:
    """A stable description of an OpInfo / ModuleInfo: no object addresses in it."""
    parts = [getattr(info, "name", ""), getattr(info, "variant_test_name", "")]
    for attr in ("dtypes", "backward_dtypes"):
        parts.append(f"{attr}={_dtypes_text(getattr(info, attr, None))}")
    for attr in (
        "supports_out",
        "supports_autograd",
        "supports_forward_ad",
        "supports_gradgrad",
        "aten_name",
    ):
        parts.append(f"{attr}={getattr(info, attr, None)}")
    ref = getattr(info, "ref", None)
    parts.append(f"ref={getattr(ref, '__qualname__', None) if ref is not None else None}")
    for fn_attr in ("sample_inputs_func", "reference_inputs_func", "module_inputs_func"):
        fn = getattr(info, fn_attr, None)
        parts.append(f"{fn_attr}={getattr(fn, '__qualname__', None)}")
    for deco in list(getattr(info, "decorators", ()) or ()) + list(getattr(info, "skips", ()) or ()):
        names = [getattr(d, "__name__", type(d).__name__) for d in getattr(deco, "decorators", ())]
        parts.append(
            f"deco={getattr(deco, 'cls_name', None)}.{getattr(deco, 'test_name', None)}"
            f"@{getattr(deco, 'device_type', None)}:{_dtypes_text(getattr(deco, 'dtypes', None))}:{names}"
        )
    return _digest("\n".join(str(p) for p in parts))


def _features(template: str, decorators: list[str], params: dict[str, Any]) -> list[str]:
    found: set[str] = set()
    text = template + " " + " ".join(decorators)
    if re.search(r"grad|backward|autograd", text):
        found.add("autograd")
    if re.search(r"(^|_)out($|_)", template):
        found.add("out")
    if "numpy_ref" in template:
        found.add("numpy-reference")
    # a @parametrize decorator names every value; this instance has one: the feature words are read from
    # its value (layout=torch.sparse_coo) or from a parameter named after the feature set truthy
    # (sparse_grad=True), not from the decorator (sparse_grad=False builds nothing sparse)
    fixed = (template + " " + " ".join(d for d in decorators if not d.startswith("parametrize"))).lower()
    for word in ("sparse", "quantized", "distributed", "compile", "jit", "cuda"):
        if word in fixed:
            found.add(word)
        elif any(
            word in str(v).lower() or (word in k.lower() and v not in (False, None, 0, "False"))
            for k, v in params.items()
            if k not in ("device", "dtype", "dtypes", "op", "module_info")
        ):
            found.add(word)
    if "module_info" in params:
        found.add("module")
    return sorted(found)


def describe(item: Any, device: str) -> InventoryTest:
    """One collected pytest item as an inventory entry."""
    nodeid: str = item.nodeid
    parts = nodeid.split("::")
    file = parts[0]
    cls = parts[1] if len(parts) > 2 else None
    method = parts[-1]
    fn = getattr(item, "obj", None)
    params: dict[str, Any] = {}
    defaults = getattr(fn, "__defaults__", None) or ()
    if defaults and isinstance(defaults[0], dict):
        params = dict(defaults[0])
    template = getattr(fn, "__name__", None) or method
    src_fp, decorators = _template_info(inspect.unwrap(fn)) if fn is not None else (None, [])
    info = params.get("op") or params.get("module_info")
    op_fp = opinfo_fingerprint(info) if info is not None else None
    dtype = _dtype_text(params)
    op_name = None
    if info is not None:
        op_name = getattr(info, "name", None)
        variant = getattr(info, "variant_test_name", "")
        if variant:
            op_name = f"{op_name}.{variant}"
    other = {
        k: str(v)
        for k, v in params.items()
        if k not in ("op", "module_info", "dtype", "device", "dtypes") and not callable(v)
    }
    fingerprint = _digest(f"{src_fp}|{op_fp}|{template}|{sorted(other.items())}")
    op_dtypes = _claimed_dtypes(params.get("op"), params.get("device"), device)
    return InventoryTest(
        id=nodeid,
        file=file,
        cls=cls,
        method=method,
        template=template if template != method else None,
        device=device,
        dtype=dtype,
        op=op_name,
        params=other,
        decorators=decorators,
        features=_features(template, decorators, params),
        fingerprint=fingerprint,
        source_fingerprint=src_fp,
        opinfo_fingerprint=op_fp,
        op_dtypes=op_dtypes,
    )


def _dtype_text(params: dict[str, Any]) -> str | None:
    """The test's dtype: ``float32``; for a test ``@dtypes`` instantiates with a tuple of dtypes (its
    argument is ``dtypes``: ``@dtypes(*product(get_all_dtypes(), get_all_dtypes()))``), every dtype of
    it joined as the id's suffix joins them (``bfloat16_complex128``), so the dtype rules see each."""
    import torch

    if params.get("dtype") is not None:
        return str(params["dtype"]).replace("torch.", "")
    several = params.get("dtypes")
    if isinstance(several, tuple | list) and several and all(isinstance(d, torch.dtype) for d in several):
        return "_".join(str(d).replace("torch.", "") for d in several)
    return None


def _claimed_dtypes(op: Any, device_param: Any, device: str) -> list[str] | None:
    """The dtypes an OpInfo claims for the test's device type (None for tests of no OpInfo)."""
    supported = getattr(op, "supported_dtypes", None)
    if supported is None:
        return None
    try:
        import torch

        device_type = torch.device(str(device_param)).type if device_param else device
        return sorted(str(d).replace("torch.", "") for d in supported(device_type))
    except Exception:  # an OpInfo that cannot answer for this device type claims nothing we can read
        return None


def write_inventory(items: list[Any], cfg: RunConfig, errors: list[Any] | None = None) -> None:
    """Write the collected tests, and one record per file that could not be imported."""
    import torch

    inventory = Inventory(
        source="embedded" if cfg.source == "embedded" else "pytorch-src",
        torch_version=torch.__version__,
        torch_git=getattr(torch.version, "git_version", None),
        device=cfg.device,
        granularity="test",
        tests=[describe(item, cfg.device) for item in items],
        errors=list(errors or []),
    )
    assert cfg.inventory_path is not None
    inventory.write(Path(cfg.inventory_path))
