"""Read torch's ``testing/_internal`` sources from an install or straight out of a wheel.

A wheel is a zip: reading its Python sources needs no install (the 2.14.1 wheel is
5.5 GB unpacked), and nothing in it is executed.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from selector.errors import SelectorInputError

INTERNAL = "torch/testing/_internal"
OPINFO_FILES = ("common_methods_invocations.py",)
OPINFO_DEFINITIONS = "opinfo/definitions"
_WHEEL_VERSION = re.compile(r"^torch-([^-]+)-")


class TorchSources:
    """Text of files under ``torch/testing/_internal`` of one torch version."""

    def __init__(self, location: Path | str, version: str | None = None) -> None:
        self.location = Path(location)
        self._zip: zipfile.ZipFile | None = None
        if self.location.suffix == ".whl":
            if not self.location.is_file():
                raise SelectorInputError(f"wheel {self.location} does not exist", hint="pass the path of a torch wheel")
            try:
                self._zip = zipfile.ZipFile(self.location)
            except zipfile.BadZipFile as exc:
                raise SelectorInputError(f"{self.location} is not a wheel (zip): {exc}") from exc
            m = _WHEEL_VERSION.match(self.location.name)
            self.version = version or (m.group(1) if m else None)
            self._names = {n for n in self._zip.namelist() if n.startswith(INTERNAL + "/") and n.endswith(".py")}
        else:
            root = self.location
            if (root / "torch").is_dir():
                root = root / "torch"
            self._root = root / "testing" / "_internal"
            if not self._root.is_dir():
                raise SelectorInputError(
                    f"{self.location} holds no torch/testing/_internal",
                    hint="pass a torch package directory, a site-packages directory or a .whl",
                )
            self.version = version or _version_from_dir(root)
            self._names = {
                f"{INTERNAL}/{p.relative_to(self._root).as_posix()}" for p in self._root.rglob("*.py")
            }

    def read(self, name: str) -> str:
        """Text of ``torch/testing/_internal/<name>``."""
        full = f"{INTERNAL}/{name}"
        if full not in self._names:
            raise SelectorInputError(f"{self.location} has no {full}")
        if self._zip is not None:
            return self._zip.read(full).decode("utf-8", "replace")
        return (self._root / name).read_text(encoding="utf-8", errors="replace")

    def opinfo_files(self) -> list[str]:
        """Files that define OpInfo databases, relative to ``testing/_internal``."""
        prefix = f"{INTERNAL}/{OPINFO_DEFINITIONS}/"
        defs = sorted(n[len(INTERNAL) + 1:] for n in self._names if n.startswith(prefix))
        return [f for f in OPINFO_FILES if f"{INTERNAL}/{f}" in self._names] + defs


    def helper_files(self) -> list[str]:
        """Files whose module-level functions OpInfo entries name (``prod_numpy`` is in opinfo/utils.py), after
        the database files: they are read for functions only."""
        prefix = f"{INTERNAL}/opinfo/"
        db = set(self.opinfo_files())
        return sorted(n[len(INTERNAL) + 1:] for n in self._names if n.startswith(prefix) and n[len(INTERNAL) + 1:] not in db)


def _version_from_dir(torch_dir: Path) -> str | None:
    version_file = torch_dir / "version.py"
    if version_file.is_file():
        m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", version_file.read_text(encoding="utf-8"))
        if m:
            return m.group(1)
    return None


def installed_torch_dir() -> Path:
    """The installed torch package directory, found without importing torch."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SelectorInputError("torch is not installed", hint="pip install 'crcr[torch]'")
    return Path(next(iter(spec.submodule_search_locations)))
