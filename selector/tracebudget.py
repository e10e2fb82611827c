"""The order in which ``crcr select plan`` spends a CPU-trace budget, and what a plan says of a test left out.

Tracing costs about 0.2-0.3 s per test cold, so a whole upstream file (``test_decomp.py``: 9,209 snpu tests) or
checkout cannot be traced in one plan without a bound. When a time budget runs out, the tests not traced yet are
planned by the static reading (and, for OpInfo tests of a generic template, by the template probe), so the order
decides how much the budget buys: :func:`trace_order` puts first the tests whose trace tells most that the
static reading cannot tell.

- One test per generic template (plain device tests) or per (template, op) (OpInfo tests of a generic template;
  ModuleInfo tests, whose op is the module)
  comes before the other dtype variants of the same body: those mostly call the same ops, and the dtype itself
  the static reading already weighs (its refused dtypes), so a second variant adds less than a first one of
  another body.
- Plain device tests before OpInfo and ModuleInfo tests in each of those two rounds: a plain test has only the static reading of
  its body behind it when untraced, an OpInfo test still has its op's samples probe.
- The representative variant is float32 when there is one (the dtype most tests are written for), else the one
  without a dtype, else the first by id; everything else is by file, then id, so the same inventory gives the
  same order (and so the same plan for the same budget).

Traces in the cache cost nothing: the caller takes them out before ordering, so a re-plan continues with the
next tests in this order and repeated plans converge on a fully traced plan.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar


class Traceable(Protocol):
    """What the order reads of an inventory test (``crcr.contracts.inventory.InventoryTest``)."""

    id: str
    file: str
    template: str | None
    op: str | None
    dtype: str | None
    cls: str | None


T = TypeVar("T", bound=Traceable)


def _variant_rank(dtype: str | None) -> int:
    return 0 if dtype == "float32" else 1 if not dtype else 2


def _group(test: Traceable) -> tuple[str, str, str, str]:
    """The body a test shares with its dtype variants: its file, class, template and op."""
    return test.file, test.cls or "", test.template or test.id, test.op or ""


def trace_order(tests: Iterable[T]) -> list[T]:
    """``tests`` in the order a budget should trace them (see the module docstring); deterministic."""
    ordered = sorted(tests, key=lambda t: (_group(t), _variant_rank(t.dtype), t.id))
    first: set[str] = set()
    seen: set[tuple[str, str, str, str]] = set()
    for t in ordered:
        if _group(t) not in seen:
            seen.add(_group(t))
            first.add(t.id)

    def rank(t: T) -> tuple[int, int, str, str]:
        return (0 if t.id in first else 1), (1 if t.op else 0), t.file, t.id

    return sorted(ordered, key=rank)


def budget_note(budget_s: float) -> str:
    """Why a test has no CPU trace when the budget ran out before its turn (in its plan reason)."""
    return f"not traced: the trace budget of {budget_s:g} s was spent (a re-plan continues)"
