"""The order in which ``crcr select plan`` spends its template-probe budget, and what a plan says of a test
whose probe did not run.

A probe costs about 0.05-0.15 s (an OpInfo entry's first samples on snpu) plus a child's start, and a whole
upstream file asks for thousands (the selector's fixture tree: 4,541; ``test_decomp.py`` ran ~9.5 min), so
``--probe-budget`` bounds them like ``--trace-budget`` bounds the trace (``selector.tracebudget``). When the budget
runs out, the tests whose probe did not run are planned by the rules after the probe (the capability file's
kernel list and sweep), which is the static reading a plan without probes gets, and their reasons say so.

The order spreads the budget over ops before dtypes: one probe per (family, op) first, at float32 where it is
asked for (the dtype most templates are written for), else without a dtype, else the first asked; then the other
dtypes. ``attrs`` probes (the OpInfo attributes a template reads; no device work) come first of all. Within a
round by family, op and dtype, so the same requests give the same order (and so the same plan for the same
budget). Cached answers cost nothing: the caller takes them out before ordering, so a re-plan continues with the
next probes in this order and repeated plans converge on the fully probed plan.
"""

from __future__ import annotations

from collections.abc import Iterable

Request = tuple[str, str, str | None]  # (family, op, dtype or None), as ``selector.rules.probe_requests`` gives


def _dtype_rank(dtype: str | None) -> int:
    return 0 if dtype == "float32" else 1 if dtype is None else 2


def probe_order(requests: Iterable[Request]) -> list[Request]:
    """``requests`` in the order a budget should run them (see the module docstring); deterministic."""
    unique = sorted(set(requests), key=lambda r: (r[0], r[1], _dtype_rank(r[2]), r[2] or ""))
    first: set[Request] = set()
    seen: set[tuple[str, str]] = set()
    for r in unique:
        if (r[0], r[1]) not in seen:
            seen.add((r[0], r[1]))
            first.add(r)

    def rank(r: Request) -> tuple[int, int, str, str, int, str]:
        return (0 if r[0] == "attrs" else 1), (0 if r in first else 1), r[0], r[1], _dtype_rank(r[2]), r[2] or ""

    return sorted(unique, key=rank)


def probe_budget_note(budget_s: float) -> str:
    """Why a test was planned without its template probe when the budget ran out before the probe's turn."""
    return f"template probe not run: the probe budget of {budget_s:g} s was spent (a re-plan continues)"
