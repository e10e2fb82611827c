"""Shared by the offline agent's reading tests: an inventory record for a test in a fixture file."""

from __future__ import annotations

from crcr.contracts.inventory import InventoryTest


def device_test(file: str, cls: str, method: str, dtype: str | None, device: str = "snpu") -> InventoryTest:
    """The record pytest's collection gives ``cls.method`` of ``file`` instantiated for ``device`` (and ``dtype``)."""
    name = f"{method}_{device}" + (f"_{dtype}" if dtype else "")
    return InventoryTest(
        id=f"{file}::{cls}::{name}",
        file=file,
        cls=cls,
        method=name,
        template=method,
        device=device,
        dtype=dtype,
        fingerprint="f" + name,
    )
