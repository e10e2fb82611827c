"""Small file helpers: atomic writes (temp file + rename) so a crash never half-writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from crcr.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _unwritable(path: Path, exc: OSError) -> InputError:
    why = "a file is in the way" if isinstance(exc, (FileExistsError, NotADirectoryError)) else exc.strerror
    return InputError(f"cannot write {path}: {why}", hint="give a path in a folder you can write")


def check_writable(path: Path | str) -> None:
    """Raise ``InputError`` now if ``path`` could not be written later (creates its folder)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a directory", hint="give a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(path, exc) from exc
    if not os.access(path.parent, os.W_OK):
        raise InputError(f"cannot write {path}: folder {path.parent} is not writable",
                         hint="give a path in a folder you can write")


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _unwritable(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp makes the file 0600; results and plans are for people and tools to read
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
