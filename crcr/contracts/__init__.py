"""Contracts: pydantic models of every file and wire format components exchange.

- ``dispatch``: CRCR's ``client_payload`` sent with ``repository_dispatch``
- ``callback``: CRCR's callback body (``workflow{...}``) and the triage verdict (v1)
- ``results``: the runners' per-test results of one job (uploaded to ``/results``)
- ``inventory``: what upstream tests exist (the selector plans over it)
- ``plan``: per-backend selection files and the one resolver (patterns, precedence)
- ``pick``: the ordered per-PR subset of a plan's runnable tests
- ``cputrace``: what a device test called on device tensors, run as its CPU twin or (snpu) as itself in snpu's shadow mode (``crcr select plan``'s trace)

All are versioned with ``schema_version``.
"""
