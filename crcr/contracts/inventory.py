"""Inventory: what upstream tests exist, as pytest collects them.

Written by ``crcr run --collect-only --inventory FILE`` (the embedded op suite or a
PyTorch checkout as the runners see it) and by ``crcr select inventory`` (static AST
parsing of a checkout, or file level from test-times.json). The selector plans over it;
``crcr select upgrade`` compares two of them by fingerprint.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crcr.errors import ContractError, InputError

INVENTORY_SCHEMA_VERSION = 1

# class-name suffixes of upstream's in-tree device test bases (``TestFooCUDA``); an out-of-tree backend's are in
# :func:`device_class_suffixes`
IN_TREE_DEVICE_CLASS_SUFFIXES = ("CPU", "CUDA", "MPS", "XPU", "META", "LAZY", "HPU")


def device_class_suffixes(device: str | None) -> tuple[str, ...]:
    """The suffixes a class instantiated for the out-of-tree backend ``device`` carries: ``PRIVATEUSE1``
    (``PrivateUse1TestBase.device_type`` as it starts) or the backend's own name upper-cased (``SNPU``:
    ``PrivateUse1TestBase.setUpClass`` renames the base's device_type, and instantiating a test that takes a device
    runs it, so a file's later classes are ``TestBarSNPU`` beside its first ``TestFooPRIVATEUSE1``)."""
    own = device.upper() if device and device.lower() not in ("cpu", "privateuse1") else None
    return ("PRIVATEUSE1", own) if own and own not in IN_TREE_DEVICE_CLASS_SUFFIXES else ("PRIVATEUSE1",)


def generic_class(cls: str, device: str | None) -> str | None:
    """The generic class a device-instantiated class came from (``TestFooPRIVATEUSE1``, ``TestFooSNPU``,
    ``TestFooCUDA`` -> ``TestFoo``), None where ``cls`` carries no device class suffix."""
    for suffix in (*device_class_suffixes(device), *IN_TREE_DEVICE_CLASS_SUFFIXES):
        if cls.endswith(suffix) and len(cls) > len(suffix):
            return cls[: -len(suffix)]
    return None


def device_class_names(cls: str, device: str | None) -> list[str]:
    """``cls`` first, then the other names the same class takes when instantiated for ``device`` (the collected
    ``TestFooSNPU`` is ``TestFooPRIVATEUSE1`` in a process that instantiated it first, and the other way round)."""
    base = generic_class(cls, device)
    if base is None or not cls.endswith(device_class_suffixes(device)):
        return [cls]
    return [cls, *(base + s for s in device_class_suffixes(device) if base + s != cls)]


class InventoryTest(BaseModel):
    """One test as pytest names it, with what classification needs to know about it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str = Field(description="full pytest id: test/test_ops.py::TestCommonPRIVATEUSE1::test_x_snpu_float32")
    file: str = Field(description="upstream file, e.g. test/test_ops.py")
    cls: str | None = Field(None, alias="class", description="instantiated class name")
    method: str = Field(description="instantiated method name")
    template: str | None = Field(None, description="the generic method before instantiation, e.g. test_compare_cpu")
    device: str | None = None
    dtype: str | None = None
    op: str | None = Field(None, description="OpInfo name (with variant, e.g. nn.functional.relu)")
    params: dict[str, str] = Field(default_factory=dict, description="other parametrization values")
    decorators: list[str] = Field(default_factory=list, description="decorators that matter: onlyCUDA, dtypes(...), skipIf...")
    features: list[str] = Field(default_factory=list, description="needs such as autograd, out, sparse, distributed")
    fingerprint: str = Field(description="hash of source_fingerprint and opinfo_fingerprint")
    source_fingerprint: str | None = Field(None, description="hash of the test's own source")
    opinfo_fingerprint: str | None = Field(None, description="hash of the OpInfo entry it expands")
    op_dtypes: list[str] | None = Field(None, description="dtypes the OpInfo claims for this test's device type "
                                        "(what test_dtypes compares the backend with)")
    duration_s: float | None = Field(None, description="measured or estimated duration")

    @property
    def per_device(self) -> bool:
        """Whether the test is an instance of a class instantiated per device type: its method name carries the
        device (``TestFooPRIVATEUSE1::test_x_snpu_float32``). A plain ``TestCase``'s test, collected for the device
        all the same (``TestFoo::test_x``), builds its tensors on the CPU unless its body names the backend."""
        return bool(self.device) and re.search(rf"_{re.escape(self.device)}(_|$)", self.method) is not None

    @property
    def relative_id(self) -> str:
        """The id inside its file (``Class::method``), as plan entries use it."""
        return self.id.split("::", 1)[1] if "::" in self.id else self.id


class InventoryError(BaseModel):
    """An upstream file that could not be imported (so none of its tests is inventoried)."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(description="upstream file, e.g. test/test_ops.py")
    error_class: str = Field(description="ImportError, ModuleNotFoundError, AttributeError, SyntaxError ...")
    missing: str | None = Field(None, description="the name the installed torch lacks, e.g. skip")
    module: str | None = Field(None, description="where it was looked up, e.g. torch.testing._internal.common_methods_invocations")
    torch_version: str | None = None
    message: str = Field(description="the error, bounded")

    def describe(self) -> str:
        """``test/test_ops.py: cannot import skip from torch....common_methods_invocations on torch 2.13.0``."""
        if self.missing and self.module:
            what = f"{self.error_class}: {self.module} has no {self.missing!r}"
        elif self.missing:
            what = f"{self.error_class}: no module or name {self.missing!r}"
        else:
            what = f"{self.error_class}: {self.message.splitlines()[0][:200] if self.message else ''}"
        return f"{self.file} does not import on torch {self.torch_version or '?'} ({what})"


_IMPORT_NAME = re.compile(r"(ImportError): cannot import name '([^']+)' from '([^']+)'")
_NO_MODULE = re.compile(r"(ModuleNotFoundError): No module named '([^']+)'")
_NO_ATTR = re.compile(r"(AttributeError): module '([^']+)' has no attribute '([^']+)'")
_ANY_ERROR = re.compile(r"^E?\s*(\w+(?:Error|Exception))\b", re.M)


def parse_import_failure(file: str, text: str, torch_version: str | None) -> InventoryError:
    """Read pytest's collection error text for the name the installed torch lacks."""
    if m := _IMPORT_NAME.search(text):
        cls, missing, module = m.group(1), m.group(2), m.group(3)
    elif m := _NO_MODULE.search(text):
        cls, missing, module = m.group(1), m.group(2), None
    elif m := _NO_ATTR.search(text):
        cls, module, missing = m.group(1), m.group(2), m.group(3)
    else:
        found = _ANY_ERROR.findall(text)
        cls, missing, module = (found[-1] if found else "CollectionError"), None, None
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    # pytest marks the exception's own lines with "E"; the last of them says what went wrong
    said = [ln[1:].strip() for ln in lines if ln.startswith("E ") and cls in ln]
    tail = "\n".join(lines[-8:])
    message = (said[-1] + "\n" + tail) if said else tail
    return InventoryError(file=file, error_class=cls, missing=missing, module=module, torch_version=torch_version,
                          message=message[:2000])


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = INVENTORY_SCHEMA_VERSION
    source: Literal["embedded", "pytorch-src", "test-times", "opinfo"] = Field(
        description="embedded op suite, a PyTorch checkout, test-times.json (file level), or OpInfo-level static"
    )
    torch_version: str | None = None
    torch_git: str | None = None
    device: str | None = None
    granularity: Literal["test", "file", "opinfo"] = "test"
    tests: list[InventoryTest] = Field(default_factory=list)
    errors: list[InventoryError] = Field(default_factory=list, description="files that could not be imported")

    def by_id(self) -> dict[str, InventoryTest]:
        return {t.id: t for t in self.tests}

    def files(self) -> list[str]:
        return sorted({t.file for t in self.tests})

    def counts(self) -> dict[str, int]:
        return dict(Counter(t.file for t in self.tests))

    def write(self, path: Path) -> None:
        """Write atomically (a crash never leaves half a file)."""
        from crcr.fileio import atomic_write_text

        self.tests.sort(key=lambda t: t.id)
        atomic_write_text(path, self.model_dump_json(by_alias=True, indent=1, exclude_none=True) + "\n")


def load_inventory(path: Path | str) -> Inventory:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"inventory {path} does not exist", hint="write one with: crcr run --collect-only --inventory FILE")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ContractError(f"{path}: not valid JSON ({exc})", hint="regenerate the inventory") from exc
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ContractError(f"{path}: {loc}: {first['msg']}", hint="regenerate the inventory with this crcr version") from exc
