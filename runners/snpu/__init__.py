"""snpu: a simulated NPU registered as a real PyTorch device (PrivateUse1 renamed ``snpu``).

Importing this package has no side effects (torch is not even imported). Public API:

- ``install()``: register the device; idempotent. Then ``torch.device("snpu")`` works.
- ``is_installed()``
- ``profile()``: context manager collecting per-op counters (cycles, bytes, sticks...).
- ``fallback_counts()``: ops that ran on the CPU under ``CRCR_SNPU_FALLBACK=cpu``.
- ``capability_document()``: what the device supports (configs/backends/snpu.yaml).

See docs/snpu.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from runners.snpu.counters import Profile

__all__ = ["capabilities", "fallback_counts", "install", "is_installed", "profile"]


def install() -> None:
    """Register ``snpu`` as a PyTorch device (PrivateUse1); safe to call repeatedly."""
    from runners.snpu.device import install as _install

    _install()


def is_installed() -> bool:
    from runners.snpu.device import is_installed as _is_installed

    return _is_installed()


def profile() -> Iterator[Profile]:  # type: ignore[misc]
    """Context manager: ``with profile() as p: ...; p.totals(), p.by_op()``."""
    from runners.snpu.counters import profile as _profile

    return _profile()


def fallback_counts() -> dict[str, int]:
    from runners.snpu.counters import fallback_counts as _fallback_counts

    return _fallback_counts()


def capability_document(**kwargs: Any) -> dict[str, Any]:
    """The capability document without OpInfo facts (see ``runners.snpu.capabilities.build``)."""
    from runners.snpu.capabilities import build

    return build(**kwargs)
