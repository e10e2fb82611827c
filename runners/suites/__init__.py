"""Test suites the runners ship.

``embedded/`` is the embedded op suite: device-generic tests over the installed
torch's ``op_db`` and ``module_db`` laid out like upstream's ``test/`` folder, so the
ids pytest collects (``test/test_ops.py::TestCommonPRIVATEUSE1::test_compare_cpu_add_snpu_float32``)
name the upstream file whose checks they mirror, and plan files per upstream file
apply to them unchanged. ``_checks`` holds the helpers those tests share.
"""

from __future__ import annotations

from pathlib import Path

EMBEDDED_ROOT = Path(__file__).resolve().parent / "embedded"
